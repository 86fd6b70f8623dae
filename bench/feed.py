"""Feeding throughput: ``read_records`` + ``frame`` (one record at a time) and ``read_framed``
(framed blocks) into a trainer's pipe, against a plain Python line loop writing the same bytes
into the same pipe.

A ~200 MB text file (lines of 20-300 bytes) is planned into 8 splits, and each split is read
and framed into a pipe drained by ``wc -c`` (the trainer; its count proves every byte arrived),
through the same 1 MiB-buffered writer on every side. The baseline is
``for line in open(path, "rb"): pipe.write(line)`` over the whole file; ``cat FILE | wc -c`` is
shown too. Also prints MB/s and records/s for tfrecord (CRC-checked), length-delimited and raw
records, parquet rows/s and gzip text (best of 2 each). Each text side runs RUNS times,
interleaved, best kept; the last line is the text ratios.

    python bench/feed.py            # SIZE_MB=200 RUNS=3 by default
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from primus_runtime.data.formats import frame
from primus_runtime.data.records import plan_splits, read_framed, read_records, write_records

SIZE_MB = int(os.environ.get("SIZE_MB", 200))
RUNS = int(os.environ.get("RUNS", 3))
SPLITS = 8
MB = 1_000_000


def make_lines(rng: random.Random, total: int) -> list[bytes]:
    """Lines of 20-300 printable bytes, about ``total`` bytes with their newlines."""
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789,:{}\" "
    pool = bytes(rng.choice(alphabet) for _ in range(1 << 16))
    lines, size = [], 0
    while size < total:
        length = rng.randint(20, 300)
        at = rng.randrange(len(pool) - length)
        lines.append(pool[at:at + length])
        size += length + 1
    return lines


def write_file(path: Path, records: list[bytes], fmt: str, repeat: int) -> int:
    with open(path, "wb") as out:
        for _ in range(repeat):
            write_records(out, records, fmt)
    return path.stat().st_size


def into_pipe(feed: Callable[[IO[bytes]], None], expect: int | None = None) -> float:
    """Seconds for ``feed(pipe)`` to write everything and the consumer (``wc -c``) to have counted
    it all; ``expect``: the byte count it must find."""
    consumer = subprocess.Popen(["wc", "-c"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert consumer.stdin is not None and consumer.stdout is not None
    start = time.perf_counter()
    with open(consumer.stdin.fileno(), "wb", buffering=1 << 20, closefd=False) as pipe:
        feed(pipe)
    consumer.stdin.close()
    counted = int(consumer.stdout.read())
    consumer.wait()
    seconds = time.perf_counter() - start
    if expect is not None and counted != expect:
        raise AssertionError(f"the consumer counted {counted} bytes, {expect} were fed")
    return seconds


def plain_lines(path: Path) -> Callable[[IO[bytes]], None]:
    def feed(pipe: IO[bytes]) -> None:
        write = pipe.write
        with open(path, "rb") as lines:
            for line in lines:
                write(line)
    return feed


def primus(path: Path, fmt: str, compression: str = "none") -> Callable[[IO[bytes]], None]:
    size = path.stat().st_size
    splits = plan_splits(lambda: open(path, "rb"), size, fmt, compression, -(-size // SPLITS))

    def feed(pipe: IO[bytes]) -> None:
        write = pipe.write
        for split in splits:
            with open(path, "rb") as fileobj:
                for record, _ in read_records(fileobj, fmt, compression, split.start, split.end):
                    write(frame(record, fmt))
    return feed


def framed(path: Path, fmt: str) -> Callable[[IO[bytes]], None]:
    size = path.stat().st_size
    splits = plan_splits(lambda: open(path, "rb"), size, fmt, "none", -(-size // SPLITS))

    def feed(pipe: IO[bytes]) -> None:
        write = pipe.write
        for split in splits:
            with open(path, "rb") as fileobj:
                for block, _ in read_framed(fileobj, fmt, "none", split.start, split.end):
                    write(block)
    return feed


def cat_into_pipe(path: Path) -> float:
    start = time.perf_counter()
    counted = subprocess.run(f"cat {path} | wc -c", shell=True, check=True, capture_output=True).stdout
    seconds = time.perf_counter() - start
    assert int(counted) == path.stat().st_size
    return seconds


def parquet_rows_per_second(path: Path, rng: random.Random) -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        print("parquet: not measured (pyarrow is not installed)")
        return
    rows = [json.dumps({"id": i, "user": f"u{rng.randrange(10**6)}", "score": rng.random(),
                        "tags": ["a", "b"][:i % 3]}).encode() for i in range(100_000)]
    with open(path, "wb") as out:
        write_records(out, rows, "parquet", row_group_rows=10_000)
    seconds = best(primus(path, "parquet"), 2)
    print(f"parquet: {len(rows) / seconds:,.0f} rows/s (each fed as a JSON line)", flush=True)


def best(feed: Callable[[IO[bytes]], None], runs: int = RUNS) -> float:
    return min(into_pipe(feed) for _ in range(runs))


def main() -> None:
    rng = random.Random(4)
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "lines.txt"
        block = make_lines(rng, 4 * MB)
        size = write_file(text, block, "text", max(1, SIZE_MB // 4))
        print(f"text: {size / MB:.0f} MB, {SPLITS} splits", flush=True)

        binary = [rng.randbytes(rng.randint(100, 2000)) for _ in range(2000)]  # ~2 MB
        for fmt, repeat in (("tfrecord", 10), ("length_delimited", 25), ("raw", 25)):
            path = Path(tmp) / f"records.{fmt}"
            fmt_size = write_file(path, binary, fmt, repeat)
            seconds = best(primus(path, fmt), 2)
            what = "64 KiB records" if fmt == "raw" else f"{len(binary) * repeat / seconds:,.0f} records/s of 100-2000 B"
            print(f"{fmt}: {fmt_size / MB / seconds:.0f} MB/s ({what})", flush=True)
        parquet_rows_per_second(Path(tmp) / "rows.parquet", rng)

        zipped = Path(tmp) / "lines.txt.gz"
        plain_bytes = min(size, 50 * MB)
        subprocess.run(f"head -c {plain_bytes} {text} | gzip -1 > {zipped}", shell=True, check=True)
        seconds = best(primus(zipped, "text", "gzip"), 2)
        print(f"gzip text (one split, decompressed): {plain_bytes / MB / seconds:.0f} MB/s", flush=True)

        sides: dict[str, list[float]] = {"plain": [], "records": [], "framed": [], "cat": []}
        for run in range(RUNS):
            sides["plain"].append(into_pipe(plain_lines(text), size))
            sides["records"].append(into_pipe(primus(text, "text"), size))
            sides["framed"].append(into_pipe(framed(text, "text"), size))
            sides["cat"].append(cat_into_pipe(text))
            print(f"run {run + 1}: " + ", ".join(f"{name} {size / MB / seconds[-1]:.0f} MB/s"
                                                 for name, seconds in sides.items()), flush=True)
    best_of = {name: min(seconds) for name, seconds in sides.items()}
    print(f"text, best of {RUNS}: plain line loop {size / MB / best_of['plain']:.0f} MB/s, read_records + frame "
          f"{size / MB / best_of['records']:.0f} MB/s, read_framed {size / MB / best_of['framed']:.0f} MB/s, "
          f"cat {size / MB / best_of['cat']:.0f} MB/s; read_framed vs cat: {best_of['cat'] / best_of['framed']:.2f}x")
    print(f"text feed ({SPLITS} splits, into a pipe) vs a plain `for line in file` loop: read_records + frame "
          f"{best_of['plain'] / best_of['records']:.2f}x, read_framed: {best_of['plain'] / best_of['framed']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
