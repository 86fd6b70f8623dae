"""Feeding throughput: ``read_records`` + ``frame`` into a trainer's pipe, against a plain Python
line loop writing the same bytes into the same pipe.

A ~200 MB text file (lines of 20-300 bytes) is planned into 8 splits, and each split is read and
framed into a pipe drained by ``cat > /dev/null`` (the trainer), through the same 1 MiB-buffered
writer on both sides. The baseline is ``for line in open(path, "rb"): pipe.write(line)`` over the
whole file. Also prints MB/s for tfrecord (CRC-checked), length-delimited and raw records and for
gzip text. Each side runs RUNS times (best kept); the last line is the text ratio.

    python bench/feed.py            # SIZE_MB=200 RUNS=3 by default
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from primus_runtime.data.formats import frame, plan_splits, read_records, write_records

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


def into_pipe(feed: Callable[[IO[bytes]], None]) -> float:
    """Seconds for ``feed(pipe)`` to write everything and the consumer to have read it all."""
    consumer = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, bufsize=0)
    assert consumer.stdin is not None
    start = time.perf_counter()
    with open(consumer.stdin.fileno(), "wb", buffering=1 << 20, closefd=False) as pipe:
        feed(pipe)
    consumer.stdin.close()
    consumer.wait()
    return time.perf_counter() - start


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
            seconds = best(primus(path, fmt), 1)
            print(f"{fmt}: {fmt_size / MB / seconds:.0f} MB/s, {len(binary) * repeat / seconds:,.0f} records/s"
                  if fmt != "raw" else f"raw: {fmt_size / MB / seconds:.0f} MB/s (64 KiB records)", flush=True)

        zipped = Path(tmp) / "lines.txt.gz"
        subprocess.run(f"head -c 50000000 {text} | gzip -1 > {zipped}", shell=True, check=True)
        seconds = best(primus(zipped, "text", "gzip"), 1)
        print(f"gzip text (one split, decompressed): {50 / seconds:.0f} MB/s", flush=True)

        ours, plain = [], []
        for run in range(RUNS):
            plain.append(into_pipe(plain_lines(text)))
            ours.append(into_pipe(primus(text, "text")))
            print(f"run {run + 1}: primus {size / MB / ours[-1]:.0f} MB/s, plain line loop "
                  f"{size / MB / plain[-1]:.0f} MB/s", flush=True)
    ratio = min(plain) / min(ours)
    print(f"text feed (read_records + frame, {SPLITS} splits, into a pipe): primus {size / MB / min(ours):.0f} MB/s "
          f"vs plain line loop {size / MB / min(plain):.0f} MB/s: {ratio:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
