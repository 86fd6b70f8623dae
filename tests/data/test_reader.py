"""The in-trainer reader undoes exactly the framing the executor applies."""

from __future__ import annotations

import io

import pytest

from primus_runtime.data.formats import frame
from primus_runtime.data.reader import TruncatedRecord, records
from primus_runtime.spec import JobSpec, SpecError


@pytest.mark.parametrize("fmt,framing", [("text", "lines"), ("jsonl", "lines"), ("tfrecord", "length_prefixed"),
                                         ("raw", "length_prefixed"), ("length_delimited", "length_prefixed")])
def test_records_round_trip_the_feed_framing(fmt, framing):
    if framing == "lines":
        sent = [b"alpha", b"", b'{"b": 2}', b"last"]
    else:
        sent = [b"\x00\x01\n\xff", b"", b"x" * 70000, b"\n\n"]
    stream = io.BytesIO(b"".join(frame(r, fmt) for r in sent))
    assert list(records(stream, framing)) == sent


def test_a_truncated_binary_record_is_an_error():
    stream = io.BytesIO(frame(b"whole", "tfrecord") + frame(b"cut short", "tfrecord")[:-3])
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


def test_commit_appends_the_records_read_so_far(tmp_path, monkeypatch):
    import json

    from primus_runtime.data import reader

    commits = tmp_path / "commits.jsonl"
    monkeypatch.setenv("PRIMUS_DATA_COMMIT_FILE", str(commits))
    monkeypatch.setenv("PRIMUS_RESTORE_CHECKPOINT", "ckpt-7")
    monkeypatch.setattr(reader, "_consumed", 0)
    it = reader.records(io.BytesIO(b"a\nb\nc\n"), "lines")
    next(it), next(it)
    assert reader.commit("ckpt-8") == 2 and reader.restore_checkpoint() == "ckpt-7"
    assert [json.loads(line) for line in commits.read_text().splitlines()] == [{"checkpoint": "ckpt-8",
                                                                                "records": 2}]
    monkeypatch.delenv("PRIMUS_DATA_COMMIT_FILE")
    with pytest.raises(RuntimeError, match="not delivered exactly once"):
        reader.commit("x")
