"""Goodput under faults: the AM's ETTR (productive executor-seconds over all of them, ``status.goodput``)
of a job whose trainers are SIGKILLed every FAULT_EVERY seconds and whose AM is SIGKILLed once midway,
against the same job without faults, both on the local backend.

The job: WORKERS workers (``restart: on_failure``), each a light trainer that "trains" in steps of a
second (a little CPU, mostly sleep, as a trainer waiting on its accelerator) and saves its progress
after each step to a checkpoint of its index, which a replacement resumes from: each index trains
DURATION seconds in all, killed or not, so the two jobs are about DURATION long. The AM may be
restarted once (``am.max_attempts`` 2): it adopts the running executors. The two jobs run at once
(they share the machine alike); the faults start with the jobs' start. A trainer kill picks a random
running trainer of the faulty job; the AM kill comes at DURATION / 2.

It prints each job's outcome and goodput (the AM's breakdown by cause), and last:
``goodput: ETTR <x> with a fault every <N> s (<k> trainer kills, 1 AM kill) vs <y> without faults: <x/y>x``.
Goal: ETTR >= 0.95 with faults.

    python bench/goodput.py     # env: DURATION (600), FAULT_EVERY (45), WORKERS (4)
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import job_processes
from primus_runtime.cli import goodput_line
from primus_runtime.client import PrimusClient
from primus_runtime.models import StatusSummary

DURATION = float(os.environ.get("DURATION", 600))
FAULT_EVERY = float(os.environ.get("FAULT_EVERY", 45))
WORKERS = int(os.environ.get("WORKERS", 4))
STEP = 1.0  # seconds of training between checkpoints
MARK = "primus-goodput-trainer"  # in the trainer's argv: how the kills find the job's trainers

# Resumes from its index's checkpoint (the seconds trained so far), trains a step, saves, until DURATION.
TRAINER = f"""# {MARK}
import os, time
path = os.path.join(os.environ["CKPT_DIR"], os.environ["PRIMUS_ROLE"] + "-" + os.environ["PRIMUS_INDEX"])
try:
    trained = float(open(path).read())
except (OSError, ValueError):
    trained = 0.0
total = float(os.environ["DURATION"])
while trained < total:
    step = min({STEP}, total - trained)
    end = time.monotonic() + step
    while time.monotonic() < end:
        sum(i * i for i in range(2000))
        time.sleep(0.05)
    trained += step
    with open(path + ".tmp", "w") as f:
        f.write(repr(trained))
    os.replace(path + ".tmp", path)
"""


def spec(name: str, checkpoints: Path) -> dict[str, Any]:
    return {"name": name,
            "roles": [{"name": "worker", "replicas": WORKERS, "command": [sys.executable, "-c", TRAINER],
                       "env": {"CKPT_DIR": str(checkpoints), "DURATION": str(DURATION)},
                       "failover": {"restart": "on_failure", "max_failures_per_index": 1000}}],
            "am": {"max_attempts": 2, "recovery_grace": "30s"}}


def inject_faults(client: PrimusClient, app: str) -> int:
    """SIGKILL a random trainer of ``app`` every FAULT_EVERY s and its AM once at DURATION / 2, until the
    job ends; the trainer kills made."""
    job = client.cluster("local").job(app)
    started = time.monotonic()
    next_kill, am_kill = FAULT_EVERY, DURATION / 2
    kills = 0
    while time.monotonic() - started < DURATION * 2 + 120:
        time.sleep(0.2)
        elapsed = time.monotonic() - started
        if am_kill is not None and elapsed >= am_kill:
            os.kill(json.loads(job.am_info.read_text())["pid"], signal.SIGKILL)
            am_kill = None
        if elapsed >= next_kill:
            next_kill += FAULT_EVERY
            trainers = job_processes(app, MARK.encode())
            if trainers:
                try:
                    os.kill(random.choice(trainers), signal.SIGKILL)
                    kills += 1
                except ProcessLookupError:
                    pass
        state = (job.read_json(job.status) or {}).get("job", {}).get("state")
        if state in ("succeeded", "failed", "killed"):
            break
    return kills


def report(label: str, status: StatusSummary) -> float:
    assert status.goodput is not None and status.goodput.ratio is not None, status
    seconds = (status.job.finished_at or time.time()) - status.job.created_at
    print(f"{label}: {status.job.state.value} in {seconds:.1f} s, {sum(r.restarts for r in status.roles)} restarts, "
          f"{len(status.job.am_attempts)} AM restart(s); {goodput_line(status.goodput)}")
    return status.goodput.ratio


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="primus-goodput-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        client = PrimusClient(home=work / "home")
        (work / "faults").mkdir()
        (work / "clean").mkdir()
        faulty = client.submit(spec("goodput-faults", work / "faults"))
        clean = client.submit(spec("goodput-clean", work / "clean"))
        kills = inject_faults(client, faulty)
        for app in (faulty, clean):
            status = client.wait(app, timeout=DURATION * 2 + 120)
            if status.job.state != "succeeded":
                raise SystemExit(f"{app} {status.job.state.value}: {status.job.reason}")
        with_faults = report("with faults", client.status(faulty, summary=True))
        without = report("without faults", client.status(clean, summary=True))
    print(f"goodput: ETTR {with_faults:.3f} with a fault every {FAULT_EVERY:g} s ({kills} trainer kills, 1 AM kill) "
          f"vs {without:.3f} without faults: {with_faults / without:.3f}x")


if __name__ == "__main__":
    main()
