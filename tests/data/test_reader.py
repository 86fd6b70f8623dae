"""The in-trainer reader undoes exactly the framing the executor applies."""

from __future__ import annotations

import io

import pytest

from primus_runtime.data import formats
from primus_runtime.data.reader import TruncatedRecord, records
from primus_runtime.spec import JobSpec, SpecError


@pytest.mark.parametrize("fmt,framing", [("text", "lines"), ("jsonl", "lines"), ("tfrecord", "length_prefixed"),
                                         ("raw", "length_prefixed"), ("length_delimited", "length_prefixed")])
def test_records_round_trip_the_feed_framing(fmt, framing):
    if framing == "lines":
        sent = [b"alpha", b"", b'{"b": 2}', b"last"]
    else:
        sent = [b"\x00\x01\n\xff", b"", b"x" * 70000, b"\n\n"]
    stream = io.BytesIO(b"".join(formats.frame(r, fmt) for r in sent))
    assert list(records(stream, framing)) == sent


def test_a_truncated_binary_record_is_an_error():
    stream = io.BytesIO(formats.frame(b"whole", "tfrecord") + formats.frame(b"cut short", "tfrecord")[:-3])
    reader = records(stream, "length_prefixed")
    assert next(reader) == b"whole"
    with pytest.raises(TruncatedRecord):
        next(reader)


def test_framing_comes_from_the_spec_and_sources_must_agree():
    base = {"name": "j", "roles": [{"name": "worker", "command": "x", "consumes_input": True}]}
    spec = JobSpec.from_dict({**base, "input": {"sources": [{"name": "a", "path": "/d", "format": "tfrecord"}]}})
    assert spec.input is not None and spec.input.framing == "length_prefixed"
    with pytest.raises(SpecError, match="every source of a job must be fed the same way"):
        JobSpec.from_dict({**base, "input": {"sources": [{"name": "a", "path": "/d", "format": "tfrecord"},
                                                         {"name": "b", "path": "/e", "format": "text"}]}})
