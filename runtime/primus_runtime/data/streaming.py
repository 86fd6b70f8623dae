"""Uncompressed text and jsonl fed from a stream best read once, front to back, in large reads
(a WebHDFS response): read ahead by a thread, fed as views of the buffers read into.

Standard library only, Python 3.9+.
"""

from __future__ import annotations

import io
import queue
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import IO, cast

from .byte_ranges import RANGE_SIZE
from .text_lines import count_newlines

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
            count = count_newlines(buf, first, take) + missing
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
