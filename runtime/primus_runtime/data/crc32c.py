"""CRC-32C (Castagnoli), and TFRecord's masking of it (standard library only, Python 3.9+).

google-crc32c's C extension (hardware CRC32 instructions where the CPU has them) when it is
installed, looked for the first time a CRC is computed (under ``-S``, the executor, through
``with_site_packages``); else the table-driven standard-library code below, about 20x slower
on large records.
"""

from __future__ import annotations

import array
import itertools
import struct
import sys
from collections.abc import Callable
from typing import NamedTuple

from .site_packages import with_site_packages

_U32 = struct.Struct("<I")


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


LENGTH_CRCS = _LengthCrcs()
