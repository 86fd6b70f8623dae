"""A trainer for the data-plane tests: reads its stdin records, appends each (and a newline) to a
file of its own. Records are decoded by primus_runtime.data.reader (PRIMUS_INPUT_FRAMING).

Env: OUT_DIR (where to write), COMMIT_EVERY (exactly-once: every this many records, save the
records read since the last checkpoint as a checkpoint file batch-*.txt and commit it, as a
trainer does with its model; the checkpoint it was told to restore goes to restore-*.txt), DIE_AFTER (exit 1 after this many lines, on attempts listed
in DIE_ON_ATTEMPTS, e.g. "0,1"), SLEEP_EVERY / SLEEP (pause SLEEP seconds every SLEEP_EVERY
lines, to make a run last), EXIT_AFTER (exit 0 after this many lines, before the end of the input,
on the executor indices listed in EXIT_ON_INDEX, e.g. "0"), CHECKPOINT_ON_SIGTERM (on SIGTERM, commit
what it read and exit 0 after the record in hand, as a trainer told of a preemption does).
"""

import os
import signal
import sys
import time

from primus_runtime.data.reader import commit, records, restore_checkpoint

out_dir = os.environ["OUT_DIR"]
attempt = os.environ.get("PRIMUS_ATTEMPT", "0")
name = f"{os.environ['PRIMUS_ROLE']}-{os.environ['PRIMUS_INDEX']}-{attempt}-{os.getpid()}.txt"
die_after = int(os.environ.get("DIE_AFTER", "0"))
die = die_after and attempt in os.environ.get("DIE_ON_ATTEMPTS", "0").split(",")
sleep_every = int(os.environ.get("SLEEP_EVERY", "0"))
pause = float(os.environ.get("SLEEP", "0"))
commit_every = int(os.environ.get("COMMIT_EVERY", "0"))
exit_after = int(os.environ.get("EXIT_AFTER", "0"))
if os.environ["PRIMUS_INDEX"] not in os.environ.get("EXIT_ON_INDEX", os.environ["PRIMUS_INDEX"]).split(","):
    exit_after = 0
fd = os.open(os.path.join(out_dir, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
if commit_every:
    with open(os.path.join(out_dir, "restore-" + name), "w") as f:
        f.write(restore_checkpoint() or "none")


def checkpoint(name: str, batch: list) -> None:
    """Save the model (here: the records since the last checkpoint), then commit it."""
    with open(os.path.join(out_dir, f"batch-{name}.txt"), "wb") as f:
        f.write(b"".join(batch))
        f.flush()
        os.fsync(f.fileno())
    commit(name)


leaving = []
if os.environ.get("CHECKPOINT_ON_SIGTERM"):
    signal.signal(signal.SIGTERM, lambda signum, frame: leaving.append(signum))
pending = []
count = 0
for record in records(sys.stdin.buffer):
    count += 1
    if commit_every:
        pending.append(record + b"\n")
        if count % commit_every == 0:
            checkpoint(f"ckpt-{attempt}-{os.getpid()}-{count}", pending)
            pending = []
    else:
        os.write(fd, record + b"\n")
    if die and count >= die_after:
        os._exit(1)
    if exit_after and count >= exit_after:
        os._exit(0)
    if leaving:
        break
    if sleep_every and count % sleep_every == 0:
        time.sleep(pause)
if commit_every:
    checkpoint(f"ckpt-{attempt}-{os.getpid()}-final", pending)
os.close(fd)
print(f"consumed {count} lines")
