"""Feeding a trainer from a file on HDFS through the executor's feed, against a plain WebHDFS client.

A text file (``SIZE_MB``, default 256 MB of lines of 20-300 bytes, made by
``feed_executor.make_text``) is written once to the minicluster's HDFS. It is planned into tasks
of ``TASK_MB`` (default 64) and handed, as the AM hands out ``hdfs://`` tasks (translated to
``webhdfs://namenode-http-host:port/path``), to the executor's real ``Feeder``
(``executor/feed.py``, reading with ``data/webhdfs.py``; ``max_tasks`` 2 and one reader, the
defaults); the trainer is ``wc -l``, a subprocess whose stdin is the feed's pipe, and a small loop
plays the AM as in ``bench/feed_executor.py``. The baseline streams the same file with the
``hdfs`` package (``InsecureClient.read(path, chunk_size=CHUNK_MB)``, requests underneath) into
the stdin of another ``wc -l``. Both counts must equal the file's lines. Times run from start until
the count is printed.

After one unmeasured run of each (a fresh cluster's JVM is cold), each side runs RUNS times,
interleaved (a feed run right before its baseline run); the last line is the median over runs of
the baseline's time / the feed's time (> 1: the feed is faster).

The minicluster is started (and stopped at the end) with ``scripts/minicluster.sh`` in a fresh
directory, unless ``PRIMUS_MINICLUSTER_DIR`` names a running one.

    python bench/feed_hdfs.py          # SIZE_MB=256 TASK_MB=64 RUNS=5 CHUNK_MB=1
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from feed_executor import DATA, make_text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import feed_consumer  # noqa: E402
from primus_runtime.data.dispatcher import Task
from primus_runtime.data.records import plan_splits
from primus_runtime.data.webhdfs import WebHDFSFile

SIZE_MB = int(os.environ.get("SIZE_MB", 256))
TASK_MB = int(os.environ.get("TASK_MB", 64))
RUNS = int(os.environ.get("RUNS", 5))
CHUNK_MB = float(os.environ.get("CHUNK_MB", 1))
MB = 1_000_000
MiB = 1 << 20
TIMEOUT = 600.0
POLL = 0.01
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "minicluster.sh"
USER = "primus-bench"


@contextmanager
def minicluster() -> Iterator[dict[str, str]]:
    """``ready.json`` of a running minicluster: PRIMUS_MINICLUSTER_DIR's, or one started for the run."""
    given = os.environ.get("PRIMUS_MINICLUSTER_DIR")
    if given:
        status = subprocess.run([str(SCRIPT), "status", given], capture_output=True, text=True)
        if status.returncode == 0:
            yield json.loads(status.stdout)
            return
    directory = tempfile.mkdtemp(prefix="primus-bench-minicluster-")
    subprocess.run([str(SCRIPT), "start", directory], check=True, stdout=sys.stderr)
    try:
        yield json.loads(subprocess.run([str(SCRIPT), "status", directory], capture_output=True, text=True,
                                        check=True).stdout)
    finally:
        subprocess.run([str(SCRIPT), "stop", directory], check=False, stdout=sys.stderr)
        shutil.rmtree(directory, ignore_errors=True)


def assignments(url: str, size: int) -> list[dict[str, Any]]:
    """The file's tasks as the AM sends them (text splits are planned from the file itself)."""
    splits = plan_splits(lambda: WebHDFSFile(url, user=USER), size, "text", "none", TASK_MB * MiB)
    return [Task(id=f"t{i}", partition="", source="bench", url=url, format="text", compression="none",
                 start=split.start, end=split.end, size=split.end - split.start).assignment()
            for i, split in enumerate(splits)]


def through_feeder(tasks_to_feed: list[dict[str, Any]]) -> tuple[float, int]:
    """Seconds from start until ``wc -l``, fed by the executor's Feeder, printed its count; the count."""
    return feed_consumer(tasks_to_feed, ["wc", "-l"], TIMEOUT, POLL)


def through_client(client: Any, path: str) -> tuple[float, int]:
    """The baseline: the ``hdfs`` package streams the file into ``wc -l``'s stdin."""
    start = time.perf_counter()
    proc = subprocess.Popen(["wc", "-l"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    with client.read(path, chunk_size=int(CHUNK_MB * MiB)) as reader:
        for chunk in reader:
            proc.stdin.write(chunk)
    proc.stdin.close()
    counted = int(proc.stdout.read().split()[0])
    proc.wait()
    proc.stdout.close()
    return time.perf_counter() - start, counted


def check(what: str, counted: int, expect: int) -> None:
    if counted != expect:
        raise AssertionError(f"{what}: the consumer counted {counted}, expected {expect}")


def main() -> None:
    if shutil.which("wc") is None:
        sys.exit("needs wc")
    import hdfs

    size = SIZE_MB * MB
    local = DATA / f"lines-{SIZE_MB}.txt"
    make_text(local, size)
    with open(local, "rb") as f:
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(16 * MiB), b""))
    with minicluster() as cluster:
        client = hdfs.InsecureClient(cluster["webhdfs"], user=USER)
        path = f"/bench/lines-{SIZE_MB}.txt"
        status = client.status(path, strict=False)
        if status is None or status["length"] != size:
            client.upload(path, str(local), overwrite=True)
        url = "webhdfs://" + cluster["webhdfs"].split("://", 1)[1] + path
        os.environ["HADOOP_USER_NAME"] = USER  # the executor's WebHDFS user
        tasks = assignments(url, size)
        print(f"hdfs://{path}: {size / MB:.0f} MB, {lines:,} lines, {len(tasks)} tasks of {TASK_MB} MiB; "
              f"baseline chunk {CHUNK_MB:g} MiB", flush=True)
        through_feeder(tasks), through_client(client, path)  # unmeasured: a fresh cluster's JVM is cold
        sides: dict[str, list[float]] = {"feed": [], "hdfs client": []}
        for run in range(RUNS):
            seconds, counted = through_feeder(tasks)
            check("feed", counted, lines)
            sides["feed"].append(seconds)
            seconds, counted = through_client(client, path)
            check("hdfs client", counted, lines)
            sides["hdfs client"].append(seconds)
            print(f"run {run + 1}: " + ", ".join(f"{name} {size / MB / times[-1]:.0f} MB/s"
                                                 for name, times in sides.items()), flush=True)
    best = {name: min(times) for name, times in sides.items()}
    print(f"best of {RUNS}: " + ", ".join(f"{name} {size / MB / seconds:.0f} MB/s" for name, seconds in best.items()),
          flush=True)
    ratio = statistics.median(c / f for f, c in zip(sides["feed"], sides["hdfs client"], strict=True))
    print(f"feed from HDFS through the executor ({len(tasks)} tasks) vs hdfs.InsecureClient.read | wc -l, "
          f"median of {RUNS} paired runs: {ratio:.2f}x")


if __name__ == "__main__":
    main()
