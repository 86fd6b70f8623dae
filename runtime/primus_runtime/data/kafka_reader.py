"""Reading one Kafka partition into framed blocks, for the executor's feeder.

Standard library at import time (the executor's rule); ``confluent_kafka`` is imported when an
executor is first handed a Kafka task. Each partition is read by its own consumer, ``assign``ed
by the AM's choice of offset (never subscribed: the AM assigns partitions, not the group), with
the fetch settings that keep librdkafka from capping the rate (``fetch.queue.backoff.ms=0``).

A block is what ``records.read_framed`` yields: framed records (a JSON document as one line,
raw and protobuf values length-prefixed) and the task's position after them, counted in
records. Kafka positions are offsets, which records do not map to one-to-one (compaction,
transaction markers, retention leave gaps): ``OffsetMap`` keeps where they part, so that a
count of records the trainer consumed becomes the next offset to read.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .site_packages import with_site_packages

log = logging.getLogger("primus.executor")


class _Repeats(logging.Filter):
    """librdkafka logs each failed reconnection (a broker down: several lines a second, for as long
    as it is down): the same message (its thread prefix aside) passes at most once a minute."""

    def __init__(self, every: float = 60.0):
        super().__init__()
        self.every = every
        self.seen: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        key = text.split("]: ", 1)[-1]
        now = time.monotonic()
        if now - self.seen.get(key, -self.every) < self.every:
            return False
        if len(self.seen) > 1000:
            self.seen.clear()
        self.seen[key] = now
        return True


# Where the Kafka clients (librdkafka) log, in the AM and in executors: repeats filtered out.
client_log = logging.getLogger("primus.kafka")
client_log.addFilter(_Repeats())

BATCH = 10_000  # messages per consume call
BLOCK_BYTES = 256 * 1024  # values per block fed (the granularity of positions, like a file's ranges)
POLL_SECONDS = 0.2  # how long one consume call may wait for messages (and for a stop to be seen)
_LENGTH = struct.Struct(">I")
# Defaults a source's consumer_config may change: keep up to 1M records per partition fetched
# ahead (still capped by librdkafka's queued.max.messages.kbytes, 64 MiB): measured on bench/kafka.py
# with 100 B records, ~25% less CPU per record than the default 100k and a higher rate.
DEFAULT_CONFIG = {"queued.min.messages": 1_000_000}
# What the executor's consumers need whatever the source's consumer_config says.
FIXED_CONFIG = {"enable.auto.commit": False, "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest", "fetch.queue.backoff.ms": 0, "enable.partition.eof": False}


class OffsetMap:
    """Record counts -> offsets and timestamps of one partition's stream, as read.

    ``breaks`` holds (count, offset) where the offsets stop following the counts one by one;
    ``times`` the timestamp of the last record of each block, by the count after it. Both are
    appended by the reader thread and read by the heartbeat thread (list appends are atomic)."""

    def __init__(self, count: int, offset: int):
        self.breaks_at = [count]
        self.breaks_to = [offset]
        self.times_at: list[int] = []
        self.times: list[int] = []
        self.lock = threading.Lock()

    def offset_at(self, count: int) -> int:
        """The next offset to read once ``count`` records (from the first assignment on) are consumed."""
        with self.lock:
            i = bisect.bisect_right(self.breaks_at, count) - 1
            if i < 0:
                return self.breaks_to[0]
            return self.breaks_to[i] + (count - self.breaks_at[i])

    def time_at(self, count: int) -> int:
        """The timestamp (ms) of the last record of the last block wholly consumed at ``count``; -1 if none."""
        with self.lock:
            i = bisect.bisect_right(self.times_at, count) - 1
            return self.times[i] if i >= 0 else -1

    def expect(self, count: int) -> int:
        return self.breaks_to[-1] + (count - self.breaks_at[-1])

    def gap(self, count: int, offset: int) -> None:
        with self.lock:
            self.breaks_at.append(count)
            self.breaks_to.append(offset)

    def block(self, count: int, timestamp: int) -> None:
        with self.lock:
            self.times_at.append(count)
            self.times.append(timestamp)

    def forget_before(self, count: int) -> None:
        """Drop what positions below ``count`` needed (they are confirmed and never asked for again)."""
        with self.lock:
            i = bisect.bisect_right(self.breaks_at, count) - 1
            if i > 0:
                del self.breaks_at[:i], self.breaks_to[:i]
            j = bisect.bisect_right(self.times_at, count) - 1
            if j > 0:
                del self.times_at[:j], self.times[:j]


def consumer_config(kafka: dict[str, Any]) -> dict[str, Any]:
    return {**DEFAULT_CONFIG, **kafka.get("config", {}), "bootstrap.servers": kafka["bootstrap"], "group.id": kafka["group"],
            **FIXED_CONFIG}


def read_partition(assignment: dict[str, Any], offsets: OffsetMap, stopped: Callable[[], bool],
                   lines: bool) -> Iterator[tuple[bytes, int]]:
    """Framed blocks of the partition's records from offset ``start`` (to ``end`` exclusive when >= 0,
    and before the first record at or after ``kafka.end_time`` ms), with the position (records counted
    from ``skip``) after each. Ends at the end, or when ``stopped()`` (a revoke, the feed stopping)."""
    with_site_packages()
    try:
        from confluent_kafka import Consumer, KafkaException, TopicPartition
    except ImportError:
        raise RuntimeError("a Kafka task needs confluent-kafka where the executor runs "
                           "(pip install 'airflow-provider-primus[kafka]' or confluent-kafka)") from None
    kafka = assignment["kafka"]
    start, end = int(assignment["start"]), int(assignment["end"])
    end_time = kafka.get("end_time")
    count = int(assignment.get("skip", 0))
    if 0 <= end <= start:
        return
    consumer = Consumer(consumer_config(kafka), logger=client_log)
    try:
        consumer.assign([TopicPartition(kafka["topic"], int(kafka["partition"]), start)])
        while not stopped():
            messages = consumer.consume(BATCH, POLL_SECONDS)
            if not messages:
                continue
            # The method itself mapped over the batch: no Python frame per message (a list
            # comprehension here cost ~15% of the reader's time at 1M records/s).
            if any(map(type(messages[0]).error, messages)):
                failed = [e for m in messages if (e := m.error()) is not None]
                if any(e.fatal() or not e.retriable() for e in failed):
                    raise KafkaException(failed[0])
                messages = [m for m in messages if m.error() is None]
                if not messages:
                    continue
            messages, finished = _until_end(messages, end, end_time)
            for part in _blocks(messages):
                count = _note_offsets(part, offsets, count)
                block = _frame(part, lines)
                offsets.block(count, part[-1].timestamp()[1])
                yield block, count
            if finished:
                return
    finally:
        consumer.close()


def _blocks(messages: list[Any]) -> list[list[Any]]:
    """The batch cut into runs of about ``BLOCK_BYTES`` of values: positions (and the watermark) move
    by blocks, so a batch of 10,000 records must not be one (a slow trainer would show no progress
    for long, and a crash would feed a whole batch again)."""
    if not messages:
        return []
    ends = list(itertools.accumulate(map(len, messages)))  # Message.__len__: its value's length
    if ends[-1] <= BLOCK_BYTES:
        return [messages]
    cuts, start = [], 0
    while start < len(messages):
        base = ends[start - 1] if start else 0
        stop = max(start + 1, bisect.bisect_right(ends, base + BLOCK_BYTES, lo=start))
        cuts.append(messages[start:stop])
        start = stop
    return cuts


def _until_end(messages: list[Any], end: int, end_time: int | None) -> tuple[list[Any], bool]:
    """The messages before the task's end, and whether the end was reached."""
    finished = 0 <= end <= messages[-1].offset() + 1
    if 0 <= end <= messages[-1].offset():
        messages = [m for m in messages if m.offset() < end]
    if end_time is not None:
        for i, message in enumerate(messages):
            if message.timestamp()[1] >= end_time:
                return messages[:i], True
    return messages, finished


def _note_offsets(messages: list[Any], offsets: OffsetMap, count: int) -> int:
    """Record where the batch's offsets leave the counts (checked per batch; per message only when
    the batch holds a gap); the count after the batch."""
    first, last = messages[0].offset(), messages[-1].offset()
    if first == offsets.expect(count) and last - first == len(messages) - 1:
        return count + len(messages)
    for message in messages:
        if message.offset() != offsets.expect(count):
            offsets.gap(count, message.offset())
        count += 1
    return count


def _frame(messages: list[Any], lines: bool) -> bytes:
    """JSON documents one per line (a JSON text holds no raw newline except as whitespace, so
    a document spread over lines is joined into one without changing it); others length-prefixed."""
    values = list(map(type(messages[0]).value, messages))  # no Python frame per message
    try:
        return _frame_values(values, lines)
    except TypeError:  # a tombstone (value None) among them: fed as an empty record
        return _frame_values([v or b"" for v in values], lines)


def _frame_values(values: list[bytes], lines: bool) -> bytes:
    if lines:
        block = b"\n".join(values) + b"\n"
        if block.count(b"\n") != len(values):
            block = b"\n".join(v.replace(b"\r\n", b" ").replace(b"\n", b" ") for v in values) + b"\n"
        return block
    pack = _LENGTH.pack
    return b"".join([part for v in values for part in (pack(len(v)), v)])
