"""Failure recovery: an executor is killed (SIGKILL) -> its replacement's trainer
runs. Median over RUNS kills within one job, against starting the same trainer
command with plain subprocess (what a bare restart costs), in the same run.

    python bench/recovery.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import median_ms, trainer_command, wait_for_files  # noqa: E402
from primus_runtime.client import PrimusClient  # noqa: E402

RUNS = int(os.environ.get("RUNS", 7))


def plain_restart(marker_dir: Path, seen: set[str]) -> float:
    start = time.monotonic()
    proc = subprocess.Popen(trainer_command(marker_dir), start_new_session=True,
                            env={**os.environ, "PRIMUS_ROLE": "plain", "PRIMUS_INDEX": "0",
                                 "PRIMUS_INCARNATION": str(time.monotonic_ns())})
    done = _wait_new(marker_dir, "plain-*", seen, start)
    proc.kill()
    proc.wait()
    return done - start


def _wait_new(marker_dir: Path, pattern: str, seen: set[str], start: float, timeout: float = 60) -> float:
    while True:
        fresh = {p.name for p in marker_dir.glob(pattern)} - seen
        if fresh:
            seen.update(fresh)
            return time.monotonic()
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"no new {pattern} marker")
        time.sleep(0.005)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        client = PrimusClient(Path(tmp) / "home")
        marker_dir = Path(tmp) / "markers"
        marker_dir.mkdir()
        app = client.submit({
            "name": "bench-recovery",
            "am": {"heartbeat_interval": "1s", "heartbeat_timeout": "10s"},
            "roles": [{"name": "worker", "replicas": 2, "command": trainer_command(marker_dir),
                       "failover": {"max_failures_per_index": RUNS + 1}}],
        })
        wait_for_files([marker_dir], timeout=5)
        seen: set[str] = set()
        _wait_new(marker_dir, "worker-1-*", seen, time.monotonic())
        plain, ours = [], []
        for run in range(RUNS):
            plain.append(plain_restart(marker_dir, seen))
            victim = next(e for e in client.status(app).executors if e.id == "worker-1")
            while victim.state != "running":
                time.sleep(0.01)
                victim = next(e for e in client.status(app).executors if e.id == "worker-1")
            start = time.monotonic()
            os.kill(victim.pid, signal.SIGKILL)  # the executor process itself
            ours.append(_wait_new(marker_dir, "worker-1-*", seen, start) - start)
            print(f"kill {run + 1}: replacement running after {ours[-1] * 1000:.0f} ms "
                  f"(plain start {plain[-1] * 1000:.0f} ms)", flush=True)
        status = client.kill(app)
        restarts = next(r for r in status.roles if r.name == "worker").restarts
        assert restarts == RUNS, f"expected {RUNS} restarts, the AM counted {restarts}"
    ratio = sorted(ours)[len(ours) // 2] / sorted(plain)[len(plain) // 2]
    print(f"recovery (executor SIGKILL -> replacement trainer running): median {median_ms(ours)} vs plain "
          f"start {median_ms(plain)}: {ratio:.1f}x")


if __name__ == "__main__":
    main()
