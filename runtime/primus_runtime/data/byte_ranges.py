"""Uncompressed text, jsonl and raw files fed as byte ranges of the file (standard library only, Python 3.9+).

The executor's fast path for local files: what a range holds goes to the trainer without passing
through Python (``os.splice``), so only the ranges' bounds and record counts are found here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from .formats import RAW_CHUNK
from .text_lines import count_newlines

RANGE_FORMATS = ("text", "jsonl", "raw")  # uncompressed, these can be fed as file byte ranges
RANGE_SIZE = 1024 * 1024  # bytes per range (framed_ranges): the granularity of positions on that path
_LINE_START_READ = 4096


def framed_ranges(fd: int, fmt: str, start: int, end: int, skip: int = 0,
                  step: int = RANGE_SIZE) -> Iterator[tuple[int, int, bytes | None, int]]:
    """``read_framed`` of an uncompressed text, jsonl or raw file, as byte ranges of the file.

    Yields ``(offset, length, block, n)``, ``n`` as in ``read_framed``. When ``block`` is None
    the framed records are the file's bytes ``[offset, offset + length)`` as they are (raw: each
    64 KiB record of them preceded by its 4-byte length), so they can go to the trainer without
    passing through Python (``os.splice``); otherwise ``block`` is what to feed (lines that
    needed a change: ``\r\n``, or a last line without newline). Ranges are about ``step``
    bytes and never cut a record. ``fd`` is read with ``os.pread`` only (its offset is not
    used). Text lines are counted (C speed, no Python per line) so that positions stay exact.
    """
    if fmt not in RANGE_FORMATS:
        raise ValueError(f"{fmt!r} cannot be fed as byte ranges: only {', '.join(RANGE_FORMATS)}")
    size = os.fstat(fd).st_size
    end = min(end, size)
    if fmt == "raw":
        return _raw_ranges(start, end, skip, step)
    return _line_ranges(fd, size, start, end, skip, step)


def raw_framed_length(length: int) -> int:
    """Bytes fed for ``length`` bytes of a raw file range (whole 64 KiB records, the last maybe shorter)."""
    return length + 4 * -(-length // RAW_CHUNK)


def _raw_ranges(start: int, end: int, skip: int, step: int) -> Iterator[tuple[int, int, bytes | None, int]]:
    pos = -(-start // RAW_CHUNK) * RAW_CHUNK
    if pos >= end:
        return
    n = min(skip, -(-(end - pos) // RAW_CHUNK))
    pos += n * RAW_CHUNK
    per_range = max(1, step // RAW_CHUNK)
    while pos < end:
        length = min(per_range * RAW_CHUNK, end - pos)
        n += -(-length // RAW_CHUNK)
        yield pos, length, None, n
        pos += length


def _line_ranges(fd: int, size: int, start: int, end: int, skip: int,
                 step: int) -> Iterator[tuple[int, int, bytes | None, int]]:
    pos = start
    if start > 0:  # Hadoop's rule: the line that holds byte start-1 belongs to the previous split
        pos = start - 1
        while True:
            data = os.pread(fd, _LINE_START_READ, pos)
            if not data:
                return
            newline = data.find(b"\n")
            if newline >= 0:
                pos += newline + 1
                break
            pos += len(data)
    n = skip
    while pos < end:
        window = step
        while True:  # whole lines from ``pos``: up to the last newline, or the line that holds byte end-1
            data = os.pread(fd, window, pos)
            last_byte = end - 1 - pos
            cut = data.find(b"\n", last_byte) if last_byte < len(data) else data.rfind(b"\n")
            final = last_byte < len(data)
            if cut >= 0:
                take = cut + 1
                break
            if len(data) < window:  # end of file: the rest is a last line without newline
                take = len(data)
                final = True
                break
            window *= 2  # a line longer than the window
        if take == 0:
            return
        missing = data[take - 1] != 0x0A
        count = count_newlines(data, 0, take) + missing
        first = 0
        if skip:
            if count <= skip:
                skip -= count
                pos += take
                if final:
                    return
                continue
            first = take - len(data[:take].split(b"\n", skip)[-1])
            count -= skip
            skip = 0
        block = None
        if missing or data.find(b"\r", first, take) >= 0:
            block = data[first:take] + b"\n" if missing else data[first:take]
            if b"\r" in block:
                block = block.replace(b"\r\n", b"\n")
        n += count
        yield pos + first, take - first, block, n
        pos += take
        if final:
            return
