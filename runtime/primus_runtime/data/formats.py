"""Input file formats: their names, what one record of each is, and how a record is fed to a trainer.

Standard library only, Python 3.9+: the executor imports this (and the modules that read the
formats) on cluster nodes. Where the work is done:

- ``records``: planning splits, reading and writing records of any format (dispatch by name);
- ``text_lines``, ``binary_records``, ``parquet``: the per-format readers;
- ``decompression``: gzip and zstd; ``crc32c``: TFRecord's checksums;
- ``byte_ranges`` and ``streaming``: the executor's fast paths for uncompressed lines and raw files.

Formats and what one record is:

``text``, ``jsonl``
    a line without its ``\\n`` and without a ``\\r`` at its end. A split is a byte range; a line
    belongs to the split its first byte is in (Hadoop's rule), so splits need no reading to plan.
    A last line without ``\\n`` counts. jsonl lines are not parsed here (the trainer does that);
    ``write_records`` checks them.
``raw``
    a 64 KiB chunk of the (decompressed) file; the last one may be shorter.
``tfrecord``
    ``uint64 length LE, uint32 masked crc32c(length), data, uint32 masked crc32c(data)``;
    both CRCs are verified.
``length_delimited``
    a protobuf varint length, then that many bytes.
``parquet``
    one row, as a JSON object on one line; splits are row-group ranges.

Offsets (``Split``, ``CorruptRecord.offset``) are bytes of the file as stored, or of the
decompressed stream for gzip/zstd files, which are always one whole-file split.

Fed to a trainer, a line-based record (text, jsonl, parquet rows) ends with ``\\n``; every
binary record gets a 4-byte big-endian length in front (see ``frame``).
"""

from __future__ import annotations

import struct
import sys
from dataclasses import dataclass
from typing import Any

FORMATS = ("text", "jsonl", "raw", "tfrecord", "length_delimited", "parquet")
COMPRESSIONS = ("none", "gzip", "zstd")

LINE_FORMATS = ("text", "jsonl", "parquet")  # framed with a trailing newline when fed
RAW_CHUNK = 64 * 1024  # one raw record
READ_SIZE = 64 * 1024  # what the readers ask the file for at a time: small enough to stay in cache
UNBOUNDED = sys.maxsize  # the end of a compressed split: the whole decompressed stream


@dataclass(frozen=True)
class Split:
    """A task's share of one file: byte offsets ``[start, end)``, or row groups for parquet."""

    start: int
    end: int


class CorruptRecord(ValueError):
    """The file holds something that is not a valid record at ``offset``."""

    def __init__(self, offset: int, problem: str):
        super().__init__(f"corrupt record at byte {offset}: {problem}")
        self.offset = offset
        self.problem = problem

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.offset, self.problem))


def check(fmt: str, compression: str) -> None:
    """Refuse an unknown format or compression, or a combination that cannot be read."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if compression not in COMPRESSIONS:
        hint = " (resolve 'auto' with compression_for(path) first)" if compression == "auto" else ""
        raise ValueError(f"unknown compression {compression!r}{hint}: expected one of {', '.join(COMPRESSIONS)}")
    if fmt == "parquet" and compression != "none":
        raise ValueError("parquet files compress their own pages: use compression 'none' for them")


_BE32 = struct.Struct(">I")


def frame(record: bytes, fmt: str) -> bytes:
    """A record as fed to a trainer: a line ends with ``\\n``; a binary record gets a 4-byte big-endian length."""
    if fmt in LINE_FORMATS:
        return record + b"\n"
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
    return _BE32.pack(len(record)) + record
