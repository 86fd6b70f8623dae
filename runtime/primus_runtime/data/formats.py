"""Input file formats: where a file can be split into tasks, how its records are read, how they are fed.

Standard library only at import time, Python 3.9+: the executor imports this on cluster nodes.
``pyarrow`` (parquet) and ``zstandard`` (zstd before Python 3.14) are imported only by the
functions that need them; ``google-crc32c`` (TFRecord's CRC-32C in C) is used when it is installed,
looked for the first time a CRC is computed, with the standard-library code below as the fallback.

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
binary record gets a 4-byte big-endian length in front (see ``frame``). ``read_framed`` hands
out framed records in blocks, which is how to feed text fast: per line, no Python code runs.
"""

from __future__ import annotations

import array
import gzip
import io
import itertools
import json
import os
import queue
import struct
import sys
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, NamedTuple, cast

FORMATS = ("text", "jsonl", "raw", "tfrecord", "length_delimited", "parquet")
COMPRESSIONS = ("none", "gzip", "zstd")

LINE_FORMATS = ("text", "jsonl", "parquet")  # framed with a trailing newline when fed
RAW_CHUNK = 64 * 1024  # one raw record
READ_SIZE = 64 * 1024  # what the readers ask the file for at a time: small enough to stay in cache
_PLAN_READ_SIZE = 64 * 1024  # planning reads headers only: small reads, bodies are seeked over
_MAX_READ = 64 * 1024 * 1024  # largest single read while filling a buffer for one big record
_UNBOUNDED = sys.maxsize  # the end of a compressed split: the whole decompressed stream


def compression_for(path: str) -> str:
    """The compression that ``auto`` means for this path: by its suffix."""
    lower = path.lower()
    if lower.endswith(".gz"):
        return "gzip"
    if lower.endswith((".zst", ".zstd")):
        return "zstd"
    return "none"


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


def _check(fmt: str, compression: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if compression not in COMPRESSIONS:
        hint = " (resolve 'auto' with compression_for(path) first)" if compression == "auto" else ""
        raise ValueError(f"unknown compression {compression!r}{hint}: expected one of {', '.join(COMPRESSIONS)}")
    if fmt == "parquet" and compression != "none":
        raise ValueError("parquet files compress their own pages: use compression 'none' for them")


# --- CRC-32C (Castagnoli) ----------------------------------------------------------------------------
#
# google-crc32c's C extension (hardware CRC32 instructions where the CPU has them) when it is
# installed; else the table-driven standard-library code below, about 20x slower on large records.

class FastCrc(NamedTuple):
    """google-crc32c's C functions: ``value(data)`` and ``extend(crc, data)`` (bytes only: no views)."""

    value: Callable[[bytes], int]
    extend: Callable[[int, bytes], int]


_crc_backend: FastCrc | None = None  # once looked for and found
_crc_looked_up = False


def _fast_crc() -> FastCrc | None:
    """google-crc32c's C functions, if that package is installed with its C extension (its pure-Python
    fallback is slower than the code here). Under ``-S`` (the executor) site-packages is put on the path."""
    with_site_packages()
    try:
        from google_crc32c import cext  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return FastCrc(cext.value, cext.extend)


def _crc() -> FastCrc | None:
    """The fast CRC, or None: looked for once (reader threads racing to it find the same)."""
    global _crc_backend, _crc_looked_up
    if not _crc_looked_up:
        _crc_backend, _crc_looked_up = _fast_crc(), True
    return _crc_backend


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C of ``data``, continuing from ``crc`` (the CRC of what came before)."""
    fast = _crc()
    if fast is None:
        return crc32c_python(data, crc)
    return fast.extend(crc, bytes(data)) if crc else fast.value(bytes(data))


# --- the standard-library CRC-32C, table-driven --------------------------------------------------------

_POLY = 0x82F63B78  # reflected


def _crc_tables(count: int) -> list[list[int]]:
    """``tables[k][b]``: the CRC register after byte ``b`` followed by ``k`` zero bytes (no init/xor)."""
    first = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        first.append(crc)
    tables = [first]
    for _ in range(1, count):
        prev = tables[-1]
        tables.append([(c >> 8) ^ first[c & 0xFF] for c in prev])
    return tables


_T = _crc_tables(8)
_T0, _T1, _T2, _T3, _T4, _T5, _T6, _T7 = _T
_LITTLE = sys.byteorder == "little"
_U32_CODE = "I" if array.array("I").itemsize == 4 else "L"


def crc32c_python(data: bytes, crc: int = 0) -> int:
    """``crc32c`` in standard-library Python (the fallback)."""
    c = crc ^ 0xFFFFFFFF
    size = len(data)
    if size >= 512:
        width = 32 if size < 4096 else 64 if size < 32768 else 128 if size < 262144 else 256
        span = size - size % width
        c = _crc_wide(c, data, span, width)
        data = data[span:]
    return _crc_sliced(c, data) ^ 0xFFFFFFFF


def _crc_sliced(c: int, data: bytes) -> int:
    """Advance the CRC register over ``data``: slicing-by-8, eight table lookups per 8 bytes."""
    t0, t1, t2, t3, t4, t5, t6, t7 = _T
    size = len(data)
    head = size - size % 8
    if head:
        words = array.array("Q", data[:head] if head != size else data)
        if not _LITTLE:
            words.byteswap()
        for word in words:
            c ^= word
            c = (t7[c & 0xFF] ^ t6[(c >> 8) & 0xFF] ^ t5[(c >> 16) & 0xFF] ^ t4[(c >> 24) & 0xFF]
                 ^ t3[(c >> 32) & 0xFF] ^ t2[(c >> 40) & 0xFF] ^ t1[(c >> 48) & 0xFF] ^ t0[c >> 56])
    for byte in data[head:]:
        c = t0[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c


_WIDE: dict[int, tuple[list[int], list[int], list[int], list[int], list[list[bytes]]]] = {}


def _wide_tables(width: int) -> tuple[list[int], list[int], list[int], list[int], list[list[bytes]]]:
    cached = _WIDE.get(width)
    if cached is None:
        tables = _crc_tables(width)
        lanes = [[bytes((value >> shift) & 0xFF for value in tables[width - 1 - j]) for shift in (0, 8, 16, 24)]
                 for j in range(width)]
        cached = _WIDE[width] = (tables[width - 1], tables[width - 2], tables[width - 3], tables[width - 4], lanes)
    return cached


def _crc_wide(c: int, data: bytes, span: int, width: int) -> int:
    """Advance the CRC register over ``data[:span]`` (whole blocks of ``width`` bytes), C doing most of it."""
    shift0, shift1, shift2, shift3, _ = _wide_tables(width)
    for term in _block_terms(data, span, width):
        c = shift0[c & 0xFF] ^ shift1[(c >> 8) & 0xFF] ^ shift2[(c >> 16) & 0xFF] ^ shift3[c >> 24] ^ term
    return c


def _block_terms(data: bytes, span: int, width: int) -> array.array[int]:
    """For each ``width``-byte block of ``data[:span]``, the term its bytes add to the register.

    The register after a block is ``shift(register before) ^ D``, where ``D`` depends on the
    block's bytes only: ``D = XOR over j of T[width-1-j][block[j]]`` (the CRC is linear). So all
    the ``D`` are computed a byte lane at a time, each lane (``data[j::width]``) mapped through
    its table with ``bytes.translate`` and XORed as one big integer; the caller is left with one
    Python step per block, four lookups for ``width`` bytes.
    """
    lanes = _wide_tables(width)[4]
    blocks = span // width
    acc0 = acc1 = acc2 = acc3 = 0
    from_bytes = int.from_bytes
    for j, (b0, b1, b2, b3) in enumerate(lanes):
        lane = data[j:span:width]
        acc0 ^= from_bytes(lane.translate(b0), "little")
        acc1 ^= from_bytes(lane.translate(b1), "little")
        acc2 ^= from_bytes(lane.translate(b2), "little")
        acc3 ^= from_bytes(lane.translate(b3), "little")
    interleaved = bytearray(4 * blocks)
    interleaved[0::4] = acc0.to_bytes(blocks, "little")
    interleaved[1::4] = acc1.to_bytes(blocks, "little")
    interleaved[2::4] = acc2.to_bytes(blocks, "little")
    interleaved[3::4] = acc3.to_bytes(blocks, "little")
    terms = array.array(_U32_CODE, interleaved)
    if not _LITTLE:
        terms.byteswap()
    return terms


_MANY_WIDTH = 64  # block size when many small CRCs are computed together
_MANY_LARGEST = 16384  # larger spans get a crc32c call of their own
_PADS: list[bytes] = []


def _pads() -> list[bytes]:
    """``pads[p]``: ``p`` bytes that take a zero register to 0xFFFFFFFF, the CRC's initial value:
    zeros, then the 4 bytes that the register's linear map sends to 0xFFFFFFFF."""
    if not _PADS:
        t0, t1, t2, t3 = _T[:4]

        def after_four(q: int) -> int:  # the register after the 4 bytes of ``q`` (little-endian), from 0
            return t3[q & 0xFF] ^ t2[(q >> 8) & 0xFF] ^ t1[(q >> 16) & 0xFF] ^ t0[q >> 24]

        basis: dict[int, tuple[int, int]] = {}  # Gaussian elimination over GF(2): top bit -> (image, q)
        for bit in range(32):
            image, q = after_four(1 << bit), 1 << bit
            while image:
                top = image.bit_length() - 1
                if top not in basis:
                    basis[top] = (image, q)
                    break
                image ^= basis[top][0]
                q ^= basis[top][1]
        want, prefix = 0xFFFFFFFF, 0
        while want:
            image, q = basis[want.bit_length() - 1]
            want ^= image
            prefix ^= q
        assert after_four(prefix) == 0xFFFFFFFF
        head = _U32.pack(prefix)
        # One slice assignment (no Python code runs in it): reader threads never see a half-built list.
        _PADS[:] = [bytes(p - 4) + head if p >= 4 else b"" for p in range(_MANY_WIDTH + 4)]
    return _PADS


def crc32c_many(buf: bytes, spans: list[tuple[int, int]]) -> list[int]:
    """``[crc32c(buf[a:b]) for a, b in spans]``: one C call each with google-crc32c, else
    ``crc32c_many_python``."""
    fast = _crc()
    if fast is None:
        return crc32c_many_python(buf, spans)
    value = fast.value
    return [value(buf[a:b]) for a, b in spans]


def crc32c_many_python(buf: bytes, spans: list[tuple[int, int]]) -> list[int]:
    """``crc32c_many`` in standard-library Python, the small spans computed together.

    Each small span is put behind a pad that makes it whole blocks and brings the register to
    the CRC's initial value where the span starts (zero bytes leave a zero register alone), so
    all of them go through one ``_block_terms`` pass, and the register restarts at 0 per span.
    """
    width = _MANY_WIDTH
    pads = _pads()
    view = memoryview(buf)
    parts: list[bytes | memoryview] = []
    plan = []  # (start, end, blocks), blocks -1 for a span that gets its own call
    for a, b in spans:
        size = b - a
        if size > _MANY_LARGEST:
            plan.append((a, b, -1))
            continue
        pad = 4 + (-(size + 4)) % width
        parts.append(pads[pad])
        parts.append(view[a:b])
        plan.append((a, b, (size + pad) // width))
    joined = b"".join(parts)
    terms = iter(_block_terms(joined, len(joined), width))
    shift0, shift1, shift2, shift3, _ = _wide_tables(width)
    crcs = []
    for a, b, count in plan:
        if count < 0:
            crcs.append(crc32c_python(buf[a:b]))
            continue
        c = 0
        for term in itertools.islice(terms, count):
            c = shift0[c & 0xFF] ^ shift1[(c >> 8) & 0xFF] ^ shift2[(c >> 16) & 0xFF] ^ shift3[c >> 24] ^ term
        crcs.append(c ^ 0xFFFFFFFF)
    return crcs


def _mask(crc: int) -> int:
    """TFRecord's masking of a CRC: rotated right by 15 bits plus a constant."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC of ``data``."""
    return _mask(crc32c(data))


# --- framing ----------------------------------------------------------------------------------------

_BE32 = struct.Struct(">I")
_TF_HEADER = struct.Struct("<QI")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


def frame(record: bytes, fmt: str) -> bytes:
    """A record as fed to a trainer: a line ends with ``\\n``; a binary record gets a 4-byte big-endian length."""
    if fmt in LINE_FORMATS:
        return record + b"\n"
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
    return _BE32.pack(len(record)) + record


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def write_records(fileobj: IO[bytes], records: Iterable[bytes], fmt: str, *, row_group_rows: int = 10_000) -> None:
    """Write ``records`` in ``fmt`` (the inverse of ``read_records``): test data, benchmarks, examples.

    ``raw`` writes the bytes as they are (they are read back as 64 KiB chunks). ``parquet``
    takes JSON objects (one per record) and writes row groups of ``row_group_rows`` rows.
    """
    _check(fmt, "none")
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
        for record in records:
            length = _U64.pack(len(record))
            write(length + _U32.pack(masked_crc32c(length)) + record + _U32.pack(masked_crc32c(record)))
    elif fmt == "length_delimited":
        for record in records:
            write(_varint(len(record)) + record)
    else:
        _write_parquet(fileobj, records, row_group_rows)


# --- planning ---------------------------------------------------------------------------------------

def plan_splits(opener: Callable[[], IO[bytes]], size: int, fmt: str, compression: str,
                target_bytes: int) -> list[Split]:
    """Cut a file of ``size`` bytes into contiguous splits of about ``target_bytes`` each, in order.

    ``opener()`` returns a fresh binary file object; it is used only by the formats whose
    boundaries must be found in the file (tfrecord and length_delimited walk the record
    headers and seek over the bodies; parquet reads its footer). Splits are byte ranges, row
    group ranges for parquet. A corrupt header found on the way raises ``CorruptRecord``.
    """
    _check(fmt, compression)
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
        return _plan_parquet(opener, target_bytes)
    with opener() as fileobj:
        stream = _Stream(fileobj, 0, size, _PLAN_READ_SIZE)
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


# --- reading ----------------------------------------------------------------------------------------

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
    _check(fmt, compression)
    if fmt == "parquet":
        return _read_parquet(fileobj, start, end, skip)
    opened = _open_bytes(fileobj, compression, start, end)
    if opened is None:
        return iter(())
    stream, end, size = opened
    if fmt in ("text", "jsonl"):
        # Per line, only C code runs: a chain over lists of lines, zipped with a counter.
        lines = itertools.chain.from_iterable(_line_lists(_line_runs(stream, start, end, size != _UNBOUNDED), skip))
        return zip(lines, itertools.count(skip + 1))
    if fmt == "raw":
        start = -(-start // RAW_CHUNK) * RAW_CHUNK
        if start >= end:
            return iter(())
    if size != _UNBOUNDED:
        stream.seek(start)
    reader = _read_tfrecord if fmt == "tfrecord" else _read_raw if fmt == "raw" else _read_length_delimited
    return reader(_Stream(stream, start, size), end, skip)


def _open_bytes(fileobj: IO[bytes], compression: str, start: int, end: int) -> tuple[IO[bytes], int, int] | None:
    """What to read (decompressing when needed), where to stop, and its size (``_UNBOUNDED`` when
    decompressing); None when the range is empty."""
    if compression != "none":
        if start != 0:
            raise ValueError(f"a {compression} file is read as one split from 0, not from byte {start}")
        return _decompress(fileobj, compression), _UNBOUNDED, _UNBOUNDED
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
    _check(fmt, compression)
    if fmt in ("text", "jsonl"):
        opened = _open_bytes(fileobj, compression, start, end)
        if opened is None:
            return iter(())
        stream, end, size = opened
        return _framed_lines(_line_runs(stream, start, end, size != _UNBOUNDED), skip)
    return _framed_blocks(read_records(fileobj, fmt, compression, start, end, skip), fmt)


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


STREAM_HEADROOM = 64 * 1024  # free bytes in front of each streamed block: for the line the last one cut


def stream_blocks(fileobj: IO[bytes], pos: int, step: int = RANGE_SIZE) -> Iterator[tuple[bytearray, int]]:
    """``fileobj`` from ``pos`` to its end, front to back, in reads of ``step`` bytes, each into a
    buffer of its own after ``STREAM_HEADROOM`` free bytes; the last block read nothing."""
    fileobj.seek(pos)
    readinto = cast(io.RawIOBase, fileobj).readinto  # WebHDFSFile's, or a local file's
    buffers = _buffers(STREAM_HEADROOM + step)
    while True:
        buf = buffers.take()
        got = readinto(memoryview(buf)[STREAM_HEADROOM:]) or 0
        yield buf, got
        if not got:
            return


class _Buffers:
    """Buffers of one size, each used again once nothing else refers to it (its block was fed and is no
    longer logged, no view of it is left): a new 1 MiB bytearray per block cost more than reading the
    socket into it (zeroed, its pages faulted in, unmapped when freed). Shared by the tasks read at
    once; at most ``keep`` are kept."""

    def __init__(self, size: int, keep: int = 32):
        self.size, self.keep = size, keep
        self.pool: list[bytearray] = []
        self.lock = threading.Lock()

    def take(self) -> bytearray:
        with self.lock:
            for buf in self.pool:
                if sys.getrefcount(buf) <= 3:  # the pool's, the loop's and the call's: nobody else's
                    return buf
            buf = bytearray(self.size)
            if len(self.pool) < self.keep:
                self.pool.append(buf)
            return buf


_BUFFERS: dict[int, _Buffers] = {}


def _buffers(size: int) -> _Buffers:
    return _BUFFERS.setdefault(size, _Buffers(size))


class ReadAhead:
    """The blocks ``streamed_lines`` reads of a split from ``start`` (``stream_blocks`` of the file from
    the byte before it), read by a thread of its own on a file of its own (``opener``: for WebHDFS, a
    connection of its own) from the moment this is made, up to ``depth`` blocks ahead of the consumer:
    the next task's connection is opened, and its first blocks read, while the current task is fed,
    and the socket is read while the consumer counts lines. An error reading is raised to the
    consumer; ``close`` (or the end) stops the thread, which closes its file."""

    def __init__(self, opener: Callable[[], IO[bytes]], start: int, step: int = RANGE_SIZE, depth: int = 4):
        self.step = step
        self._ahead: queue.Queue[tuple[bytearray, int] | BaseException] = queue.Queue(depth)
        self._stop = threading.Event()
        self._done = False
        threading.Thread(target=self._read, args=(opener, max(start - 1, 0)), name="primus-read-ahead",
                         daemon=True).start()

    def __iter__(self) -> ReadAhead:
        return self

    def __next__(self) -> tuple[bytearray, int]:
        while True:
            if self._done:  # at the end, or closed (by another thread too, while this one waited)
                raise StopIteration
            try:
                item = self._ahead.get(timeout=0.5)
                break
            except queue.Empty:
                continue
        if isinstance(item, BaseException):
            self.close()
            raise item
        if not item[1]:
            self.close()
        return item

    def close(self) -> None:
        self._done = True
        self._stop.set()

    def _read(self, opener: Callable[[], IO[bytes]], pos: int) -> None:
        try:
            with opener() as f:
                for block in stream_blocks(f, pos, self.step):
                    if not self._put(block) or not block[1]:
                        return
        except BaseException as exc:  # noqa: BLE001 - the consumer raises it
            self._put(exc)

    def _put(self, item: tuple[bytearray, int] | BaseException) -> bool:
        while not self._stop.is_set():
            try:
                self._ahead.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False


def streamed_lines(fileobj: IO[bytes] | None, start: int, end: int, skip: int = 0, step: int = RANGE_SIZE,
                   blocks: Iterable[tuple[bytearray, int]] | None = None) -> Iterator[tuple[bytes | memoryview, int]]:
    """``read_framed`` of uncompressed text or jsonl from a stream best read once, front to back, in
    large reads (a WebHDFS response, ``data/webhdfs.py``).

    Yields ``(block, n)`` as ``read_framed`` does. The stream comes in blocks of about ``step``
    bytes, each read into a buffer of its own (``stream_blocks`` of ``fileobj``, or ``blocks``: the
    same read ahead by another thread, a ``ReadAhead(opener, start, step)``); the
    start of a line the previous block cut is copied into the free room in front of it, so each
    block is yielded, unless its lines must change (``\r\n``, a last line without newline), as
    a view of that buffer: one copy from the socket, no Python per line; lines are counted in C so
    that positions stay exact record counts.
    """
    pos = max(start - 1, 0)  # file offset of the first byte not yielded yet; Hadoop's rule: the line
    if blocks is None:       # holding byte start-1 is the previous split's
        assert fileobj is not None
        blocks = stream_blocks(fileobj, pos, step)
    aligned = start == 0
    tail = b""  # the start of a line that goes on past the last read
    n = skip
    for buf, got in blocks:
        lo = _put_tail(buf, tail)  # buf[lo:hi]: the stream from offset pos on (the tail, then the block)
        if lo < 0:
            buf, lo = bytearray(tail) + buf[STREAM_HEADROOM:STREAM_HEADROOM + got], 0
        hi = lo + len(tail) + got
        first = lo
        if not aligned:
            newline = buf.find(b"\n", lo, hi)
            if newline < 0:
                if not got:
                    return
                pos, tail = pos + hi - lo, b""
                continue
            first, aligned = newline + 1, True
        if pos + first - lo >= end:
            return
        last_byte = lo + end - 1 - pos  # index in buf of the split's last byte
        final = last_byte < hi or not got
        cut = buf.find(b"\n", max(last_byte, first), hi) if last_byte < hi else buf.rfind(b"\n", first, hi)
        if cut < 0 and got:  # a line that goes on past this read (or holds byte end-1): read more of it
            pos, tail = pos + first - lo, bytes(buf[first:hi])
            continue
        take = cut + 1 if cut >= 0 else hi
        if take > first:
            missing = buf[take - 1] != 0x0A
            count = _newlines(buf, first, take) + missing
            if count <= skip:
                skip -= count
            else:
                if skip:
                    first = take - len(bytes(buf[first:take]).split(b"\n", skip)[-1])
                    count -= skip
                    skip = 0
                block: bytes | memoryview = memoryview(buf)[first:take]
                if missing or buf.find(b"\r", first, take) >= 0:
                    block = (bytes(block) + b"\n" if missing else bytes(block)).replace(b"\r\n", b"\n")
                n += count
                yield block, n
        if final:
            return
        pos, tail = pos + take - lo, bytes(buf[take:hi])


def _put_tail(buf: bytearray, tail: bytes) -> int:
    """Copy ``tail`` into the free room in front of the block read into ``buf``; where it starts, or
    -1 when it does not fit (a line longer than ``STREAM_HEADROOM``)."""
    lo = STREAM_HEADROOM - len(tail)
    if lo >= 0:
        buf[lo:STREAM_HEADROOM] = tail
    return lo


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


def _newlines(data: bytes | bytearray, start: int, end: int) -> int:
    """``data.count(b"\\n", start, end)``, faster for lines of more than ~40 bytes: deleting the
    newlines (memchr + memcpy) measured 3x faster than ``count`` for lines of 160 bytes, 4x slower
    for 2 bytes (CPython 3.11), so a sample of the first 4 KiB chooses. Used on most of ``data``."""
    if len(data) - (end - start) > end - start or data.count(b"\n", start, start + 4096) > 4096 // 48:
        return data.count(b"\n", start, end)
    total = len(data) - len(data.replace(b"\n", b""))
    return total - data.count(b"\n", 0, start) - data.count(b"\n", end)


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
        count = _newlines(data, 0, take) + missing
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


def _framed_lines(runs: Iterator[bytes], skip: int) -> Iterator[tuple[bytes, int]]:
    n = skip
    for run in runs:
        if not run.endswith(b"\n"):
            run += b"\n"
        count = run.count(b"\n")
        if skip:
            if count <= skip:
                skip -= count
                continue
            run = run.split(b"\n", skip)[-1]
            count -= skip
            skip = 0
        if b"\r" in run:
            run = run.replace(b"\r\n", b"\n")
        n += count
        yield run, n


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


def _line_runs(fileobj: IO[bytes], start: int, end: int, seekable: bool) -> Iterator[bytes]:
    """The lines that start in ``[start, end)``, in runs of about ``READ_SIZE`` bytes: each run is
    whole lines as in the file, with their newlines (only a final line may have none)."""
    read = fileobj.read
    pos = start
    data = b""
    if start > 0:
        # Hadoop's rule: the line that holds byte start-1 belongs to the previous split.
        fileobj.seek(start - 1)
        pos = start - 1
        while True:
            chunk = read(READ_SIZE)
            if not chunk:
                return
            newline = chunk.find(b"\n")
            if newline >= 0:
                pos += newline + 1
                data = chunk[newline + 1:]
                break
            pos += len(chunk)
    elif seekable:
        fileobj.seek(0)
    while pos < end:
        # ``data`` starts at a line start, at byte ``pos``; make it hold a newline unless at EOF.
        parts = [data]
        while True:
            chunk = read(READ_SIZE)
            if not chunk:
                break
            parts.append(chunk)
            if b"\n" in chunk:
                break
        if len(parts) > 1:
            data = b"".join(parts)
        last = data.rfind(b"\n")
        if last < 0:
            if data:  # a final line without newline
                yield data
            return
        if pos + last + 1 > end:  # keep only the lines that start before ``end``
            first_of_last = data.rfind(b"\n", 0, end - pos - 1) + 1
            yield data[:data.find(b"\n", first_of_last) + 1]
            return
        yield data[:last + 1]
        pos += last + 1
        data = data[last + 1:]


def _line_lists(runs: Iterator[bytes], skip: int) -> Iterator[list[bytes]]:
    for run in runs:
        lines = run.split(b"\n")
        if run.endswith(b"\n"):
            del lines[-1]
        if skip:
            if len(lines) <= skip:
                skip -= len(lines)
                continue
            del lines[:skip]
            skip = 0
        if b"\r" in run:  # one memchr; the exact test is per line
            lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
        yield lines


def _length_crc(length: int) -> int:
    """TFRecord's masked CRC of the 8-byte little-endian ``length``, without building the bytes."""
    t0, t1, t2, t3, t4, t5, t6, t7 = _T
    c = length ^ 0xFFFFFFFF
    c = (t7[c & 0xFF] ^ t6[(c >> 8) & 0xFF] ^ t5[(c >> 16) & 0xFF] ^ t4[(c >> 24) & 0xFF]
         ^ t3[(c >> 32) & 0xFF] ^ t2[(c >> 40) & 0xFF] ^ t1[(c >> 48) & 0xFF] ^ t0[c >> 56]) ^ 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class _LengthCrcs(dict):  # type: ignore[type-arg]
    """TFRecord's masked CRC of each record length met: lengths repeat, so one dict lookup (in C)
    per header instead of eight table lookups. Bounded: emptied when full (a file of all-different
    lengths, or a corrupt one)."""

    def __missing__(self, length: int) -> int:
        if len(self) >= 65536:
            self.clear()
        crc = self[length] = _length_crc(length)
        return crc


_LENGTH_CRCS = _LengthCrcs()


class _Stream:
    """A binary stream read through a large buffer. ``buf[off]`` is the byte at offset ``base + off``.

    ``size`` is the stream's length when it is a seekable file, ``_UNBOUNDED`` for a
    decompressing stream (read to its end, never seeked).
    """

    __slots__ = ("fileobj", "buf", "off", "base", "size", "read_size")

    def __init__(self, fileobj: IO[bytes], pos: int, size: int, read_size: int = 0):
        self.fileobj = fileobj
        self.buf = b""
        self.off = 0
        self.base = pos
        self.size = size
        self.read_size = read_size or READ_SIZE

    @property
    def pos(self) -> int:
        return self.base + self.off

    def fill(self, count: int) -> int:
        """Make ``count`` bytes available from ``off`` if the stream still has them; how many are."""
        have = len(self.buf) - self.off
        if have >= count:
            return have
        parts = [self.buf[self.off:]]
        self.base += self.off
        self.off = 0
        read = self.fileobj.read
        while have < count:
            chunk = read(max(self.read_size, min(count - have, _MAX_READ)))
            if not chunk:
                break
            parts.append(chunk)
            have += len(chunk)
        self.buf = b"".join(parts)
        return have

    def advance(self, count: int) -> None:
        """Move past ``count`` bytes: within the buffer, by seeking, or (decompressing) by reading."""
        have = len(self.buf) - self.off
        if count <= have:
            self.off += count
            return
        target = self.base + self.off + count
        if self.size != _UNBOUNDED:
            self.fileobj.seek(target)
        else:
            remaining = count - have
            while remaining:
                chunk = self.fileobj.read(min(remaining, _MAX_READ))
                if not chunk:
                    raise CorruptRecord(self.pos, f"truncated record: the stream ends {remaining} bytes short")
                remaining -= len(chunk)
        self.buf = b""
        self.off = 0
        self.base = target

    def tfrecord_header(self) -> tuple[int, int] | None:
        """``(total bytes, data length)`` of the record at ``pos`` (length CRC checked); None at the end."""
        at = self.pos
        have = self.fill(12)
        if have == 0:
            return None
        if have < 12:
            raise CorruptRecord(at, f"truncated record: {have} bytes left, a header takes 12")
        length, length_crc = _TF_HEADER.unpack_from(self.buf, self.off)
        if _LENGTH_CRCS[length] != length_crc:
            raise CorruptRecord(at, "bad length: the length's CRC does not match (corrupt header, or not a TFRecord file)")
        total = length + 16
        if at + total > self.size:
            raise CorruptRecord(at, f"truncated record: {length} bytes of data announced, the file ends at {self.size}")
        return total, length

    def length_delimited_header(self) -> tuple[int, int] | None:
        """``(total bytes, header bytes)`` of the record at ``pos``; None at the end."""
        at = self.pos
        have = self.fill(10)
        if have == 0:
            return None
        buf = self.buf
        off = self.off
        length = buf[off]
        head = 1
        if length >= 0x80:
            length &= 0x7F
            shift = 7
            while True:
                if head >= have:
                    raise CorruptRecord(at, "truncated record: the file ends inside the length varint")
                if head >= 10:
                    raise CorruptRecord(at, "bad length: varint longer than 10 bytes")
                byte = buf[off + head]
                head += 1
                length |= (byte & 0x7F) << shift
                shift += 7
                if byte < 0x80:
                    break
        total = head + length
        if at + total > self.size:
            raise CorruptRecord(at, f"truncated record: {length} bytes announced, the file ends at {self.size}")
        return total, head

    def walk_tfrecords(self, until: int) -> None:
        """Move past one record, then past the next ones while ``pos < until`` and they are whole
        in the buffer (any other case is left to the next call, which seeks or raises)."""
        header = self.tfrecord_header()
        if header is None:
            return
        self.advance(header[0])
        buf = self.buf
        off = self.off
        limit = len(buf)
        stop = until - self.base
        unpack_from = _TF_HEADER.unpack_from
        while off < stop and off + 12 <= limit:
            length, length_crc = unpack_from(buf, off)
            after = off + length + 16
            if after > limit or _LENGTH_CRCS[length] != length_crc:
                break
            off = after
        self.off = off

    def walk_length_delimited(self, until: int) -> None:
        """Like ``walk_tfrecords``; lengths of one or two varint bytes are read inline."""
        header = self.length_delimited_header()
        if header is None:
            return
        self.advance(header[0])
        buf = self.buf
        off = self.off
        limit = len(buf)
        stop = until - self.base
        while off < stop and off + 1 < limit:
            first = buf[off]
            if first < 0x80:
                after = off + 1 + first
            elif buf[off + 1] < 0x80:
                after = off + 2 + ((first & 0x7F) | (buf[off + 1] << 7))
            else:
                break
            if after > limit:
                break
            off = after
        self.off = off


def _read_raw(stream: _Stream, end: int, skip: int) -> Iterator[tuple[bytes, int]]:
    n = 0
    if stream.size != _UNBOUNDED:  # records sit at fixed offsets: seek over the skipped ones
        n = min(skip, -(-(end - stream.pos) // RAW_CHUNK))
        stream.advance(n * RAW_CHUNK)
    while stream.pos < end:
        have = stream.fill(RAW_CHUNK)
        if have == 0:
            return
        take = min(have, RAW_CHUNK)
        record = stream.buf[stream.off:stream.off + take]
        stream.off += take
        n += 1
        if n > skip:
            yield record, n


def _read_length_delimited(stream: _Stream, end: int, skip: int) -> Iterator[tuple[bytes, int]]:
    n = 0
    while stream.pos < end:
        at = stream.pos
        header = stream.length_delimited_header()
        if header is None:
            return
        total, head = header
        n += 1
        if n <= skip:
            stream.advance(total)
            continue
        if stream.fill(total) < total:
            raise CorruptRecord(at, f"truncated record: {total} bytes announced, the stream ends first")
        off = stream.off
        stream.off = off + total
        yield stream.buf[off + head:off + total], n


def _read_tfrecord(stream: _Stream, end: int, skip: int) -> Iterator[tuple[bytes, int]]:
    """TFRecords with both CRCs checked; the data CRCs of the records whole in the buffer are
    computed together (``crc32c_many``), which is what makes small records fast."""
    n = 0
    length_crcs = _LENGTH_CRCS
    unpack_header = _TF_HEADER.unpack_from
    unpack_crc = _U32.unpack_from
    while stream.pos < end:
        at = stream.pos
        header = stream.tfrecord_header()
        if header is None:
            return
        total, length = header
        n += 1
        if n <= skip:
            stream.advance(total)
            continue
        if stream.fill(total) < total:
            raise CorruptRecord(at, f"truncated record: {length} bytes of data announced, the stream ends first")
        buf = stream.buf
        off = stream.off
        spans = [(off + 12, off + total - 4)]  # data of this record and the next ones whole in the buffer
        off += total
        limit = min(len(buf), end - stream.base)
        while off + 12 <= limit:
            length, length_crc = unpack_header(buf, off)
            after = off + length + 16
            if length_crcs[length] != length_crc or after > len(buf):
                break  # tfrecord_header reports a bad header, fill reads the rest of a record
            spans.append((off + 12, after - 4))
            off = after
        stream.off = off
        crcs = crc32c_many(buf, spans)
        for index, (a, b) in enumerate(spans):
            crc = crcs[index]  # masked inline (_mask): a call per record is a fifth of the time here
            if (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF != unpack_crc(buf, b)[0]:
                raise CorruptRecord(stream.base + a - 12, "CRC mismatch: the record's data is corrupt")
            yield buf[a:b], n + index
        n += len(spans) - 1


def _decompress(fileobj: IO[bytes], compression: str) -> IO[bytes]:
    """A stream of the decompressed bytes; corrupt compressed data raises ``CorruptRecord``."""
    if compression == "gzip":
        stream: Any = gzip.GzipFile(fileobj=fileobj, mode="rb")
        errors: tuple[type[BaseException], ...] = (gzip.BadGzipFile, EOFError, zlib.error)
    else:
        try:
            from compression import zstd  # type: ignore[import-not-found]  # Python 3.14+

            stream, errors = zstd.ZstdFile(fileobj), (zstd.ZstdError, EOFError)
        except ImportError:
            with_site_packages()
            try:
                import zstandard
            except ImportError as exc:
                raise ImportError("reading zstd files needs the 'zstandard' package (pip install zstandard), "
                                  "or Python 3.14+") from exc
            stream, errors = _ZstdFrames(fileobj, zstandard.ZstdDecompressor()), (zstandard.ZstdError, EOFError)
    return cast(IO[bytes], _Decompressed(stream, compression, errors))


class _ZstdFrames:
    """Decompresses every zstd frame of a file in turn; a file that ends inside a frame is an EOFError
    (``zstandard``'s own stream reader takes that for a normal end)."""

    def __init__(self, fileobj: IO[bytes], decompressor: Any):
        self.fileobj = fileobj
        self.decompressor = decompressor
        self.frame: Any = None
        self.buf = b""
        self.off = 0

    def read(self, size: int = -1) -> bytes:
        while self.off >= len(self.buf):
            raw = self.fileobj.read(READ_SIZE)
            if not raw:
                if self.frame is not None:
                    raise EOFError("the file ends inside a zstd frame")
                return b""
            out = []
            while raw:
                if self.frame is None:
                    self.frame = self.decompressor.decompressobj()
                out.append(self.frame.decompress(raw))
                raw = b""
                if self.frame.eof:
                    raw = self.frame.unused_data
                    self.frame = None
            self.buf = b"".join(out)
            self.off = 0
        end = len(self.buf) if size < 0 else min(len(self.buf), self.off + size)
        chunk = self.buf[self.off:end] if self.off or end < len(self.buf) else self.buf
        self.off = end
        return chunk


class _Decompressed:
    """Reads a decompressor; its data errors become ``CorruptRecord`` at the decompressed offset."""

    def __init__(self, stream: Any, compression: str, errors: tuple[type[BaseException], ...]):
        self.stream = stream
        self.compression = compression
        self.errors = errors
        self.pos = 0

    def read(self, size: int = -1) -> bytes:
        try:
            chunk: bytes = self.stream.read(size)
        except self.errors as exc:
            raise CorruptRecord(self.pos, f"corrupt {self.compression} data (offset in the decompressed stream): "
                                          f"{exc}") from exc
        self.pos += len(chunk)
        return chunk


def with_site_packages() -> None:
    """Put the interpreter's site-packages on ``sys.path``, once: the local backend starts executors
    with ``-S`` (the executor needs only the standard library, and skipping site saves part of the
    start), so a package an input format needs (pyarrow, zstandard, confluent_kafka) is found only
    after this."""
    if not sys.flags.no_site or getattr(with_site_packages, "done", False):
        return
    import site

    site.main()
    with_site_packages.done = True  # type: ignore[attr-defined]


# --- parquet (pyarrow, imported when needed) ----------------------------------------------------------

def _parquet() -> Any:
    with_site_packages()
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError("parquet input needs the 'pyarrow' package (pip install pyarrow)") from exc
    return pq


def _parquet_file(fileobj: IO[bytes]) -> Any:
    pq = _parquet()
    import pyarrow as pa

    try:
        return pq.ParquetFile(fileobj)
    except pa.ArrowInvalid as exc:
        raise CorruptRecord(0, f"not a readable parquet file: {exc}") from exc


def _plan_parquet(opener: Callable[[], IO[bytes]], target_bytes: int) -> list[Split]:
    with opener() as fileobj:
        meta = _parquet_file(fileobj).metadata
        sizes = []
        for index in range(meta.num_row_groups):
            group = meta.row_group(index)
            sizes.append(sum(group.column(c).total_compressed_size for c in range(group.num_columns)))
    splits = []
    start = 0
    gathered = 0
    for index, size in enumerate(sizes):
        gathered += size
        if gathered >= target_bytes:
            splits.append(Split(start, index + 1))
            start = index + 1
            gathered = 0
    if start < len(sizes):
        splits.append(Split(start, len(sizes)))
    return splits


def _json_value(value: Any) -> Any:
    """How a parquet value that JSON has no type for is written: dates ISO 8601, bytes base64."""
    if isinstance(value, (bytes, bytearray)):
        import base64

        return base64.b64encode(value).decode("ascii")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _read_parquet(fileobj: IO[bytes], start: int, end: int, skip: int) -> Iterator[tuple[bytes, int]]:
    parquet_file = _parquet_file(fileobj)
    meta = parquet_file.metadata
    encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_json_value).encode
    n = 0
    for group in range(start, min(end, meta.num_row_groups)):
        rows = meta.row_group(group).num_rows
        if n + rows <= skip:
            n += rows
            continue
        for batch in parquet_file.read_row_group(group).to_batches():
            for row in batch.to_pylist():
                n += 1
                if n > skip:
                    yield encode(row).encode(), n


def _write_parquet(fileobj: IO[bytes], records: Iterable[bytes], row_group_rows: int) -> None:
    import pyarrow as pa

    table = pa.Table.from_pylist([json.loads(record) for record in records])
    _parquet().write_table(table, fileobj, row_group_size=row_group_rows)
