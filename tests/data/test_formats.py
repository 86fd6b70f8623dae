"""Input formats: splits never cut or repeat a record, resume skips exactly, corruption is named."""

from __future__ import annotations

import ast
import gzip
import importlib
import io
import json
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from primus_runtime.data import byte_ranges, formats, streaming, text_lines
from primus_runtime.data import crc32c as crcs
from primus_runtime.data.crc32c import crc32c
from primus_runtime.data.decompression import compression_for
from primus_runtime.data.formats import COMPRESSIONS, FORMATS, CorruptRecord, Split, frame
from primus_runtime.data.records import plan_splits, read_framed, read_records, write_records

RUNTIME = Path(formats.__file__).resolve().parents[2]
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
RECORD_FORMATS = ("text", "jsonl", "tfrecord", "length_delimited")
# Every module that reads input formats: each holds its own reference to the constants it shares.
FORMAT_MODULES = tuple(importlib.import_module(f"primus_runtime.data.{name}") for name in (
    "formats", "records", "text_lines", "binary_records", "parquet", "decompression", "crc32c", "site_packages",
    "byte_ranges", "streaming"))


@contextmanager
def patched(name: str, value: object) -> Iterator[None]:
    """``name`` set to ``value`` in every format module that has it."""
    with ExitStack() as stack:
        for module in FORMAT_MODULES:
            if hasattr(module, name):
                stack.enter_context(mock.patch.object(module, name, value))
        yield


def _line(data: bytes) -> bytes:
    """Any bytes made into a valid text record: no newline, no \\r at the end (\\r inside stays)."""
    return data.replace(b"\n", b"\r").rstrip(b"\r")


_binary = st.one_of(st.binary(max_size=12), st.binary(min_size=120, max_size=140))  # 127/128: varint width
_records = {
    "text": st.lists(_binary.map(_line), max_size=40),
    "jsonl": st.lists(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                                   lambda inner: st.lists(inner, max_size=3), max_leaves=5)
                      .map(lambda v: json.dumps(v, ensure_ascii=False).encode()), max_size=40),
    "tfrecord": st.lists(_binary, max_size=40),
    "length_delimited": st.lists(_binary, max_size=40),
}


def _encode(records: list[bytes], fmt: str, compression: str = "none") -> bytes:
    out = io.BytesIO()
    if compression == "gzip":
        with gzip.GzipFile(fileobj=out, mode="wb") as zipped:
            write_records(zipped, records, fmt)
    elif compression == "zstd":
        import zstandard

        plain = io.BytesIO()
        write_records(plain, records, fmt)
        out.write(zstandard.ZstdCompressor().compress(plain.getvalue()))
    else:
        write_records(out, records, fmt)
    return out.getvalue()


def _splits(data: bytes, fmt: str, compression: str, target: int) -> list[Split]:
    return plan_splits(lambda: io.BytesIO(data), len(data), fmt, compression, target)


def _read(data: bytes, fmt: str, compression: str, split: Split, skip: int = 0) -> list[tuple[bytes, int]]:
    return list(read_records(io.BytesIO(data), fmt, compression, split.start, split.end, skip))


def _read_all(data: bytes, fmt: str, compression: str, target: int) -> list[bytes]:
    """Every split's records, checking on the way that ``read_framed`` feeds the same records framed."""
    splits = _splits(data, fmt, compression, target)
    if data and fmt != "parquet":
        assert splits[0].start == 0 and all(a.end == b.start for a, b in zip(splits, splits[1:], strict=False))
        assert splits[-1].end == len(data)
    records = []
    for split in splits:
        in_split = _read(data, fmt, compression, split)
        _check_framed(data, fmt, compression, split, 0, in_split)
        records += [record for record, _ in in_split]
    return records


def _check_framed(data: bytes, fmt: str, compression: str, split: Split, skip: int,
                  expected: list[tuple[bytes, int]]) -> None:
    blocks = list(read_framed(io.BytesIO(data), fmt, compression, split.start, split.end, skip))
    assert b"".join(block for block, _ in blocks) == b"".join(frame(record, fmt) for record, _ in expected)
    if expected:
        assert blocks[-1][1] == expected[-1][1]
    if fmt in byte_ranges.RANGE_FORMATS and compression == "none":
        for step in (1, 7, byte_ranges.RANGE_SIZE):
            _check_ranges(data, fmt, split, skip, expected, step)
            if fmt != "raw":
                _check_streamed(data, split, skip, expected, step)


def _check_ranges(data: bytes, fmt: str, split: Split, skip: int, expected: list[tuple[bytes, int]],
                  step: int) -> None:
    """``framed_ranges`` feeds what ``read_framed`` does, and each range ends after record ``n``."""
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.flush()
        fed = b""
        for offset, length, block, n in byte_ranges.framed_ranges(f.fileno(), fmt, split.start, split.end, skip, step):
            assert length > 0
            if block is None:
                part = data[offset:offset + length]
                if fmt == "raw":
                    part = b"".join(frame(part[at:at + formats.RAW_CHUNK], fmt)
                                    for at in range(0, len(part), formats.RAW_CHUNK))
                    assert len(part) == byte_ranges.raw_framed_length(length)
                block = part
            fed += block
            assert fed == b"".join(frame(record, fmt) for record, _ in expected[:n - skip]), n
        assert fed == b"".join(frame(record, fmt) for record, _ in expected)


def _check_streamed(data: bytes, split: Split, skip: int, expected: list[tuple[bytes, int]], step: int) -> None:
    """``streamed_lines`` (HDFS) feeds what ``read_framed`` does, and each block ends after record ``n``."""
    fed = b""
    for block, n in streaming.streamed_lines(io.BytesIO(data), split.start, split.end, skip, step):
        assert len(block) > 0
        fed += bytes(block)
        assert fed == b"".join(frame(record, "text") for record, _ in expected[:n - skip]), n
    assert fed == b"".join(frame(record, "text") for record, _ in expected)


@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("headroom", [4, 64, streaming.STREAM_HEADROOM])
def test_streamed_lines_with_lines_longer_than_the_headroom_and_blocks_read_ahead(tmp_path, headroom, ahead):
    """The start of a line a block cut goes in front of the next block, or (longer than the room
    there) into a new buffer; blocks read ahead by another thread come out the same."""
    rng = random.Random(headroom)
    lines = [bytes([97 + i % 26]) * rng.choice([0, 3, 40, 300, 5000]) for i in range(400)]
    data = b"\n".join(lines) + b"\r\nlast"
    path = tmp_path / "lines.txt"
    path.write_bytes(data)
    for start, end, skip in ((0, len(data), 0), (7, len(data) // 2, 3), (len(data) // 3, len(data), 0)):
        expected = list(read_records(io.BytesIO(data), "text", "none", start, end, skip))
        with mock.patch.object(streaming, "STREAM_HEADROOM", headroom):
            blocks = streaming.ReadAhead(lambda: open(path, "rb"), start, 256, depth=2) if ahead else None
            fed = b"".join(bytes(b) for b, _ in streaming.streamed_lines(io.BytesIO(data), start, end, skip, 256,
                                                                       blocks=blocks))
            if blocks is not None:
                blocks.close()
        assert fed == b"".join(frame(record, "text") for record, _ in expected)


def test_stream_buffers_are_used_again_only_once_nothing_refers_to_them():
    buffers = streaming._Buffers(16)
    view = memoryview(buffers.take())[2:5]  # a block still queued, or logged by the feed
    held = view.obj
    second = buffers.take()
    assert second is not held
    del view, held
    third = buffers.take()
    assert third is buffers.pool[0] and third is not second  # nothing referred to it any more


def test_a_read_error_ahead_reaches_the_consumer():
    def broken() -> io.BytesIO:
        raise OSError("the DataNode went away")

    with pytest.raises(OSError, match="went away"):
        list(streaming.streamed_lines(None, 0, 100, blocks=streaming.ReadAhead(broken, 0)))


@pytest.mark.parametrize("fmt", RECORD_FORMATS)
@PROPERTY
@given(data=st.data(), read_size=st.sampled_from([1, 5, 64, formats.READ_SIZE]))
def test_splits_deliver_every_record_once_in_order(fmt, data, read_size):
    records = data.draw(_records[fmt])
    encoded = _encode(records, fmt)
    target = data.draw(st.integers(1, len(encoded) + 10))
    with patched("READ_SIZE", read_size), patched("_PLAN_READ_SIZE", read_size):
        assert _read_all(encoded, fmt, "none", target) == records


@pytest.mark.parametrize("fmt", RECORD_FORMATS)
@PROPERTY
@given(data=st.data())
def test_gzip_file_is_one_split_that_delivers_every_record(fmt, data):
    records = data.draw(_records[fmt])
    encoded = _encode(records, fmt, "gzip")
    target = data.draw(st.integers(1, len(encoded) + 10))
    assert _splits(encoded, fmt, "gzip", target) == [Split(0, len(encoded))]
    assert _read_all(encoded, fmt, "gzip", target) == records


@pytest.mark.parametrize("fmt", RECORD_FORMATS)
def test_zstd_file_of_several_frames_delivers_every_record(fmt):
    records = [b"1", b"22", b"333"] * 1000 if fmt != "jsonl" else [b'{"i": %d}' % i for i in range(3000)]
    encoded = _encode(records[:1000], fmt, "zstd") + _encode(records[1000:], fmt, "zstd")
    assert _read_all(encoded, fmt, "zstd", 100) == records


@PROPERTY
@given(data=st.data(), chunk=st.sampled_from([1, 3, 16]))
def test_raw_records_are_fixed_chunks_and_splits_fall_between_them(data, chunk):
    blob = data.draw(st.binary(max_size=200))
    target = data.draw(st.integers(1, len(blob) + 10))
    with patched("RAW_CHUNK", chunk):
        out = _read_all(blob, "raw", "none", target)
        for split in _splits(blob, "raw", "none", target):
            assert split.start % chunk == 0
    assert b"".join(out) == blob
    assert all(len(record) == chunk for record in out[:-1])


def test_raw_uses_64_kib_chunks_also_compressed():
    blob = bytes(range(256)) * 1000  # 256,000 bytes: 3 whole chunks and a short one
    out = _read_all(blob, "raw", "none", 100_000)
    assert [len(r) for r in out] == [65536, 65536, 65536, 256_000 - 3 * 65536]
    assert b"".join(out) == blob
    assert b"".join(_read_all(_encode([blob], "raw", "gzip"), "raw", "gzip", 1)) == blob


def test_text_lines_near_the_read_size_are_neither_cut_nor_repeated():
    size = formats.READ_SIZE
    records = [b"x" * (size - 2), b"", b"y" * 3, b"\rz" * (size // 2), b"w" * (size + 1), b"last"]
    encoded = _encode(records, "text")
    for target in (size - 1, size, size + 1, 3 * size // 2, 10 * size):
        assert _read_all(encoded, "text", "none", target) == records


@pytest.mark.parametrize("ending", [b"last", b"last\r"])
def test_text_strips_crlf_and_keeps_a_final_line_without_newline(ending):
    encoded = b"a\r\nb\rc\r\n\r\n" + ending
    records = _read(encoded, "text", "none", Split(0, len(encoded)))
    assert [r for r, _ in records] == [b"a", b"b\rc", b"", b"last"]
    _check_framed(encoded, "text", "none", Split(0, len(encoded)), 0, records)


def test_text_line_belongs_to_the_split_its_first_byte_is_in():
    encoded = b"aaaa\nbbbb\ncccc\n"  # lines start at 0, 5, 10
    assert [r for r, _ in _read(encoded, "text", "none", Split(0, 5))] == [b"aaaa"]
    assert [r for r, _ in _read(encoded, "text", "none", Split(5, 6))] == [b"bbbb"]
    assert [r for r, _ in _read(encoded, "text", "none", Split(6, 10))] == []
    assert [r for r, _ in _read(encoded, "text", "none", Split(6, 11))] == [b"cccc"]


@pytest.mark.parametrize("fmt", RECORD_FORMATS)
@PROPERTY
@given(data=st.data())
def test_resume_skips_exactly_the_records_already_delivered(fmt, data):
    records = data.draw(_records[fmt].filter(bool))
    encoded = _encode(records, fmt)
    splits = _splits(encoded, fmt, "none", data.draw(st.integers(1, len(encoded))))
    split = data.draw(st.sampled_from(splits))
    whole = _read(encoded, fmt, "none", split)
    assert [n for _, n in whole] == list(range(1, len(whole) + 1))
    skip = data.draw(st.integers(0, len(whole) + 2))
    assert _read(encoded, fmt, "none", split, skip) == whole[skip:]
    _check_framed(encoded, fmt, "none", split, skip, whole[skip:])


def test_resume_inside_a_compressed_file():
    records = [b"r%d" % i for i in range(5000)]
    encoded = _encode(records, "length_delimited", "gzip")
    out = _read(encoded, "length_delimited", "gzip", Split(0, len(encoded)), skip=4321)
    assert out[0] == (b"r4321", 4322) and len(out) == 5000 - 4321


def _reference_crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


FAST_CRC = crcs._fast_crc()
CRC_IMPLEMENTATIONS = ["standard library", pytest.param("google-crc32c", marks=pytest.mark.skipif(
    FAST_CRC is None, reason="google-crc32c (with its C extension) is not installed"))]


@contextmanager
def crc_implementation(impl: str) -> Iterator[None]:
    """crc32c._crc() finds this CRC-32C implementation for the block."""
    with mock.patch.object(crcs, "_crc_backend", FAST_CRC if impl == "google-crc32c" else None), \
            mock.patch.object(crcs, "_crc_looked_up", True):
        yield


@pytest.fixture(params=CRC_IMPLEMENTATIONS)
def crc_impl(request) -> Iterator[str]:
    """Every test using it runs with each CRC-32C implementation."""
    with crc_implementation(request.param):
        yield str(request.param)


def test_crc32c_known_vectors(crc_impl):
    assert crc32c(b"") == 0
    assert crc32c(b"123456789") == 0xE3069283
    # RFC 3720 (iSCSI), appendix B.4
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E
    assert crc32c(bytes(range(31, -1, -1))) == 0x113FDB5C


@pytest.mark.parametrize("impl", CRC_IMPLEMENTATIONS)
@settings(max_examples=150, deadline=None)
@given(st.one_of(st.binary(max_size=100), st.binary(min_size=500, max_size=1200)), st.integers(0, 1200))
def test_crc32c_matches_the_bitwise_definition_and_continues(impl, data, cut):
    with crc_implementation(impl):
        assert crc32c(data) == _reference_crc32c(data)
        assert crc32c(data[cut:], crc32c(data[:cut])) == crc32c(data)


@pytest.mark.skipif(FAST_CRC is None, reason="google-crc32c (with its C extension) is not installed")
@pytest.mark.parametrize("seed", range(20))
def test_google_crc32c_and_the_standard_library_code_agree(seed):
    rng = random.Random(seed)
    assert FAST_CRC is not None
    for size in (0, 1, 7, 8, 63, 64, 511, 512, 4096, 16_385, rng.randrange(300_000)):
        data = rng.randbytes(size)
        assert FAST_CRC.value(data) == crcs.crc32c_python(data)
        cut = rng.randrange(size + 1)
        assert FAST_CRC.extend(crcs.crc32c_python(data[:cut]), data[cut:]) == crcs.crc32c_python(data)
    buf = rng.randbytes(40_000)
    spans = [tuple(sorted((rng.randrange(len(buf)), rng.randrange(len(buf))))) for _ in range(30)]
    assert [FAST_CRC.value(buf[a:b]) for a, b in spans] == crcs.crc32c_many_python(buf, spans)


@pytest.mark.parametrize("size", [511, 512, 4095, 4096, 40_000, 300_001])  # every width of the lane-wise path
def test_crc32c_lane_wise_path_agrees_with_slicing_by_8(size):
    data = random.Random(size).randbytes(size)
    python = crcs.crc32c_python
    assert python(data) == crcs._crc_sliced(0xFFFFFFFF, data) ^ 0xFFFFFFFF
    assert python(data[size // 3:], python(data[:size // 3])) == python(data)


@pytest.mark.parametrize("impl", CRC_IMPLEMENTATIONS)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_crc32c_many_equals_one_crc32c_per_span(impl, data):
    size = data.draw(st.one_of(st.integers(0, 300), st.integers(15_000, 20_000)))  # spans on both sides of 16 KiB
    buf = random.Random(data.draw(st.integers(0, 1000))).randbytes(size)
    bounds = st.integers(0, len(buf))
    spans = [tuple(sorted(pair)) for pair in data.draw(st.lists(st.tuples(bounds, bounds), max_size=20))]
    with crc_implementation(impl):
        assert crcs.crc32c_many(buf, spans) == [_reference_crc32c(buf[a:b]) for a, b in spans]


def test_reader_threads_building_the_crc_tables_at_once_all_read_correctly(monkeypatch):
    import threading

    monkeypatch.setattr(crcs, "_crc_backend", None)  # the standard-library code builds tables
    monkeypatch.setattr(crcs, "_crc_looked_up", True)
    monkeypatch.setattr(crcs, "_PADS", [])
    monkeypatch.setattr(crcs, "_WIDE", {})
    records = [random.Random(i).randbytes(i * 37 % 3000) for i in range(300)]
    encoded = _encode(records, "tfrecord")
    results: list[object] = []
    barrier = threading.Barrier(8)

    def read() -> None:
        barrier.wait()
        try:
            results.append([r for r, _ in _read(encoded, "tfrecord", "none", Split(0, len(encoded)))])
        except Exception as exc:  # noqa: BLE001 - the assertion below shows it
            results.append(exc)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [records] * 8


def test_tfrecord_layout_matches_the_tensorflow_framing(crc_impl):
    encoded = _encode([b"hello"], "tfrecord")
    length = (5).to_bytes(8, "little")
    assert encoded[:8] == length and encoded[12:17] == b"hello" and len(encoded) == 21
    assert int.from_bytes(encoded[8:12], "little") == crcs.masked_crc32c(length)
    # the masked CRC: rotate right by 15, add 0xa282ead8
    crc = crc32c(b"hello")
    assert int.from_bytes(encoded[17:], "little") == (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_tfrecord_flipped_data_byte_is_a_crc_mismatch_at_the_record_offset(crc_impl):
    encoded = bytearray(_encode([b"a" * 10, b"b" * 10, b"c" * 10], "tfrecord"))
    encoded[26 + 12 + 3] ^= 0x01  # data of the second record (records are 26 bytes)
    delivered = []
    with pytest.raises(CorruptRecord, match="at byte 26: CRC mismatch") as caught:
        for record, _ in read_records(io.BytesIO(bytes(encoded)), "tfrecord", "none", 0, len(encoded)):
            delivered.append(record)
    assert caught.value.offset == 26
    assert delivered == [b"a" * 10]


def test_tfrecord_corrupt_length_is_a_bad_length_even_when_planning(crc_impl):
    encoded = bytearray(_encode([b"a" * 10, b"b" * 10], "tfrecord"))
    encoded[26] ^= 0x40
    with pytest.raises(CorruptRecord, match="at byte 26: bad length"):
        _read(bytes(encoded), "tfrecord", "none", Split(0, len(encoded)))
    with pytest.raises(CorruptRecord, match="at byte 26: bad length"):
        _splits(bytes(encoded), "tfrecord", "none", 1)


@pytest.mark.parametrize("fmt", ["tfrecord", "length_delimited"])
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_truncated_record_is_named_with_its_offset(fmt, compression):
    whole = _encode([b"a" * 200, b"b" * 200], fmt)
    first = len(_encode([b"a" * 200], fmt))
    cut = whole[:-5]
    if compression == "gzip":
        cut = gzip.compress(cut)
    with pytest.raises(CorruptRecord, match=f"at byte {first}: truncated record") as caught:
        _read(cut, fmt, compression, Split(0, len(cut)))
    assert caught.value.offset == first


@pytest.mark.parametrize("compression", ["gzip", "zstd"])
def test_corrupt_compressed_stream_is_a_corrupt_record(compression):
    encoded = _encode([b"line %d" % i for i in range(20000)], "text", compression)
    with pytest.raises(CorruptRecord, match=f"corrupt {compression} data"):
        _read(encoded[:len(encoded) // 2], "text", compression, Split(0, len(encoded) // 2))
    flipped = bytearray(encoded)
    flipped[len(encoded) // 2] ^= 0xFF
    with pytest.raises(CorruptRecord, match=f"corrupt {compression} data"):
        _read(bytes(flipped), "text", compression, Split(0, len(encoded)))


def test_varint_longer_than_ten_bytes_is_a_bad_length():
    with pytest.raises(CorruptRecord, match="at byte 0: bad length"):
        _read(b"\xff" * 12, "length_delimited", "none", Split(0, 12))


def test_corrupt_record_survives_pickling():
    import pickle

    error = pickle.loads(pickle.dumps(CorruptRecord(7, "CRC mismatch")))
    assert (error.offset, error.problem, str(error)) == (7, "CRC mismatch", "corrupt record at byte 7: CRC mismatch")


@pytest.mark.parametrize("fmt", ["tfrecord", "length_delimited"])
def test_planning_seeks_over_record_bodies(fmt):
    encoded = _encode([bytes(1 << 20)] * 8, fmt)
    read_bytes = []

    class Counting(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            chunk = super().read(size)
            read_bytes.append(len(chunk))
            return chunk

    splits = plan_splits(lambda: Counting(encoded), len(encoded), fmt, "none", 3 << 20)
    assert [s.end - s.start for s in splits[:2]] == [len(encoded) // 8 * 3] * 2
    assert sum(read_bytes) < len(encoded) // 10


@pytest.mark.parametrize("fmt", ["tfrecord", "length_delimited"])
def test_binary_split_ends_at_the_first_record_boundary_past_its_target(fmt):
    encoded = _encode([b"r" * 10] * 100, fmt)
    record = len(encoded) // 100  # 26 bytes for tfrecord, 11 for length_delimited
    splits = _splits(encoded, fmt, "none", 4 * record)
    assert splits == [Split(at, at + 4 * record) for at in range(0, len(encoded), 4 * record)]
    splits = _splits(encoded, fmt, "none", 4 * record - 1)
    assert splits[0] == Split(0, 4 * record)


@pytest.mark.parametrize("target", [1, 50_000])
def test_length_delimited_lengths_of_every_varint_width_plan_and_read(target):
    records = [bytes([i]) * size for i, size in enumerate([16384, 16383, 1 << 15, 128, 127, 0, 1 << 21] * 3)]
    assert _read_all(_encode(records, "length_delimited"), "length_delimited", "none", target) == records


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_empty_file_has_no_splits(fmt, compression):
    if fmt == "parquet" and compression != "none":
        return
    assert plan_splits(lambda: io.BytesIO(b""), 0, fmt, compression, 100) == []


def test_text_splits_are_byte_ranges_of_about_the_target_size():
    assert _splits(b"x" * 1000, "text", "none", 300) == [Split(0, 250), Split(250, 500), Split(500, 750),
                                                        Split(750, 1000)]


def test_frame_ends_lines_and_length_prefixes_binary_records():
    assert frame(b"abc", "text") == b"abc\n"
    assert frame(b"{}", "jsonl") == b"{}\n"
    assert frame(b"{}", "parquet") == b"{}\n"
    for fmt in ("raw", "tfrecord", "length_delimited"):
        assert frame(b"abc", fmt) == b"\x00\x00\x00\x03abc"
        assert frame(b"", fmt) == b"\x00\x00\x00\x00"


def test_compression_for_suffixes():
    assert compression_for("/d/part-0.gz") == "gzip"
    assert compression_for("/d/part-0.ZST") == "zstd"
    assert compression_for("/d/part-0.zstd") == "zstd"
    assert compression_for("/d/part-0.tfrecord") == "none"


def test_unknown_names_are_refused_with_the_choices():
    with pytest.raises(ValueError, match="unknown format 'csv'"):
        plan_splits(lambda: io.BytesIO(b""), 0, "csv", "none", 1)
    with pytest.raises(ValueError, match="compression_for"):
        plan_splits(lambda: io.BytesIO(b""), 0, "text", "auto", 1)
    with pytest.raises(ValueError, match="parquet"):
        plan_splits(lambda: io.BytesIO(b""), 0, "parquet", "gzip", 1)
    with pytest.raises(ValueError, match="newline"):
        write_records(io.BytesIO(), [b"a\nb"], "text")


def test_parquet_splits_are_row_group_ranges_and_rows_are_json_lines():
    rows = [{"id": i, "name": f"n{i}", "score": i / 2, "tags": ["a"] * (i % 3)} for i in range(1000)]
    out = io.BytesIO()
    write_records(out, [json.dumps(row).encode() for row in rows], "parquet", row_group_rows=100)
    encoded = out.getvalue()
    one_group = plan_splits(lambda: io.BytesIO(encoded), len(encoded), "parquet", "none", 1)
    assert one_group == [Split(i, i + 1) for i in range(10)]
    whole = plan_splits(lambda: io.BytesIO(encoded), len(encoded), "parquet", "none", 1 << 30)
    assert whole == [Split(0, 10)]
    assert [json.loads(r) for r in _read_all(encoded, "parquet", "none", 1)] == rows
    resumed = _read(encoded, "parquet", "none", Split(2, 5), skip=150)
    assert [json.loads(r)["id"] for r, _ in resumed] == list(range(350, 500))
    assert resumed[0][1] == 151


def test_unreadable_parquet_file_is_a_corrupt_record():
    out = io.BytesIO()
    write_records(out, [b'{"a": 1}'], "parquet")
    for broken in (b"not parquet at all", out.getvalue()[:-12]):
        with pytest.raises(CorruptRecord, match="at byte 0: not a readable parquet file"):
            plan_splits(lambda data=broken: io.BytesIO(data), len(broken), "parquet", "none", 1)
        with pytest.raises(CorruptRecord, match="not a readable parquet file"):
            _read(broken, "parquet", "none", Split(0, 1))


def test_parquet_values_without_a_json_type_are_written_as_strings():
    import datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.table({"day": [datetime.date(2026, 1, 2)], "blob": [b"\x00\xff"]}), out)
    encoded = out.getvalue()
    assert _read(encoded, "parquet", "none", Split(0, 1)) == [(b'{"day":"2026-01-02","blob":"AP8="}', 1)]


def test_missing_optional_packages_are_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    monkeypatch.setitem(sys.modules, "zstandard", None)
    monkeypatch.setitem(sys.modules, "compression", None)
    with pytest.raises(ImportError, match="'pyarrow' package"):
        plan_splits(lambda: io.BytesIO(b"PAR1"), 4, "parquet", "none", 1)
    with pytest.raises(ImportError, match="'zstandard' package"):
        _read(b"x", "text", "zstd", Split(0, 1))


def test_modules_import_with_the_standard_library_only():
    code = ("import sys\n"
            f"sys.path.insert(0, {str(RUNTIME)!r})\n"
            "import primus_runtime.data.records, primus_runtime.data.byte_ranges, primus_runtime.data.streaming\n"
            "loaded = {m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names)\n"
            "assert loaded == {'primus_runtime', '__main__'}, loaded\n"
            "assert 'pyarrow' not in sys.modules and 'zstandard' not in sys.modules\n")
    proc = subprocess.run([sys.executable, "-S", "-I", "-c", code], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("blocked", [False, True])
def test_executor_under_dash_s_checks_tfrecord_crcs_with_google_crc32c_when_installed(tmp_path, blocked):
    """The executor runs with -S: google-crc32c is found through with_site_packages, only once a CRC is
    needed; without it (blocked here) the standard-library code reads the same records."""
    path = tmp_path / "records.tfrecord"
    records = [random.Random(i).randbytes(i * 91 % 3000) for i in range(200)]
    path.write_bytes(_encode(records, "tfrecord"))
    code = ("import sys\n"
            + ("sys.modules['google_crc32c'] = None\n" if blocked else "")
            + f"sys.path.insert(0, {str(RUNTIME)!r})\n"
            "from primus_runtime.data import crc32c, records\n"
            "assert 'google_crc32c' not in sys.modules or sys.modules['google_crc32c'] is None\n"
            f"with open({str(path)!r}, 'rb') as f:\n"
            "    got = [r for r, _ in records.read_records(f, 'tfrecord', 'none', 0, 1 << 30)]\n"
            "print(len(got), sum(map(len, got)), crc32c._crc() is not None)\n")
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    count, size, fast = proc.stdout.split()
    assert (int(count), int(size)) == (len(records), sum(map(len, records)))
    assert fast == str(FAST_CRC is not None and not blocked)


def test_modules_parse_as_python_3_9():
    for module in FORMAT_MODULES:
        path = Path(module.__file__ or "")
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))


_ROUND_TRIP = """
import gzip, io, sys
from primus_runtime.data.formats import frame
from primus_runtime.data.records import plan_splits, read_framed, read_records, write_records
records = [b"a", b"", b"b\\rc", b"x" * 3000] * 50
for fmt in ("text", "tfrecord", "length_delimited"):
    out = io.BytesIO()
    write_records(out, records, fmt)
    for compression, blob in (("none", out.getvalue()), ("gzip", gzip.compress(out.getvalue()))):
        splits = plan_splits(lambda: io.BytesIO(blob), len(blob), fmt, compression, 1000)
        got = [r for s in splits for r, _ in read_records(io.BytesIO(blob), fmt, compression, s.start, s.end)]
        fed = b"".join(b for s in splits for b, _ in read_framed(io.BytesIO(blob), fmt, compression, s.start, s.end))
        assert got == records and fed == b"".join(frame(r, fmt) for r in records), (fmt, compression)
"""


def _python_3_9() -> str | None:
    for candidate in [shutil.which("python3.9"), *sorted(Path("/root/.pyenv/versions").glob("3.9*/bin/python"))]:
        if candidate and subprocess.run([str(candidate), "-c", "import sys; assert sys.version_info[:2] == (3, 9)"],
                                        capture_output=True).returncode == 0:
            return str(candidate)
    return None


def test_round_trip_on_python_3_9_when_this_machine_has_it():
    python = _python_3_9()
    if python is None:
        pytest.skip("no Python 3.9 interpreter here; parsing as 3.9 is checked above")
    proc = subprocess.run([python, "-S", "-I", "-c", f"import sys; sys.path.insert(0, {str(RUNTIME)!r})\n" + _ROUND_TRIP],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


@PROPERTY
@given(data=st.data(), chunk=st.sampled_from([1, 3, 16]))
def test_raw_ranges_resume_like_read_framed(data, chunk):
    blob = data.draw(st.binary(min_size=1, max_size=200))
    with patched("RAW_CHUNK", chunk):
        split = data.draw(st.sampled_from(_splits(blob, "raw", "none", data.draw(st.integers(1, len(blob) + 10)))))
        whole = _read(blob, "raw", "none", split)
        skip = data.draw(st.integers(0, len(whole) + 2))
        _check_framed(blob, "raw", "none", split, skip, whole[skip:])


@pytest.mark.parametrize("line", [b"a\n", b"x" * 30 + b"\n", b"y" * 200 + b"\n", b"\n"])
def test_newline_count_of_a_range_prefix(line):
    data = (line * (20_000 // len(line)))[:20_000] + b"tail"
    for take in (0, 1, 4096, 9_999, 10_000, 19_999, len(data)):
        assert text_lines.count_newlines(data, 0, take) == data.count(b"\n", 0, take)
        for start in (0, 1, 4097, take // 3):
            assert text_lines.count_newlines(data, start, take) == data.count(b"\n", start, take)
