"""Planning splits, reading and writing records of any format: dispatch by format name.

Standard library only at import time, Python 3.9+ (parquet's and zstd's packages are imported
when such a file is read). What each format's record is: ``formats``. ``read_framed`` hands out
framed records in blocks, which is how to feed text fast: per line, no Python code runs.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from typing import IO

from .binary_records import (
    RecordStream,
    read_length_delimited,
    read_raw,
    read_tfrecord,
    write_length_delimited,
    write_tfrecords,
)
from .decompression import decompress
from .formats import RAW_CHUNK, READ_SIZE, UNBOUNDED, Split, check, frame
from .parquet import plan_parquet, read_parquet, write_parquet
from .text_lines import framed_lines, line_lists, line_runs

_PLAN_READ_SIZE = 64 * 1024  # planning reads headers only: small reads, bodies are seeked over


def write_records(fileobj: IO[bytes], records: Iterable[bytes], fmt: str, *, row_group_rows: int = 10_000) -> None:
    """Write ``records`` in ``fmt`` (the inverse of ``read_records``): test data, benchmarks, examples.

    ``raw`` writes the bytes as they are (they are read back as 64 KiB chunks). ``parquet``
    takes JSON objects (one per record) and writes row groups of ``row_group_rows`` rows.
    """
    check(fmt, "none")
    write = fileobj.write
    if fmt in ("text", "jsonl"):
        for record in records:
            if b"\n" in record or record.endswith(b"\r"):
                raise ValueError(f"a {fmt} record cannot hold a newline or end with \\r: {record[:80]!r}")
            if fmt == "jsonl":
                json.loads(record)
            write(record + b"\n")
    elif fmt == "raw":
        for record in records:
            write(record)
    elif fmt == "tfrecord":
        write_tfrecords(write, records)
    elif fmt == "length_delimited":
        write_length_delimited(write, records)
    else:
        write_parquet(fileobj, records, row_group_rows)


def plan_splits(opener: Callable[[], IO[bytes]], size: int, fmt: str, compression: str,
                target_bytes: int) -> list[Split]:
    """Cut a file of ``size`` bytes into contiguous splits of about ``target_bytes`` each, in order.

    ``opener()`` returns a fresh binary file object; it is used only by the formats whose
    boundaries must be found in the file (tfrecord and length_delimited walk the record
    headers and seek over the bodies; parquet reads its footer). Splits are byte ranges, row
    group ranges for parquet. A corrupt header found on the way raises ``CorruptRecord``.
    """
    check(fmt, compression)
    if target_bytes <= 0:
        raise ValueError(f"target_bytes must be positive, got {target_bytes}")
    if size <= 0:
        return []
    if compression != "none":
        return [Split(0, size)]
    if fmt in ("text", "jsonl"):
        count = -(-size // target_bytes)
        step = -(-size // count)
        return [Split(at, min(at + step, size)) for at in range(0, size, step)]
    if fmt == "raw":
        step = max(1, round(target_bytes / RAW_CHUNK)) * RAW_CHUNK
        return [Split(at, min(at + step, size)) for at in range(0, size, step)]
    if fmt == "parquet":
        return plan_parquet(opener, target_bytes)
    return _plan_binary(opener, size, fmt, target_bytes)


def _plan_binary(opener: Callable[[], IO[bytes]], size: int, fmt: str, target_bytes: int) -> list[Split]:
    """tfrecord and length_delimited splits: each ends at the first record boundary past its target."""
    with opener() as fileobj:
        stream = RecordStream(fileobj, 0, size, _PLAN_READ_SIZE)
        walk = stream.walk_tfrecords if fmt == "tfrecord" else stream.walk_length_delimited
        splits = []
        start = 0
        while stream.pos < size:
            walk(start + target_bytes)
            if stream.pos - start >= target_bytes:
                splits.append(Split(start, stream.pos))
                start = stream.pos
        if start < size:
            splits.append(Split(start, size))
        return splits


def read_records(fileobj: IO[bytes], fmt: str, compression: str, start: int, end: int,
                 skip: int = 0) -> Iterator[tuple[bytes, int]]:
    """Every record that starts in ``[start, end)``, exactly once and in order, as ``(record, n)``.

    ``n`` is the record's 1-based position in the split: pass it back as ``skip`` to resume
    right after it. The first ``skip`` records are read past without being yielded (tfrecord,
    length_delimited and raw seek over them). A compressed file is read whole (its only split
    is ``Split(0, size)``); for parquet, ``start``/``end`` are row groups. Raises
    ``CorruptRecord`` (with the byte offset) on a bad length, a CRC mismatch, a truncated record
    or corrupt compressed data.
    """
    check(fmt, compression)
    if fmt == "parquet":
        return read_parquet(fileobj, start, end, skip)
    opened = _open_bytes(fileobj, compression, start, end)
    if opened is None:
        return iter(())
    stream, end, size = opened
    if fmt in ("text", "jsonl"):
        # Per line, only C code runs: a chain over lists of lines, zipped with a counter.
        lines = itertools.chain.from_iterable(line_lists(line_runs(stream, start, end, size != UNBOUNDED), skip))
        return zip(lines, itertools.count(skip + 1))
    if fmt == "raw":
        start = -(-start // RAW_CHUNK) * RAW_CHUNK
        if start >= end:
            return iter(())
    if size != UNBOUNDED:
        stream.seek(start)
    reader = read_tfrecord if fmt == "tfrecord" else read_raw if fmt == "raw" else read_length_delimited
    return reader(RecordStream(stream, start, size), end, skip)


def _open_bytes(fileobj: IO[bytes], compression: str, start: int, end: int) -> tuple[IO[bytes], int, int] | None:
    """What to read (decompressing when needed), where to stop, and its size (``UNBOUNDED`` when
    decompressing); None when the range is empty."""
    if compression != "none":
        if start != 0:
            raise ValueError(f"a {compression} file is read as one split from 0, not from byte {start}")
        return decompress(fileobj, compression), UNBOUNDED, UNBOUNDED
    size = fileobj.seek(0, 2)
    end = min(end, size)
    if start >= end:
        return None
    return fileobj, end, size


def read_framed(fileobj: IO[bytes], fmt: str, compression: str, start: int, end: int,
                skip: int = 0) -> Iterator[tuple[bytes, int]]:
    """The records of ``read_records``, already ``frame``d, in blocks of about ``READ_SIZE`` bytes.

    Yields ``(block, n)``: ``n`` is the position of the block's last record in the split (what
    to report as progress, and to pass back as ``skip``). A block never cuts a record. For text
    this is the fast path: no Python work per line, only per block.
    """
    check(fmt, compression)
    if fmt in ("text", "jsonl"):
        opened = _open_bytes(fileobj, compression, start, end)
        if opened is None:
            return iter(())
        stream, end, size = opened
        return framed_lines(line_runs(stream, start, end, size != UNBOUNDED), skip)
    return _framed_blocks(read_records(fileobj, fmt, compression, start, end, skip), fmt)


def _framed_blocks(records: Iterator[tuple[bytes, int]], fmt: str) -> Iterator[tuple[bytes, int]]:
    parts = []
    size = 0
    n = 0
    for record, n in records:
        framed = frame(record, fmt)
        parts.append(framed)
        size += len(framed)
        if size >= READ_SIZE:
            yield b"".join(parts), n
            parts = []
            size = 0
    if parts:
        yield b"".join(parts), n
