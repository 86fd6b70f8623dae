"""Feeding a trainer through the executor's feed machinery, against ``cat FILE | the same consumer``.

A local file (``SIZE_MB``, default 1024 MB of text lines of 20-300 bytes, generated once under
``/tmp/primus-bench-feed`` and reused) is planned into tasks with ``records.plan_splits``
(``TASK_MB``, default 64, the input spec's default task size) and handed, as the AM's task
assignments, to the executor's real ``Feeder`` (``executor/feed.py``; ``max_tasks`` 2 and one
reader: the defaults of ``max_tasks_per_executor`` 1 + ``prefetch`` 1). The trainer is the
consumer itself, a subprocess whose stdin is the feed's pipe: ``wc -l`` for the file read as
``text``, ``wc -c`` for it read as ``raw`` (64 KiB records, each framed with its 4-byte length).
A small loop plays the AM: it takes the feed's reports (heartbeats: when the feed wakes it, at
least every ``POLL`` seconds, default 0.01), hands out the next tasks
when the feed asks for them, marks tasks done, says ``data_exhausted`` at the end; the feed then
closes the pipe and the consumer prints its count, which must be exact. The baseline is
``cat FILE | wc -l`` (resp. ``wc -c``), timed the same way (start -> the count is printed).

Also shows, through the same path, Parquet rows/s and tfrecord records/s (smaller files).
Each side runs RUNS times, interleaved (a feed run right before its cat run); the last line is
the median over runs of cat's time / the feed's time (> 1: faster than cat), which a machine
shared with other work disturbs less than a ratio of bests (also shown).

    python bench/feed_executor.py          # SIZE_MB=1024 TASK_MB=64 RUNS=7
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import feed_consumer  # noqa: E402
from primus_runtime.data.dispatcher import Task
from primus_runtime.data.formats import RAW_CHUNK
from primus_runtime.data.records import plan_splits, write_records

SIZE_MB = int(os.environ.get("SIZE_MB", 1024))
TASK_MB = int(os.environ.get("TASK_MB", 64))
RUNS = int(os.environ.get("RUNS", 7))
DATA = Path(os.environ.get("BENCH_FEED_DIR", "/tmp/primus-bench-feed"))
MB = 1_000_000
MiB = 1 << 20
TIMEOUT = 600.0
POLL = float(os.environ.get("POLL", 0.01))  # heartbeat period of the AM loop (the feed also wakes it)


def make_text(path: Path, size: int) -> None:
    """Lines of 20-300 printable bytes, ``size`` bytes in all (a 4 MB block repeated)."""
    if path.exists() and path.stat().st_size == size:
        return
    rng = random.Random(4)
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789,:{}\" "
    pool = bytes(rng.choice(alphabet) for _ in range(1 << 16))
    lines, total = [], 0
    while total < min(size, 4 * MB):
        length = rng.randint(20, 300)
        at = rng.randrange(len(pool) - length)
        lines.append(pool[at:at + length] + b"\n")
        total += length + 1
    block = b"".join(lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    with open(partial, "wb") as out:
        left = size
        while left > 0:
            piece = block[:left]
            if len(piece) < len(block):
                piece = piece[:-1] + b"\n"  # the file ends with a whole line
            out.write(piece)
            left -= len(piece)
    os.replace(partial, path)


def make_records(path: Path, fmt: str, records: list[bytes], repeat: int) -> None:
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    with open(partial, "wb") as out:
        if fmt == "parquet":
            write_records(out, records * repeat, fmt, row_group_rows=10_000)
        else:
            for _ in range(repeat):
                write_records(out, records, fmt)
    os.replace(partial, path)


def assignments(path: Path, fmt: str) -> list[dict[str, Any]]:
    """The file's tasks as the AM sends them (``dispatcher.Task.assignment``)."""
    size = path.stat().st_size
    splits = plan_splits(lambda: open(path, "rb"), size, fmt, "none", TASK_MB * MiB)
    return [Task(id=f"t{i}", partition="", source="bench", url=path.as_uri(), format=fmt, compression="none",
                 start=split.start, end=split.end, size=split.end - split.start).assignment()
            for i, split in enumerate(splits)]


def through_feeder(path: Path, fmt: str, consumer: list[str]) -> tuple[float, int]:
    """Seconds from start until the consumer, fed by the executor's Feeder, printed its count; the count."""
    return feed_consumer(assignments(path, fmt), consumer, TIMEOUT, POLL)


def through_cat(path: Path, consumer: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    out = subprocess.run(f"cat {path} | {' '.join(consumer)}", shell=True, check=True, capture_output=True).stdout
    return time.perf_counter() - start, int(out.split()[0])


def check(what: str, counted: int, expect: int) -> None:
    if counted != expect:
        raise AssertionError(f"{what}: the consumer counted {counted}, expected {expect}")


def other_formats(runs: int) -> None:
    """tfrecord records/s and Parquet rows/s through the same path (smaller files)."""
    rng = random.Random(5)
    binary = [rng.randbytes(rng.randint(100, 2000)) for _ in range(2000)]  # ~2 MB
    repeat = max(1, min(SIZE_MB, 128) // 2)
    tfrecord = DATA / f"records-{repeat}.tfrecord"
    make_records(tfrecord, "tfrecord", binary, repeat)
    expect = repeat * sum(4 + len(r) for r in binary)
    best = min(through_feeder(tfrecord, "tfrecord", ["wc", "-c"]) for _ in range(runs))
    check("tfrecord", best[1], expect)
    count = len(binary) * repeat
    print(f"tfrecord: {count / best[0]:,.0f} records/s of 100-2000 B, "
          f"{tfrecord.stat().st_size / MB / best[0]:.0f} MB/s ({count:,} records, CRC-checked)", flush=True)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        print("parquet: not measured (pyarrow is not installed)", flush=True)
        return
    rows = [json.dumps({"id": i, "user": f"u{rng.randrange(10**6)}", "score": rng.random(),
                        "tags": ["a", "b"][:i % 3]}).encode() for i in range(10_000)]
    repeat = max(1, min(SIZE_MB, 100) // 5)
    parquet = DATA / f"rows-{repeat}.parquet"
    make_records(parquet, "parquet", rows, repeat)
    best = min(through_feeder(parquet, "parquet", ["wc", "-l"]) for _ in range(runs))
    check("parquet", best[1], len(rows) * repeat)
    print(f"parquet: {len(rows) * repeat / best[0]:,.0f} rows/s ({len(rows) * repeat:,} rows, each fed as a JSON "
          f"line)", flush=True)


def main() -> None:
    if shutil.which("wc") is None or shutil.which("cat") is None:
        sys.exit("needs cat and wc")
    size = SIZE_MB * MB
    text = DATA / f"lines-{SIZE_MB}.txt"
    make_text(text, size)
    with open(text, "rb") as f:
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(16 * MiB), b""))
    raw_bytes = size + 4 * -(-size // RAW_CHUNK)  # every 64 KiB record framed with its length
    tasks = len(assignments(text, "text"))
    print(f"{text}: {size / MB:.0f} MB, {lines:,} lines, {tasks} tasks of {TASK_MB} MiB", flush=True)
    other_formats(min(RUNS, 2))

    sides: dict[str, list[float]] = {"text": [], "cat | wc -l": [], "raw": [], "cat | wc -c": []}
    for run in range(RUNS):
        seconds, counted = through_feeder(text, "text", ["wc", "-l"])
        check("text", counted, lines)
        sides["text"].append(seconds)
        seconds, counted = through_cat(text, ["wc", "-l"])
        check("cat | wc -l", counted, lines)
        sides["cat | wc -l"].append(seconds)
        seconds, counted = through_feeder(text, "raw", ["wc", "-c"])
        check("raw", counted, raw_bytes)
        sides["raw"].append(seconds)
        seconds, counted = through_cat(text, ["wc", "-c"])
        check("cat | wc -c", counted, size)
        sides["cat | wc -c"].append(seconds)
        print(f"run {run + 1}: " + ", ".join(f"{name} {size / MB / times[-1]:.0f} MB/s"
                                             for name, times in sides.items()), flush=True)
    best = {name: min(times) for name, times in sides.items()}
    print(f"best of {RUNS}: " + ", ".join(f"{name} {size / MB / seconds:.0f} MB/s" for name, seconds in best.items()),
          flush=True)
    print(f"best vs best: text {best['cat | wc -l'] / best['text']:.2f}x cat, raw {best['cat | wc -c'] / best['raw']:.2f}x cat",
          flush=True)
    text = statistics.median(c / f for f, c in zip(sides["text"], sides["cat | wc -l"], strict=True))
    raw = statistics.median(c / f for f, c in zip(sides["raw"], sides["cat | wc -c"], strict=True))
    print(f"feed through the executor ({tasks} tasks) vs cat FILE | wc, median of {RUNS} paired runs: "
          f"text {text:.2f}x, raw {raw:.2f}x")


if __name__ == "__main__":
    main()
