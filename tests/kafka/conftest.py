"""A real Kafka broker (scripts/kafka.sh: Apache Kafka 4.4, KRaft, one JVM on loopback) and helpers.

If PRIMUS_KAFKA_BOOTSTRAP is set (scripts/test.sh starts a broker before pytest), the tests use that
broker and leave it running. Otherwise the session starts its own in a fresh directory (Java 17 and
the jars of `scripts/kafka.sh build` needed) and stops it at the end; the directory (kafka.log) is
kept when a test failed.

Tests elsewhere import what they need: ``from kafka.conftest import kafka_broker, create_topic``.
Every test makes its own topics (``unique_topic``): the session broker is shared.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from conftest import make_spec, wait_for

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka (pip extra 'kafka') is missing")
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "kafka.sh"
# librdkafka logs every refused connection to stderr otherwise.
QUIET = {"log_level": 0}


@dataclass(frozen=True)
class KafkaBroker:
    bootstrap: str
    dir: Path | None  # None: a broker this session did not start (only its address is known)


class Record(NamedTuple):
    """One record to produce; partition None: the producer's partitioner picks (by key)."""

    key: bytes | None
    value: bytes
    partition: int | None = None
    timestamp_ms: int | None = None


class Consumed(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None  # None: a tombstone
    timestamp_ms: int


def start_broker(directory: Path) -> KafkaBroker:
    """scripts/kafka.sh start DIR: a broker in DIR (formatted on first use), once it is ready."""
    out = subprocess.run([str(SCRIPT), "start", str(directory)], capture_output=True, text=True)
    assert out.returncode == 0, f"scripts/kafka.sh start {directory} failed:\n{out.stderr}"
    return KafkaBroker(out.stdout.strip().splitlines()[-1], directory)


def stop_broker(directory: Path) -> None:
    subprocess.run([str(SCRIPT), "stop", str(directory)], check=False, capture_output=True)


def broker_status(directory: Path) -> int:
    """scripts/kafka.sh status DIR's exit code: 0 when the broker answers."""
    return subprocess.run([str(SCRIPT), "status", str(directory)], capture_output=True).returncode


def _why_not_startable() -> str | None:
    if shutil.which("java") is None:
        return "the Kafka broker needs java (Java 17+)"
    built = subprocess.run([str(SCRIPT), "build"], capture_output=True, text=True)
    if built.returncode != 0:
        return f"the Kafka jars are not built and cannot be fetched (scripts/kafka.sh build): {built.stderr.strip()[-300:]}"
    return None


@pytest.fixture(scope="session")
def kafka_broker(request: pytest.FixtureRequest) -> Iterator[KafkaBroker]:
    given = os.environ.get("PRIMUS_KAFKA_BOOTSTRAP")
    if given:
        given_dir = os.environ.get("PRIMUS_KAFKA_DIR")
        broker = KafkaBroker(given, Path(given_dir) if given_dir else None)
        assert topic_partitions(broker.bootstrap, timeout=10) is not None, \
            f"PRIMUS_KAFKA_BOOTSTRAP={given}: no broker answers there"
        yield broker
        return
    reason = _why_not_startable()
    if reason:
        pytest.skip(reason)
    directory = Path(tempfile.mkdtemp(prefix="primus-kafka-"))
    started = False
    try:
        broker = start_broker(directory)
        started = True
        yield broker
    finally:
        stop_broker(directory)
        if not started or request.session.testsfailed:
            print(f"\nkafka: kept {directory} (kafka.log)")
        else:
            shutil.rmtree(directory, ignore_errors=True)


def unique_topic(prefix: str = "t") -> str:
    """A topic name no other test (nor an earlier session on the same broker) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **QUIET})


def topic_partitions(bootstrap: str, topic: str | None = None, timeout: float = 5) -> dict[str, dict[int, int]] | None:
    """{topic: {partition: leader}} from the broker's metadata (of one topic, or all), None when the
    broker does not answer in time. A partition without a leader has leader -1."""
    try:
        metadata = admin(bootstrap).list_topics(topic, timeout=timeout)
    except KafkaException:
        return None
    return {name: {p.id: p.leader for p in t.partitions.values()}
            for name, t in metadata.topics.items() if t.error is None}


def _wait_for_leaders(bootstrap: str, topic: str, partitions: int, timeout: float) -> None:
    def all_led() -> bool:
        leaders = (topic_partitions(bootstrap, topic) or {}).get(topic, {})
        return len(leaders) == partitions and all(leader >= 0 for leader in leaders.values())

    wait_for(all_led, timeout=timeout, what=f"{partitions} partitions of topic {topic} with leaders")


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None,
                 timeout: float = 30) -> None:
    """Create the topic (replication factor 1) and wait until the metadata shows every partition
    with a leader: producers and consumers made after this find them all."""
    client = admin(bootstrap)  # referenced until the answer: a collected client fails its futures
    futures = client.create_topics([NewTopic(name, partitions, 1, config=config or {})], operation_timeout=timeout)
    futures[name].result(timeout=timeout)
    _wait_for_leaders(bootstrap, name, partitions, timeout)


def add_partitions(bootstrap: str, name: str, total: int, timeout: float = 30) -> None:
    """Grow the topic to ``total`` partitions and wait until all have leaders."""
    client = admin(bootstrap)
    futures = client.create_partitions([NewPartitions(name, total)], operation_timeout=timeout)
    futures[name].result(timeout=timeout)
    _wait_for_leaders(bootstrap, name, total, timeout)


def produce(bootstrap: str, topic: str, records: Iterable[Record | tuple[bytes | None, bytes, int | None, int | None]],
            timeout: float = 60, **config: Any) -> Counter[int]:
    """Produce every record (key, value, partition or None, timestamp in ms or None), flush, and
    return how many landed in each partition. Raises on the first delivery error, after the flush,
    naming the record's partition and the error; ``config`` adds producer settings."""
    errors: list[str] = []
    delivered: Counter[int] = Counter()

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        partition = msg.partition()
        if err is not None:
            errors.append(f"partition {partition}: {err}")
        else:
            assert partition is not None, "a delivered record has a partition"
            delivered[partition] += 1

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": int(timeout * 1000), **QUIET, **config})
    for key, value, partition, timestamp_ms in records:
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
    left = producer.flush(timeout)
    if errors:
        raise KafkaException(f"{len(errors)} record(s) to {topic} not delivered, first: {errors[0]}")
    if left:
        raise KafkaException(f"{left} record(s) to {topic} not delivered within {timeout}s")
    return delivered


def make_consumer(bootstrap: str, group_id: str | None = None, **config: Any) -> Consumer:
    """A consumer for tests: no auto-commit, from the earliest offset, and no 1 s back-off between
    fetches (librdkafka's default fetch.queue.backoff.ms caps reading at ~150k records/s).
    librdkafka wants a group.id even for assign()."""
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group_id or unique_topic("group"),
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "fetch.queue.backoff.ms": 0, **QUIET, **config})


def _consumed(msg: Message) -> Consumed:
    error = msg.error()
    if error is not None:
        raise KafkaException(error)
    partition, offset = msg.partition(), msg.offset()
    assert partition is not None and offset is not None, "a consumed record has a partition and an offset"
    return Consumed(partition, offset, msg.key(), msg.value(), msg.timestamp()[1])


def read_topic(bootstrap: str, topic: str, timeout: float = 60) -> list[Consumed]:
    """Every record the topic holds now, read with assign() from each partition's start up to its
    high watermark at the call; in partition, then offset order."""
    consumer = make_consumer(bootstrap)
    try:
        partitions = sorted((topic_partitions(bootstrap, topic) or {}).get(topic, {}))
        assert partitions, f"topic {topic} not found"
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in partitions])
        records: list[Consumed] = []

        def read_batch() -> bool:
            for record in map(_consumed, consumer.consume(10000, timeout=0.5)):
                if record.offset < ends[record.partition]:
                    records.append(record)
            # Positions, not the last offsets seen: they also move past offsets that carry no
            # record for the application (transaction markers).
            positions = consumer.position([TopicPartition(topic, p) for p in partitions])
            return all(ends[tp.partition] == 0 or tp.offset >= ends[tp.partition] for tp in positions)

        wait_for(read_batch, timeout=timeout, poll=0, what=f"all records of {topic} up to {ends}")
    finally:
        consumer.close()
    return sorted(records, key=lambda r: (r.partition, r.offset))





STALL_BASE_MS = 1_796_083_200_000  # 2026-12-01T00:00:00Z: record i of a stalled job's topic is i seconds later
STALL_FIRST, STALL_SECOND = 400, 500  # records per partition of the two waves
STALL_READ = 500  # the trainers stop at their 500th record (in the second wave)
STALL_LAG = STALL_FIRST + STALL_SECOND - (STALL_READ - 1)  # a partition's steady lag (the record in hand counts)


def submit_stalled_job(client: Any, bootstrap: str, out: Path, partitions: int = 3) -> tuple[str, str]:
    """A running Kafka job whose lag stays put, so every view of it (status, metrics, page, CLI) can
    be compared at leisure: a worker per partition, whose trainer stops for an hour at its
    ``STALL_READ``-th record. A first wave is read completely (so each partition has an event time:
    that of the last block read whole), then a second is produced, in which the trainers stop; the
    rest of it waits in the pipes. Record i of the topic has event time 2026-12-01 + i seconds.
    Returns (app id, topic) once every partition's offset and lag (``STALL_LAG``) are steady."""
    topic = unique_topic("stalled")
    create_topic(bootstrap, topic, partitions)

    def wave(first: int, per_partition: int) -> None:
        produce(bootstrap, topic, [Record(None, json.dumps({"id": f"s{i}"}).encode(), i % partitions,
                                          STALL_BASE_MS + i * 1000)
                                   for i in range(first * partitions, (first + per_partition) * partitions)])

    wave(0, STALL_FIRST)
    source = {"bootstrap_servers": bootstrap, "topics": [topic], "start": "earliest"}
    spec = make_spec([{"name": "worker", "replicas": partitions, "consumes_input": True,
                       "command": [sys.executable, str(REPO / "tests" / "data" / "consumer.py")],
                       "env": {"OUT_DIR": str(out), "SLEEP_EVERY": str(STALL_READ), "SLEEP": "3600"}}],
                     input={"kafka": source, "poll_interval": 0.5})
    app = client.submit(spec)

    def offsets_and_lags() -> list[tuple[int | None, int | None]]:
        data = client.status(app).data
        kafka = data.kafka if data is not None else None
        return [(p.offset, p.lag) for p in kafka.partitions] if kafka is not None else []

    try:
        wait_for(lambda: offsets_and_lags() == [(STALL_FIRST, 0)] * partitions, 60, "the first wave read")
        wave(STALL_FIRST, STALL_SECOND)
        # The trainer holds its STALL_READ-th record: the ones before it are done.
        wait_for(lambda: offsets_and_lags() == [(STALL_READ - 1, STALL_LAG)] * partitions, 60,
                 "the trainers stopped in the second wave, its lag read")
    except BaseException:
        client.cluster("local").force_kill(app)  # a fixture that fails here never reaches its teardown
        raise
    return app, topic
