"""The trainer bench/trainer_kills.py and bench/chaos.py kill: reads its records (``primus_runtime.data.reader``), appends each
to a file of its own the moment it is processed, at a steady pace; under exactly-once it saves the
records read since its last checkpoint as a checkpoint file and commits it every COMMIT_EVERY records.

Env: OUT_DIR, PACE (records per second), COMMIT_EVERY (exactly-once), SLOW_INDEX and SLOW_PACE
(the executor index that reads at SLOW_PACE instead).
"""

import os
import sys
import time

from primus_runtime.data.reader import commit, records

out_dir = os.environ["OUT_DIR"]
pace = float(os.environ.get("PACE", "2000"))
if os.environ.get("SLOW_INDEX") == os.environ["PRIMUS_INDEX"]:  # bench/chaos.py's slow trainer
    pace = float(os.environ["SLOW_PACE"])
commit_every = int(os.environ.get("COMMIT_EVERY", "0"))
name = f"{os.environ['PRIMUS_ROLE']}-{os.environ['PRIMUS_INDEX']}-{os.environ['PRIMUS_ATTEMPT']}-{os.getpid()}"
fd = os.open(os.path.join(out_dir, name + ".txt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
if commit_every:  # where the executor reads this trainer's commits (a YARN container's log dir...): the
    with open(os.path.join(out_dir, f"commit-file-{name}"), "w") as f:  # bench checks what it says
        f.write(os.environ["PRIMUS_DATA_COMMIT_FILE"])
pending: list[bytes] = []
count = 0
started = time.monotonic()


def checkpoint(label: str) -> None:
    """Save the model (the records since the last checkpoint), then commit it."""
    path = os.path.join(out_dir, f"batch-{label}.txt")
    with open(path, "wb") as f:
        f.write(b"".join(pending))
        f.flush()
        os.fsync(f.fileno())
    commit(label)
    pending.clear()




def plain_stdin():
    """Line by line from ``sys.stdin`` (a text stream reading 8 KiB at a time), nothing else."""
    for line in sys.stdin:
        yield line.rstrip("\n").encode()


for record in plain_stdin() if os.environ.get("READER") == "stdin" else records(sys.stdin.buffer):
    count += 1
    if commit_every:
        pending.append(record + b"\n")
        if count % commit_every == 0:
            checkpoint(f"{name}-{count}")
    else:
        os.write(fd, record + b"\n")  # processed: it reached the output
    if count % 100 == 0:  # a steady pace, like a training step per batch
        ahead = started + count / pace - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
if commit_every:
    checkpoint(f"{name}-final")
