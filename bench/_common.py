"""Helpers shared by the benchmarks: markers that trainers touch when they start; feeding a consumer
through the executor's Feeder."""

from __future__ import annotations

import collections
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


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


def job_processes(app: str, marker: bytes) -> list[int]:
    """Pids of the processes of job ``app`` (``PRIMUS_APP_ID`` in their environment) whose command line
    holds ``marker``: a job's trainers, found from outside as a fault injector finds them."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker in (proc / "cmdline").read_bytes() and \
                    f"PRIMUS_APP_ID={app}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


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


def feed_consumer(assignments: list[dict[str, Any]], consumer: list[str], timeout: float,
                  poll: float) -> tuple[float, int]:
    """Seconds from start until ``consumer``, its stdin fed by the executor's real ``Feeder``,
    printed its count (``wc``); the count.

    A small loop plays the AM: it takes the feed's reports (heartbeats: when the feed wakes it, at
    least every ``poll`` seconds), hands out the next tasks when the feed asks for them, and says
    ``data_exhausted`` once none is left; the feed then closes the pipe."""
    from primus_runtime.executor.feed import Feeder

    tasks = collections.deque(assignments)
    start = time.perf_counter()
    proc = subprocess.Popen(consumer, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None
    feeder = Feeder(proc.stdin, max_tasks=2, readers=1, reader_group=proc.pid)
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the feed did not finish in {timeout:.0f}s")
            report = feeder.report()
            if report["failed"]:
                raise RuntimeError(f"tasks failed: {report['failed']}")
            reply: dict[str, Any] = {"tasks": []}
            while tasks and len(reply["tasks"]) < report["need_tasks"]:
                reply["tasks"].append(tasks.popleft())
            reply["data_exhausted"] = not tasks
            feeder.reported(report, reply)
            feeder.wake.wait(poll)
            feeder.wake.clear()
        counted = int(proc.stdout.read().split()[0])
        seconds = time.perf_counter() - start
    finally:
        feeder.stop()
        feeder.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
    return seconds, counted
