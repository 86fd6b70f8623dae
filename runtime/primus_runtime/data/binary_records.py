"""Binary records (tfrecord, length_delimited, raw): read through a large buffer, written for tests.

Standard library only, Python 3.9+. A split of a binary file ends at the first record boundary
past its target (``RecordStream.walk_*`` find those while planning, seeking over the bodies);
TFRecord's CRCs are all checked (``crc32c``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from typing import IO

from .crc32c import LENGTH_CRCS, crc32c_many, masked_crc32c
from .formats import RAW_CHUNK, READ_SIZE, UNBOUNDED, CorruptRecord

_MAX_READ = 64 * 1024 * 1024  # largest single read while filling a buffer for one big record
_TF_HEADER = struct.Struct("<QI")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


def write_tfrecords(write: Callable[[bytes], object], records: Iterable[bytes]) -> None:
    for record in records:
        length = _U64.pack(len(record))
        write(length + _U32.pack(masked_crc32c(length)) + record + _U32.pack(masked_crc32c(record)))


def write_length_delimited(write: Callable[[bytes], object], records: Iterable[bytes]) -> None:
    for record in records:
        write(_varint(len(record)) + record)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class RecordStream:
    """A binary stream read through a large buffer. ``buf[off]`` is the byte at offset ``base + off``.

    ``size`` is the stream's length when it is a seekable file, ``UNBOUNDED`` for a
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
        if self.size != UNBOUNDED:
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
        if LENGTH_CRCS[length] != length_crc:
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
            if after > limit or LENGTH_CRCS[length] != length_crc:
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


def read_raw(stream: RecordStream, end: int, skip: int) -> Iterator[tuple[bytes, int]]:
    n = 0
    if stream.size != UNBOUNDED:  # records sit at fixed offsets: seek over the skipped ones
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


def read_length_delimited(stream: RecordStream, end: int, skip: int) -> Iterator[tuple[bytes, int]]:
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


def read_tfrecord(stream: RecordStream, end: int, skip: int) -> Iterator[tuple[bytes, int]]:
    """TFRecords with both CRCs checked; the data CRCs of the records whole in the buffer are
    computed together (``crc32c_many``), which is what makes small records fast."""
    n = 0
    length_crcs = LENGTH_CRCS
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
