"""Submit -> all executors running, for 1 AM + 8 executors, against starting
the same 8 trainer commands with plain subprocess.

"Running" means the same thing on both sides: the trainer command has started
(it touches a marker file as its first act). Prints the median of RUNS runs;
the last line is the ratio.

    python bench/startup.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import clear, median_ms, trainer_command, wait_for_files  # noqa: E402
from primus_runtime.client import PrimusClient  # noqa: E402

EXECUTORS = 8
RUNS = int(os.environ.get("RUNS", 7))


def plain_subprocess(marker_dir: Path) -> float:
    """Start the 8 commands directly, as a script would; seconds until all run."""
    start = time.monotonic()
    procs = [subprocess.Popen(trainer_command(marker_dir), start_new_session=True,
                              env={**os.environ, "PRIMUS_ROLE": "worker", "PRIMUS_INDEX": str(i),
                                   "PRIMUS_INCARNATION": "plain"})
             for i in range(EXECUTORS)]
    done = wait_for_files([marker_dir / f"worker-{i}-plain" for i in range(EXECUTORS)])
    for proc in procs:
        proc.kill()
        proc.wait()
    return done - start


def primus(client: PrimusClient, marker_dir: Path) -> float:
    spec = {
        "name": "bench-startup",
        "roles": [{"name": "worker", "replicas": EXECUTORS, "command": trainer_command(marker_dir),
                   "resources": {"cpu": 0.25, "memory": "128Mi"}}],
    }
    start = time.monotonic()
    app = client.submit(spec)
    deadline = time.monotonic() + 60
    while len(list(marker_dir.glob("worker-*"))) < EXECUTORS:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{app}: executors never all ran")
        time.sleep(0.005)
    done = time.monotonic()
    client.kill(app)
    return done - start


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        client = PrimusClient(Path(tmp) / "home")
        marker_dir = Path(tmp) / "markers"
        marker_dir.mkdir()
        primus(client, marker_dir)  # warm-up: builds the bundle, fills the page cache
        clear(marker_dir)
        plain, ours = [], []
        for run in range(RUNS):
            plain.append(plain_subprocess(marker_dir))
            clear(marker_dir)
            ours.append(primus(client, marker_dir))
            clear(marker_dir)
            print(f"run {run + 1}: primus {ours[-1] * 1000:.0f} ms, plain subprocess {plain[-1] * 1000:.0f} ms",
                  flush=True)
    ratio = sorted(ours)[len(ours) // 2] / sorted(plain)[len(plain) // 2]
    print(f"startup (submit -> {EXECUTORS} executors running): primus median {median_ms(ours)} vs plain "
          f"subprocess {median_ms(plain)}: {ratio:.1f}x")


if __name__ == "__main__":
    main()
