"""Helpers shared by the benchmarks: markers that trainers touch when they start."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path


def wait_for_files(paths: list[Path], timeout: float = 60.0, poll: float = 0.005) -> float:
    """Block until every path exists; the monotonic time it happened."""
    deadline = time.monotonic() + timeout
    pending = list(paths)
    while pending:
        pending = [p for p in pending if not p.exists()]
        if not pending:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} markers never appeared, e.g. {pending[0]}")
        time.sleep(poll)
    return time.monotonic()


def median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} ms"


def trainer_command(marker_dir: Path) -> list[str]:
    """A Python trainer whose first act is to say it runs; then it idles like a real one."""
    code = ("import os, time\n"
            f"open(os.path.join({str(marker_dir)!r}, '-'.join(os.environ[k] for k in "
            "('PRIMUS_ROLE', 'PRIMUS_INDEX', 'PRIMUS_INCARNATION'))), 'w').close()\n"
            "time.sleep(60)\n")
    return [sys.executable, "-c", code]


def markers(marker_dir: Path, pattern: str) -> list[Path]:
    return sorted(marker_dir.glob(pattern))


def clear(marker_dir: Path) -> None:
    for path in marker_dir.iterdir():
        os.unlink(path)
