"""Edge cases of the Kafka input without a broker: how partitions are spread and moved (the
dispatcher), and how a partition's records become framed blocks and offsets (the executor's reader).
The end-to-end behaviour is tested against a real broker in tests/kafka."""

from __future__ import annotations

import struct
from typing import Any

from data.test_dispatcher import Events, ids, report, tasks
from primus_runtime.data import kafka_reader
from primus_runtime.data.dispatcher import Dispatcher, Ending, Task, TaskState
from primus_runtime.data.kafka_reader import OffsetMap
from primus_runtime.spec import InputSpec


def stream_tasks(n: int) -> list[Task]:
    return [Task(f"k/t/{p}", "", "k", f"kafka://t/{p}", "jsonl", "none", 0, -1, 0, offset=0) for p in range(n)]


def make(files: bool = False) -> Dispatcher:
    section: dict[str, Any] = {"kafka": {"bootstrap_servers": "b:9092", "topics": ["t"]}}
    if files:
        section.update(sources=[{"name": "c", "path": "/d/{{YYYY}}{{MM}}{{DD}}"}],
                       time_range={"start": "2026-12-01", "end": "2026-12-01"})
    return Dispatcher(InputSpec.model_validate(section), Events())


def pull(d: Dispatcher, holder: str, **fields: Any) -> dict[str, Any]:
    held = [t for t, _ in d.held.get(holder, {}).items()]
    return d.heartbeat(holder, report({"need_tasks": 1, "held": held, **fields}))


def test_partitions_are_spread_evenly_and_the_extra_ones_go_to_the_first_holders_by_id():
    d = make()
    d.expected_consumers = 2
    d.add_partition("", stream_tasks(5))
    assert len(ids(pull(d, "a"))) == 3  # 5 over 2 consumers: 3 and 2, however few have asked yet
    assert len(ids(pull(d, "b"))) == 2
    assert "revoke" not in pull(d, "a") and "revoke" not in pull(d, "b")


def test_a_new_consumer_gets_partitions_revoked_from_the_busiest_once_they_are_released():
    d = make()
    d.add_partition("", stream_tasks(4))
    assert len(ids(pull(d, "a"))) == 4  # alone
    pull(d, "b")  # a second consumer: 2 each
    reply = pull(d, "a")
    assert reply["revoke"] == ["k/t/2", "k/t/3"]  # the newest go
    assert pull(d, "a")["revoke"] == ["k/t/2", "k/t/3"]  # asked again until they come back
    # Released at the position the trainer consumed; another executor takes them from there.
    pull(d, "a", progress={"k/t/2": {"records": 7, "bytes": 70, "offset": 9, "time": 1000}}, released=["k/t/2"])
    assert d.tasks["k/t/2"].state is TaskState.QUEUED and d.tasks["k/t/2"].offset == 9
    assigned = pull(d, "b")["tasks"]
    assert [(t["task_id"], t["start"], t["skip"]) for t in assigned] == [("k/t/2", 9, 7)]
    assert pull(d, "a")["revoke"] == ["k/t/3"]


def test_a_released_partition_of_another_holder_is_ignored():
    d = make()
    d.add_partition("", stream_tasks(1))
    pull(d, "a")
    pull(d, "b", released=["k/t/0"])
    assert d.tasks["k/t/0"].holder == "a" and d.tasks["k/t/0"].state is TaskState.RUNNING


def test_file_tasks_are_handed_out_before_the_stream():
    d = make(files=True)
    d.add_partition("2026-12-01", tasks("2026-12-01", 2))
    d.add_partition("", stream_tasks(2))
    assert ids(pull(d, "a")) == ["c/2026-12-01/f0:0"]  # a file is queued: no partition yet
    # The last file handed out, the stream follows at once.
    assert ids(pull(d, "a", done=["c/2026-12-01/f0:0"])) == ["c/2026-12-01/f1:0", "k/t/0", "k/t/1"]


def test_a_stream_interrupted_again_and_again_while_it_moves_on_is_never_given_up():
    d = make()
    d.add_partition("", stream_tasks(1))
    for n in range(20):  # far more than max_task_interruptions (10)
        pull(d, "a")
        pull(d, "a", progress={"k/t/0": {"records": (n + 1) * 10, "bytes": 1, "offset": (n + 1) * 10}},
             reading="k/t/0")
        d.release("a", Ending.CRASHED, "killed", slot=f"w-{n % 2}")
    task = d.tasks["k/t/0"]
    assert task.state is TaskState.QUEUED and task.offset == 200 and not d.events.failed  # type: ignore[attr-defined]


def test_the_journal_keeps_offsets_and_a_restart_resumes_from_them():
    d = make()
    d.add_partition("", stream_tasks(2))
    pull(d, "a", progress={})
    pull(d, "a", progress={"k/t/0": {"records": 5, "bytes": 50, "offset": 12, "time": 99}})
    saved = d.saved_state()
    assert saved["k/t/0"]["offset"] == 12 and saved["k/t/0"]["time"] == 99 and "offset" in saved["k/t/1"]
    again = Dispatcher(d.spec, Events(), recovered=saved)
    again.add_partition("", stream_tasks(2))
    assert again.tasks["k/t/0"].offset == 12 and again.tasks["k/t/0"].records == 5
    assert [(t["task_id"], t["start"]) for t in pull(again, "b")["tasks"]] == [("k/t/0", 12), ("k/t/1", 0)]


# --- the executor's reader ---


class Message:
    def __init__(self, offset: int, value: bytes, timestamp: int = 0):
        self._offset, self._value, self._timestamp = offset, value, timestamp

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return 1, self._timestamp

    def error(self) -> None:
        return None

    def __len__(self) -> int:
        return len(self._value)


def test_offsets_follow_the_counts_and_gaps_are_remembered():
    offsets = OffsetMap(count=10, offset=100)  # 10 records read by earlier attempts, resuming at offset 100
    batch = [Message(o, b"{}") for o in (100, 101, 105, 106, 110)]  # compaction left gaps
    assert kafka_reader._note_offsets(batch, offsets, 10) == 15
    # The next offset to read once that many records are consumed: the next record's, past a gap.
    assert [offsets.offset_at(c) for c in range(10, 16)] == [100, 101, 105, 106, 110, 111]
    assert kafka_reader._note_offsets([Message(111, b"{}"), Message(112, b"{}")], offsets, 15) == 17  # no gap
    assert offsets.breaks_at == [10, 12, 14]  # a contiguous batch costs nothing
    offsets.forget_before(15)
    assert offsets.offset_at(16) == 112


def test_a_block_is_framed_at_once_and_a_json_value_spread_over_lines_becomes_one_line():
    batch = [Message(0, b'{"a": 1}'), Message(1, b'{\n "b": 2\n}'), Message(2, b"")]
    assert kafka_reader._frame(batch, lines=True) == b'{"a": 1}\n{  "b": 2 }\n\n'
    framed = kafka_reader._frame([Message(0, b"xy"), Message(1, b"")], lines=False)
    assert framed == struct.pack(">I", 2) + b"xy" + struct.pack(">I", 0)


def test_reading_stops_at_the_end_offset_or_before_the_first_record_at_the_end_time():
    batch = [Message(o, b"{}", timestamp=1000 + o) for o in range(5)]
    assert [m.offset() for m in kafka_reader._until_end(batch, 3, None)[0]] == [0, 1, 2]
    assert kafka_reader._until_end(batch, 3, None)[1] is True
    assert kafka_reader._until_end(batch, 5, None)[1] is True  # the last record before the end: done
    assert kafka_reader._until_end(batch, 6, None)[1] is False
    kept, finished = kafka_reader._until_end(batch, -1, 1002)
    assert [m.offset() for m in kept] == [0, 1] and finished


def test_a_partition_never_handed_out_is_journaled_at_its_first_offset(tmp_path):
    # A restarted AM must not resolve `start: latest` again for it: records in between would be skipped.
    from primus_runtime.data.journal import TaskJournal, recover

    journal = TaskJournal(tmp_path, keep_listing=False)
    d = Dispatcher(make().spec, Events(), store=journal)
    listed = stream_tasks(1)
    listed[0].offset = 41
    d.add_partition("", listed)
    journal.flush()
    assert recover(tmp_path)["k/t/0"]["offset"] == 41


def test_a_large_batch_is_fed_in_blocks_so_that_positions_move_within_it(monkeypatch):
    monkeypatch.setattr(kafka_reader, "BLOCK_BYTES", 100)
    batch = [Message(o, b"x" * 30) for o in range(10)]
    blocks = kafka_reader._blocks(batch)
    assert [len(b) for b in blocks] == [3, 3, 3, 1]  # 90 bytes each at most (a record is never cut)
    assert [m for b in blocks for m in b] == batch
    big = [Message(0, b"x" * 500), Message(1, b"y")]
    assert [len(b) for b in kafka_reader._blocks(big)] == [1, 1]  # a record above the size is a block
