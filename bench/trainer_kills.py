"""Trainers SIGKILLed at random while they read: records lost, duplicates per kill, exactly-once.

The issue-10 repro, with default settings (``max_task_attempts`` 3 and the rest): one day of
RECORDS text records of 21 bytes in 256 KiB tasks, read by 3 workers (``restart: on_failure``,
``max_failures_per_index: 100``) at PACE records/s each (bench/chaos_trainer.py writes every record
it processed to a file of its own). Every INTERVAL seconds a random reading trainer is SIGKILLed,
KILLS times. Four runs on the local backend, each measured here:

1. baseline, no kills: every record once; gives the trainers' real pace, so that "one heartbeat of
   progress" (records a trainer processes in one heartbeat interval) is measured, not assumed;
2. at-least-once with kills, trainers reading through ``data.reader.records()`` (which tells the
   executor which records they are done with): 0 lost; duplicates per kill;
3. at-least-once with kills, plain stdin trainers (``for line in sys.stdin``): the executor knows only
   what left the pipe; 0 lost; duplicates per kill, in records and bytes (goal: <= 8 KiB, what
   ``sys.stdin`` takes from the pipe at a time);
4. exactly-once with kills (commit every 500 records): 0 lost, 0 duplicates in the committed
   checkpoints.

The last line is duplicates per kill of runs 2 and 3 as ratios of one heartbeat of a trainer's
progress (run 1), and run 3's bytes against the 8 KiB goal (before the pipe's unread bytes were
asked for at the trainer's death: about 5,200 records per kill, 13x the goal).
Loopback only, bounded: each run gives up after TIMEOUT seconds.
Env: RECORDS (200000), KILLS (10), INTERVAL (2), PACE (2000), TIMEOUT (180), JSON=1 (print each
run's figures as JSON too).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from chaos import write_input  # the same numbered records

from primus_runtime.client import PrimusClient

HERE = Path(__file__).resolve().parent

RECORDS = int(os.environ.get("RECORDS", "200000"))
KILLS = int(os.environ.get("KILLS", "10"))
INTERVAL = float(os.environ.get("INTERVAL", "2"))
PACE = float(os.environ.get("PACE", "2000"))
TIMEOUT = float(os.environ.get("TIMEOUT", "180"))
HEARTBEAT = 1.0
RECORD_BYTES = 21  # chaos.write_input's records, newline included
GOAL_BYTES = 8 * 1024  # plain stdin trainers: duplicates per kill


def spec(data: Path, out: Path, exactly_once: bool, reader: str = "records") -> dict[str, Any]:
    env = {"OUT_DIR": str(out), "PACE": str(PACE), "READER": reader}
    if exactly_once:
        env["COMMIT_EVERY"] = "500"
    return {
        "name": "chaos",
        "roles": [{"name": "worker", "replicas": 3, "consumes_input": True,
                   "command": [sys.executable, str(HERE / "chaos_trainer.py")], "env": env,
                   "failover": {"restart": "on_failure", "max_failures_per_index": 100}}],
        "am": {"heartbeat_interval": f"{HEARTBEAT}s"},
        "input": {"sources": [{"name": "daily", "path": str(data) + "/{{YYYY}}{{MM}}{{DD}}/",
                               "pattern": "data-*"}],
                  "time_range": {"start": "2020-01-03", "end": "2020-01-03"},
                  "task_size": "256Ki",
                  "delivery": "exactly_once" if exactly_once else "at_least_once"},
    }


def running_trainers(app: str, killed: set[int]) -> list[int]:
    """Pids of the job's trainers that still run (found by their command and PRIMUS_APP_ID)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) in killed:
            continue
        try:
            if b"chaos_trainer.py" in (proc / "cmdline").read_bytes() and \
                    f"PRIMUS_APP_ID={app}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def committed(client: PrimusClient, app: str, out: Path) -> list[str]:
    """Exactly-once: the records of every checkpoint an executor saw committed."""
    names = [json.loads(line)["checkpoint"] for f in client.cluster("local").job(app).path.rglob("commits.jsonl")
             for line in f.read_text().splitlines()]
    return [line for name in names for line in (out / f"batch-{name}.txt").read_text().split()]


def run(client: PrimusClient, data: Path, work: Path, expected: list[str], kills: int,
        exactly_once: bool, reader: str = "records") -> dict[str, Any]:
    out = work / f"out-{kills}-{exactly_once}-{reader}"
    out.mkdir()
    app = client.submit(spec(data, out, exactly_once, reader))
    started = time.monotonic()
    killed: set[int] = set()
    while len(killed) < kills and time.monotonic() - started < TIMEOUT:
        time.sleep(INTERVAL)
        if client.status(app).job.state in ("succeeded", "failed", "killed"):
            break
        candidates = running_trainers(app, killed)
        if candidates:
            pid = random.choice(candidates)
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
    status = client.wait(app, timeout=max(10.0, TIMEOUT - (time.monotonic() - started)))
    seconds = time.monotonic() - started
    if exactly_once:
        got = committed(client, app, out)
    else:
        got = [line for f in out.glob("worker-*.txt") for line in f.read_text().split()]
    counts = Counter(got)
    lost = len(set(expected) - counts.keys())
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    return {"delivery": "exactly_once" if exactly_once else "at_least_once", "reader": reader, "kills": len(killed),
            "state": status.job.state.value, "reason": status.job.reason, "seconds": round(seconds, 1),
            "records": len(expected), "lost": lost, "duplicates": duplicates,
            "duplicates_per_kill": round(duplicates / len(killed), 1) if killed else 0.0,
            "restarts": sum(r.restarts for r in status.roles)}


def main() -> None:
    # A job's AM may still write its history as the bench ends: what is left is removed as far as it can be.
    with tempfile.TemporaryDirectory(prefix="primus-trainer-kills-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        os.environ["PRIMUS_HOME"] = str(work / "home")
        client = PrimusClient(home=work / "home")
        expected = write_input(work / "data", RECORDS)
        base = run(client, work / "data", work, expected, 0, exactly_once=False)
        alo = run(client, work / "data", work, expected, KILLS, exactly_once=False)
        stdin = run(client, work / "data", work, expected, KILLS, exactly_once=False, reader="stdin")
        eo = run(client, work / "data", work, expected, KILLS, exactly_once=True)
        for result in (base, alo, stdin, eo):
            print(json.dumps(result) if os.environ.get("JSON") else
                  f"{result['delivery']:>13} {result['reader']:>7} kills {result['kills']:2d}: {result['state']} in "
                  f"{result['seconds']} s, lost {result['lost']}, duplicates {result['duplicates']} "
                  f"({result['duplicates_per_kill']} per kill), restarts {result['restarts']}")
        per_trainer = RECORDS / base["seconds"] / 3  # the baseline's real pace, start-up included
        heartbeat = per_trainer * HEARTBEAT
        print(f"one heartbeat of a trainer's progress: {heartbeat:.0f} records ({per_trainer:.0f} records/s each)")
        stdin_bytes = stdin["duplicates_per_kill"] * RECORD_BYTES
        print(f"plain stdin trainers: {stdin['duplicates_per_kill']:.0f} records = {stdin_bytes / 1024:.1f} KiB "
              f"fed again per kill (goal <= {GOAL_BYTES // 1024} KiB)")

        def ratio(value: float) -> str:
            return f"{value / heartbeat:.2f}x" if heartbeat else "infx"

        print(f"at-least-once duplicates per kill against one heartbeat of progress: data.reader "
              f"{ratio(alo['duplicates_per_kill'])}, plain stdin {ratio(stdin['duplicates_per_kill'])}; "
              f"plain stdin against the {GOAL_BYTES // 1024} KiB goal: {stdin_bytes / GOAL_BYTES:.2f}x")

if __name__ == "__main__":
    main()
