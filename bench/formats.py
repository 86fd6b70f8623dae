"""Reading TFRecord against reading length-delimited records of the same data.

The same records (SIZES: ``mixed``, 100-2000 random bytes as in bench/feed.py, about SIZE_MB of
them; ``small``, 20-200 bytes) are written once as TFRecord (``uint64`` length, its masked
CRC-32C, the data, the data's masked CRC-32C: both CRCs are checked when read) and once as
length-delimited records (a varint length, the data: nothing to check). Each file is read the way
the executor feeds it (``records.read_framed`` over SPLITS splits, every framed byte touched by a
sum of block lengths), RUNS times interleaved, best kept. TFRecord's CRCs go through
``google-crc32c`` when it is installed (its C extension), else through the standard-library code
in ``data/crc32c.py``; both are measured, in the same run.

The last line is length-delimited's time / TFRecord's time for the mixed records with the CRC
implementation in use (1.0: checking CRCs is free; goal >= 0.8x).

    python bench/formats.py            # SIZE_MB=64 RUNS=3 SPLITS=4
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from primus_runtime.data import crc32c
from primus_runtime.data.records import plan_splits, read_framed, write_records

SIZE_MB = float(os.environ.get("SIZE_MB", 64))
RUNS = int(os.environ.get("RUNS", 3))
SPLITS = int(os.environ.get("SPLITS", 4))
MB = 1_000_000
SIZES = {"mixed": (100, 2000), "small": (20, 200)}


def make_records(rng: random.Random, low: int, high: int, total: int) -> list[bytes]:
    """Records of ``low``-``high`` random bytes, about ``total`` bytes of data, from a pool (fast to make)."""
    pool = rng.randbytes(1 << 20)
    records, size = [], 0
    while size < total:
        length = rng.randint(low, high)
        at = rng.randrange(len(pool) - length)
        records.append(pool[at:at + length])
        size += length
    return records


def write(path: Path, records: list[bytes], fmt: str) -> int:
    with open(path, "wb") as out:
        write_records(out, records, fmt)
    return path.stat().st_size


def read_seconds(path: Path, fmt: str) -> tuple[float, int]:
    """Seconds to read every split of the file as the executor does; the records read."""
    size = path.stat().st_size
    splits = plan_splits(lambda: open(path, "rb"), size, fmt, "none", -(-size // SPLITS))
    start = time.perf_counter()
    fed = records = 0
    for split in splits:
        with open(path, "rb") as f:
            for block, n in read_framed(f, fmt, "none", split.start, split.end):
                fed += len(block)
                last = n
            records += last if fed else 0
    return time.perf_counter() - start, records


@contextmanager
def crc_implementation(fast: bool) -> Iterator[str]:
    """TFRecord's CRCs through google-crc32c (``fast``) or the standard-library code, for the block."""
    saved = crc32c._crc_backend, crc32c._crc_looked_up
    crc32c._crc_backend, crc32c._crc_looked_up = crc32c._fast_crc() if fast else None, True
    try:
        yield "google-crc32c" if crc32c._crc_backend is not None else "standard library"
    finally:
        crc32c._crc_backend, crc32c._crc_looked_up = saved


def measure(records: list[bytes], tmp: Path, label: str) -> dict[str, float]:
    """Best seconds of each side: length-delimited, TFRecord with either CRC implementation."""
    paths = {fmt: tmp / f"{label}.{fmt}" for fmt in ("length_delimited", "tfrecord")}
    sizes = {fmt: write(path, records, fmt) for fmt, path in paths.items()}
    data = sum(map(len, records))
    sides: dict[str, list[float]] = {"length_delimited": [], "tfrecord": [], "tfrecord, standard-library CRC": []}
    for _ in range(RUNS):
        for side in sides:
            fmt = "tfrecord" if side.startswith("tfrecord") else side
            with crc_implementation(fast=side == "tfrecord"):
                seconds, count = read_seconds(paths[fmt], fmt)
            if count != len(records):
                raise AssertionError(f"{side}: read {count} records, wrote {len(records)}")
            sides[side].append(seconds)
    best = {side: min(times) for side, times in sides.items()}
    print(f"{label} records ({len(records):,} of {SIZES[label][0]}-{SIZES[label][1]} B, {data / MB:.0f} MB of data; "
          f"files {sizes['length_delimited'] / MB:.0f} / {sizes['tfrecord'] / MB:.0f} MB), best of {RUNS}: "
          + ", ".join(f"{side} {data / MB / s:.0f} MB/s ({len(records) / s / 1000:,.0f}k records/s)"
                      for side, s in best.items()), flush=True)
    return best


def main() -> None:
    rng = random.Random(5)
    with crc_implementation(fast=True) as fast:
        pass
    if fast != "google-crc32c":
        print("google-crc32c is not installed: both TFRecord sides use the standard-library CRC", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        results = {label: measure(make_records(rng, low, high, int(SIZE_MB * MB / (2 if label == "small" else 1))),
                                  Path(tmp), label)
                   for label, (low, high) in SIZES.items()}
    small = results["small"]
    print(f"small records: tfrecord vs length-delimited {small['length_delimited'] / small['tfrecord']:.2f}x "
          f"({small['length_delimited'] / small['tfrecord, standard-library CRC']:.2f}x with the standard-library CRC)")
    mixed = results["mixed"]
    print(f"mixed records, standard-library CRC: tfrecord vs length-delimited "
          f"{mixed['length_delimited'] / mixed['tfrecord, standard-library CRC']:.2f}x")
    print(f"reading tfrecord ({fast} CRC-32C) vs length-delimited records of the same data, "
          f"{SPLITS} splits through read_framed: {mixed['length_delimited'] / mixed['tfrecord']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
