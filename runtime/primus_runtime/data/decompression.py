"""Compressed input files: which compression a path has, and the stream of its decompressed bytes.

Standard library only at import time, Python 3.9+: ``zstandard`` (zstd before Python 3.14) is
imported only when a zstd file is read. A compressed file is always one whole-file split: its
offsets are those of the decompressed stream.
"""

from __future__ import annotations

import gzip
import zlib
from typing import IO, Any, cast

from .formats import READ_SIZE, CorruptRecord
from .site_packages import with_site_packages


def compression_for(path: str) -> str:
    """The compression that ``auto`` means for this path: by its suffix."""
    lower = path.lower()
    if lower.endswith(".gz"):
        return "gzip"
    if lower.endswith((".zst", ".zstd")):
        return "zstd"
    return "none"


def decompress(fileobj: IO[bytes], compression: str) -> IO[bytes]:
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
