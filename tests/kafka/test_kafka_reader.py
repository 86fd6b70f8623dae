"""data/kafka_reader.read_partition against a real broker: how values are framed for the feed."""

from __future__ import annotations

import struct
from typing import Any

from kafka.conftest import Record, create_topic, produce, unique_topic
from primus_runtime.data.kafka_reader import OffsetMap, read_partition


def assignment(bootstrap: str, topic: str, end: int) -> dict[str, Any]:
    return {"task_id": f"kafka/{topic}/0", "start": 0, "end": end, "skip": 0,
            "kafka": {"bootstrap": bootstrap, "topic": topic, "partition": 0, "group": unique_topic("group"),
                      "end_time": None, "config": {}}}


def read_all(bootstrap: str, topic: str, end: int, lines: bool) -> tuple[bytes, int]:
    blocks = list(read_partition(assignment(bootstrap, topic, end), OffsetMap(0, 0), lambda: False, lines))
    return b"".join(block for block, _ in blocks), blocks[-1][1]


def test_tombstones_are_empty_records_and_newlines_inside_a_document_are_spaces(kafka_broker):
    bootstrap, topic = kafka_broker.bootstrap, unique_topic()
    create_topic(bootstrap, topic, 1)
    values: list[bytes | None] = [b'{"id": 1}', None, b'{"id":\n 3}', b'{"id": 4}']
    produce(bootstrap, topic, [Record(None, v, 0) for v in values])
    assert read_all(bootstrap, topic, len(values), lines=True) == (b'{"id": 1}\n\n{"id":  3}\n{"id": 4}\n', 4)
    framed, count = read_all(bootstrap, topic, len(values), lines=False)
    assert count == 4
    assert framed == b"".join(struct.pack(">I", len(v or b"")) + (v or b"") for v in values)
