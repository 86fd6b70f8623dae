"""The test broker (scripts/kafka.sh) and the helpers other Kafka tests build on, against a real broker."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, TopicPartition

from kafka.conftest import (
    KafkaBroker,
    Record,
    add_partitions,
    admin,
    broker_status,
    create_topic,
    make_consumer,
    produce,
    read_topic,
    start_broker,
    stop_broker,
    topic_partitions,
    unique_topic,
)


def test_the_broker_answers_at_its_address(kafka_broker: KafkaBroker) -> None:
    brokers = admin(kafka_broker.bootstrap).list_topics(timeout=10).brokers
    assert [f"{b.host}:{b.port}" for b in brokers.values()] == [kafka_broker.bootstrap]
    if kafka_broker.dir is not None:
        assert broker_status(kafka_broker.dir) == 0
        assert json.loads((kafka_broker.dir / "ready.json").read_text())["bootstrap"] == kafka_broker.bootstrap


def test_10000_keyed_records_come_back_per_partition(kafka_broker: KafkaBroker) -> None:
    topic = unique_topic("keyed")
    create_topic(kafka_broker.bootstrap, topic, partitions=4)
    records = [Record(f"key-{i % 97}".encode(), f"value-{i}".encode()) for i in range(10_000)]

    delivered = produce(kafka_broker.bootstrap, topic, records)
    read = read_topic(kafka_broker.bootstrap, topic)

    assert sum(delivered.values()) == 10_000 and sorted(delivered) == [0, 1, 2, 3]
    assert Counter(r.partition for r in read) == delivered
    assert Counter(r.value for r in read) == Counter(r.value for r in records)
    partitions_of_key: dict[bytes | None, set[int]] = defaultdict(set)
    values_of_key: dict[bytes | None, list[bytes | None]] = defaultdict(list)
    for r in read:  # partition, then offset order
        partitions_of_key[r.key].add(r.partition)
        values_of_key[r.key].append(r.value)
    assert all(len(p) == 1 for p in partitions_of_key.values()), "a key's records span partitions"
    for key, values in values_of_key.items():  # one partition per key: in the order produced
        assert values == [r.value for r in records if r.key == key]


def test_added_partitions_take_records_with_their_timestamps(kafka_broker: KafkaBroker) -> None:
    topic = unique_topic("grow")
    create_topic(kafka_broker.bootstrap, topic, partitions=2)
    add_partitions(kafka_broker.bootstrap, topic, total=4)
    assert sorted(topic_partitions(kafka_broker.bootstrap, topic)[topic]) == [0, 1, 2, 3]  # type: ignore[index]

    base = 1_764_806_400_000  # 2025-12-04T00:00:00Z
    produce(kafka_broker.bootstrap, topic, [Record(None, b"late", 3, base + 1000), Record(b"k", b"early", 2, base)])

    read = read_topic(kafka_broker.bootstrap, topic)
    assert [(r.partition, r.offset, r.key, r.value, r.timestamp_ms) for r in read] == [
        (2, 0, b"k", b"early", base), (3, 0, None, b"late", base + 1000)]


def test_a_record_that_cannot_be_delivered_raises(kafka_broker: KafkaBroker) -> None:
    topic = unique_topic("small")
    create_topic(kafka_broker.bootstrap, topic, partitions=2)
    with pytest.raises(KafkaException, match="partition|Partition"):
        produce(kafka_broker.bootstrap, topic, [Record(b"k", b"v", 0), Record(b"k", b"v", 7)])


def test_a_restart_on_the_same_dir_keeps_records_and_committed_offsets(tmp_path: Path) -> None:
    # Its own broker: the session's must not restart under other tests.
    directory = tmp_path / "kafka"
    try:
        before = start_broker(directory)
        topic = unique_topic("durable")
        create_topic(before.bootstrap, topic, partitions=2)
        produce(before.bootstrap, topic, [Record(f"k{i}".encode(), f"v{i}".encode(), i % 2, None) for i in range(1000)])
        written = read_topic(before.bootstrap, topic)
        committed = [TopicPartition(topic, 0, 300), TopicPartition(topic, 1, 200)]
        consumer = make_consumer(before.bootstrap, "restart-group")
        consumer.commit(offsets=committed, asynchronous=False)
        consumer.close()

        stop_broker(directory)
        assert broker_status(directory) != 0
        assert (directory / "data" / ".kafka_cleanshutdown").exists(), "SIGTERM did not shut Kafka down cleanly"
        stop_broker(directory)  # stopping a stopped broker is fine

        after = start_broker(directory)
        assert after.bootstrap == before.bootstrap  # same ports: clients keep their address
        assert broker_status(directory) == 0
        assert read_topic(after.bootstrap, topic) == written
        consumer = make_consumer(after.bootstrap, "restart-group")
        try:
            offsets = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
        finally:
            consumer.close()
        assert [(tp.partition, tp.offset) for tp in offsets] == [(0, 300), (1, 200)]
    finally:
        stop_broker(directory)
