"""The AM's side of a Kafka source: partitions as tasks, their offsets, lag and watermark.

Every partition of the source's topics is one task (``NAME/TOPIC/PARTITION``), listed once the
file sources are (files first, then Kafka), and checked for new partitions every
``poll_interval`` while the stream is unbounded. A task's position is its next offset, kept by
the dispatcher (``Task.offset``) and journaled like a file task's: a resubmitted job resumes from
it, whatever ``start`` says. The first offset of a partition comes from ``start``: the group's
committed offset (earliest where it has none), earliest, latest, or the first record at or after
a time (``offsets_for_times``). ``end`` bounds it: the partitions' ends when listed (latest), a
time (the executor stops before the first record at or after it), or offsets.

Every ``LAG_SECONDS`` the AM reads the partitions' ends (high watermarks) for the lag, and
commits the tasks' offsets to the group (visibility for Kafka tools, and ``start: committed``).
The event-time watermark is the earliest last-delivered timestamp over the partitions that
still lag (a caught-up partition holds nothing back).

librdkafka never raises for a broker that is down (consumers return nothing, admin calls wait for
their timeout), so reachability is checked first with a TCP connect, retried up to
``connect_timeout``: an unreachable cluster at start fails the job naming the brokers; one lost
while running is an event (and the status says since when) while the clients reconnect.

``confluent_kafka`` is imported when a job has a Kafka source; every call that waits on the
network runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import socket
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..spec import KAFKA_START_MODES, InputSpec, KafkaSource, kafka_time
from ..spec_types import mask_secrets
from .dispatcher import Dispatcher, Task, TaskState
from .kafka_reader import client_log

log = logging.getLogger("primus.data")

LAG_SECONDS = 2.0  # how often the partitions' ends are read and offsets committed
CALL_TIMEOUT = 10.0  # seconds one metadata or offsets call may take
RATE_WINDOW_SECONDS = 30.0


class KafkaUnreachable(OSError):
    pass


@dataclass(slots=True)
class PartitionEnd:
    high: int = -1  # the partition's end (next offset to be written), as last read
    low: int = -1


def task_id(source: KafkaSource, topic: str, partition: int) -> str:
    return f"{source.name}/{topic}/{partition}"


def topic_partition(task: Task) -> tuple[str, int]:
    """The (topic, partition) a Kafka task stands for (its URL is ``kafka://TOPIC/PARTITION``)."""
    topic, partition = task.url[len("kafka://"):].rsplit("/", 1)
    return topic, int(partition)


def _millis(when: dt.datetime) -> int:
    return int(when.timestamp() * 1000)


class KafkaInput:
    def __init__(self, spec: InputSpec, dispatcher: Dispatcher, job_name: str):
        assert spec.kafka is not None
        self.spec = spec
        self.source = spec.kafka
        self.dispatcher = dispatcher
        self.group = self.source.group_id or f"primus-{job_name}"
        self.start_mode = spec.kafka_start()
        self.ends: dict[tuple[str, int], PartitionEnd] = {}
        self.tasks: dict[tuple[str, int], Task] = {}
        self.unreachable_since: float | None = None  # wall time the brokers stopped answering
        self.listed_at: float | None = None  # wall time of the last partition ends read
        self._committed: dict[tuple[str, int], int] = {}
        self._rate: deque[tuple[float, int]] = deque()
        self._admin: Any = None
        self._consumer: Any = None

    # --- the clients ---

    def _config(self) -> dict[str, Any]:
        return {**self.source.consumer_config, "bootstrap.servers": self.source.bootstrap_servers}

    def _clients(self) -> tuple[Any, Any]:
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient({**self._config(), "logger": client_log})  # type: ignore[dict-item]
            self._consumer = Consumer({**self._config(), "group.id": self.group, "enable.auto.commit": False,
                                       "logger": client_log})
        return self._admin, self._consumer

    def finish(self) -> None:
        """The job ended: its last offsets go to the group."""
        if self._consumer is None:
            return
        try:
            self.commit()
        except Exception as exc:  # noqa: BLE001 - the offsets are journaled; the group's copy is for visibility
            log.warning("kafka source %s: cannot commit the last offsets to group %s: %s", self.source.name,
                        self.group, exc)

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # noqa: BLE001 - closing at the AM's end must not fail it
                log.debug("closing the Kafka consumer failed", exc_info=True)
            self._consumer = None
            self._admin = None

    def assignment(self, task: Task) -> dict[str, Any]:
        """What an executor needs to read ``task`` besides offsets (its ``kafka`` key)."""
        topic, partition = topic_partition(task)
        end_time = None
        if isinstance(self.source.end, str) and self.source.end != "latest":
            end_time = _millis(kafka_time(self.source.end))
        return {"bootstrap": self.source.bootstrap_servers, "topic": topic, "partition": partition,
                "group": self.group, "end_time": end_time, "config": dict(self.source.consumer_config)}

    # --- the background loop ---

    async def run(self) -> None:
        """List the partitions (failing the job if the brokers cannot be reached), then keep the lag,
        the group's offsets and (unbounded) the partition list current until cancelled."""
        try:
            await asyncio.to_thread(self._wait_reachable, self.source.connect_timeout)
            partitions = await asyncio.to_thread(self._list_partitions)
            tasks = await asyncio.to_thread(self._new_tasks, partitions, True)
            self._keep(tasks)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the source cannot be read: the job fails saying why
            log.exception("kafka source %s", self.source.name)
            self.dispatcher.scan_failed(f"kafka source {self.source.name}: {exc}")
            return
        added = self.dispatcher.add_partition("", tasks)
        log.info("kafka source %s: %d partition(s) of %s, %d new", self.source.name, len(tasks),
                 ", ".join(self.source.topics), added)
        if self.source.bounded:
            if not any(t.state is not TaskState.DONE for t in tasks) and not self.spec.sources:
                self.dispatcher.fail(f"kafka source {self.source.name}: nothing to read between start "
                                     f"({self.start_mode}) and end ({self.source.end}) in any partition")
                return
            self.dispatcher.scan_finished()
        listed = time.monotonic()
        while True:
            await asyncio.sleep(LAG_SECONDS)
            try:
                await asyncio.to_thread(self._measure)
                if not self.source.bounded and time.monotonic() - listed >= self.spec.poll_interval:
                    listed = time.monotonic()
                    known = set(self.tasks)
                    fresh = [p for p in await asyncio.to_thread(self._list_partitions) if p not in known]
                    if fresh:
                        new = await asyncio.to_thread(self._new_tasks, fresh, False)
                        self._keep(new)
                        self.dispatcher.add_partition("", new)
                        self.dispatcher.events.data_event(
                            "data", None, "partitions",
                            f"kafka source {self.source.name}: {len(new)} new partition(s): "
                            + ", ".join(f"{t}/{p}" for t, p in fresh[:10]))
                self._reachable_again()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the brokers may come back: say so, keep going
                self._unreachable(exc)

    def _reachable_again(self) -> None:
        if self.unreachable_since is not None:
            self.dispatcher.events.data_event("data", "unreachable", "reachable",
                                              f"kafka source {self.source.name}: the brokers answer again")
            self.unreachable_since = None

    def _unreachable(self, exc: BaseException) -> None:
        # Fresh clients for the next try: librdkafka's admin client may keep metadata that names no
        # partition leader after the brokers restarted, and fail every later call.
        self.close()
        if self.unreachable_since is None:
            self.unreachable_since = time.time()
            self.dispatcher.events.data_event(
                "data", None, "unreachable",
                f"kafka source {self.source.name}: brokers {self.source.bootstrap_servers} do not answer "
                f"({type(exc).__name__}: {exc}); lag and offsets are not updated until they do")

    # --- worker-thread calls ---

    def _wait_reachable(self, timeout: float) -> None:
        """Return once a bootstrap broker accepts a TCP connection; KafkaUnreachable after ``timeout``."""
        deadline = time.monotonic() + timeout
        servers = [s.strip() for s in self.source.bootstrap_servers.split(",")]
        last: OSError | None = None
        while True:
            for server in servers:
                host, _, port = server.rpartition(":")
                try:
                    with socket.create_connection((host.strip("[]"), int(port)), timeout=min(5.0, timeout)):
                        return
                except OSError as exc:
                    last = exc
            if time.monotonic() >= deadline:
                raise KafkaUnreachable(f"cannot reach the brokers {self.source.bootstrap_servers} "
                                       f"(kafka.bootstrap_servers) within {timeout:g} s "
                                       f"(kafka.connect_timeout): {type(last).__name__}: {last}")
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    def _list_partitions(self) -> list[tuple[str, int]]:
        from confluent_kafka import KafkaException

        admin, _ = self._clients()
        try:
            metadata = admin.list_topics(timeout=CALL_TIMEOUT)
        except KafkaException as exc:
            raise KafkaUnreachable(f"the brokers {self.source.bootstrap_servers} do not answer metadata "
                                   f"requests: {exc}") from None
        partitions = []
        for topic in self.source.topics:
            found = metadata.topics.get(topic)
            if found is None or found.error is not None:
                known = sorted(t for t in metadata.topics if not t.startswith("__"))
                raise LookupError(f"kafka.topics: topic {topic!r} does not exist on {self.source.bootstrap_servers} "
                                  f"(topics there: {', '.join(known[:20]) or 'none'})")
            partitions += [(topic, p) for p in sorted(found.partitions)]
        return partitions

    def _new_tasks(self, partitions: list[tuple[str, int]], first: bool) -> list[Task]:
        """Tasks of partitions seen for the first time, at their start offset (a partition that appeared
        while the job runs is read from its beginning: all its records are new). Run in a worker thread:
        it reads ``self.tasks`` and changes nothing the event loop iterates."""
        _, consumer = self._clients()
        self._read_ends(partitions)
        starts = self._start_offsets(partitions, consumer) if first else \
            {p: self.ends[p].low for p in partitions}
        ends = self._end_offsets(partitions, consumer)
        tasks = []
        for tp in partitions:
            topic, partition = tp
            start, end = max(starts[tp], 0), ends[tp]
            task = Task(task_id(self.source, topic, partition), "", self.source.name, f"kafka://{topic}/{partition}",
                        self.source.format, "none", start, end, 0, offset=start)
            if 0 <= end <= start:
                task.state = TaskState.DONE  # nothing to read there (an empty range)
            tasks.append(task)
        return tasks

    def _keep(self, tasks: list[Task]) -> None:
        """Known from now on. Done on the event loop, never in the worker thread that made them: the
        status and the metrics iterate ``self.tasks`` there."""
        for task in tasks:
            self.tasks[topic_partition(task)] = task

    def _read_ends(self, partitions: list[tuple[str, int]]) -> None:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        admin, _ = self._clients()
        for spec, name in ((OffsetSpec.latest(), "high"), (OffsetSpec.earliest(), "low")):
            futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions},
                                         request_timeout=CALL_TIMEOUT)
            for tp, future in futures.items():
                setattr(self.ends.setdefault((tp.topic, tp.partition), PartitionEnd()), name,
                        future.result(timeout=CALL_TIMEOUT).offset)
        self.listed_at = time.time()

    def _start_offsets(self, partitions: list[tuple[str, int]], consumer: Any) -> dict[tuple[str, int], int]:
        from confluent_kafka import TopicPartition

        mode = self.start_mode
        if mode == "earliest":
            return {p: self.ends[p].low for p in partitions}
        if mode == "latest":
            return {p: self.ends[p].high for p in partitions}
        if mode == "committed":
            found = consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=CALL_TIMEOUT)
            return {(tp.topic, tp.partition): tp.offset if tp.offset >= 0 else self.ends[(tp.topic, tp.partition)].low
                    for tp in found}
        assert mode not in KAFKA_START_MODES
        return self._offsets_at(partitions, consumer, _millis(kafka_time(mode)))

    def _offsets_at(self, partitions: list[tuple[str, int]], consumer: Any, millis: int) -> dict[tuple[str, int], int]:
        """The first offset of a record at or after ``millis`` per partition; the end where none is yet."""
        from confluent_kafka import TopicPartition

        found = consumer.offsets_for_times([TopicPartition(t, p, millis) for t, p in partitions], timeout=CALL_TIMEOUT)
        return {(tp.topic, tp.partition): tp.offset if tp.offset >= 0 else self.ends[(tp.topic, tp.partition)].high
                for tp in found}

    def _end_offsets(self, partitions: list[tuple[str, int]], consumer: Any) -> dict[tuple[str, int], int]:
        end = self.source.end
        if end is None:
            return dict.fromkeys(partitions, -1)
        if end == "latest":
            return {p: self.ends[p].high for p in partitions}
        if isinstance(end, dict):  # partitions not named are not read
            return {(t, p): int(end.get(t, {}).get(p, 0)) for t, p in partitions}
        # A time: where it is known now; otherwise the executor stops at the first record at or after it.
        from confluent_kafka import TopicPartition

        millis = _millis(kafka_time(end))
        found = consumer.offsets_for_times([TopicPartition(t, p, millis) for t, p in partitions], timeout=CALL_TIMEOUT)
        return {(tp.topic, tp.partition): tp.offset if tp.offset >= 0 else -1 for tp in found}

    def _measure(self) -> None:
        """The partitions' ends (lag), and the tasks' offsets committed to the group where they moved."""
        self._read_ends(list(self.tasks))
        self.commit()

    def commit(self) -> None:
        """Commit the tasks' offsets that moved to the group (also at the end, so a short job's are)."""
        from confluent_kafka import TopicPartition

        moved = [TopicPartition(t, p, task.offset) for (t, p), task in self.tasks.items()
                 if task.offset >= 0 and self._committed.get((t, p)) != task.offset]
        if moved:
            _, consumer = self._clients()
            consumer.commit(offsets=moved, asynchronous=False)
            self._committed.update(((tp.topic, tp.partition), tp.offset) for tp in moved)

    # --- views ---

    def lag(self, tp: tuple[str, int]) -> int | None:
        task, end = self.tasks[tp], self.ends.get(tp)
        if task.state.resolved:
            return 0
        if end is None or end.high < 0:
            return None
        last = end.high if task.end < 0 else min(end.high, task.end)
        return max(0, last - task.offset)

    def records_rate(self) -> float:
        """Records per second delivered from Kafka over the last ``RATE_WINDOW_SECONDS``."""
        now = time.monotonic()
        records = sum(t.records for t in self.tasks.values())
        if not self._rate or now - self._rate[-1][0] >= 0.5:
            self._rate.append((now, records))
        while len(self._rate) > 2 and now - self._rate[0][0] > RATE_WINDOW_SECONDS:
            self._rate.popleft()
        (t0, r0), (t1, r1) = self._rate[0], self._rate[-1]
        return (r1 - r0) / (t1 - t0) if t1 > t0 else 0.0

    def total_lag(self) -> int | None:
        lags = [self.lag(tp) for tp in self.tasks]
        return None if not lags or any(lag is None for lag in lags) else sum(lag for lag in lags if lag is not None)

    def watermark(self) -> str | None:
        """The event time up to which every partition is read: the earliest last-delivered timestamp
        of the partitions that still lag (caught-up ones hold nothing back; up to the last lag reading
        when none lags). None until each lagging partition delivered a record."""
        if not self.tasks or self.listed_at is None:
            return None
        times = []
        for tp, task in self.tasks.items():
            lag = self.lag(tp)
            if lag is None:
                return None
            if lag > 0:
                if task.event_time < 0:
                    return None
                times.append(task.event_time / 1000)
        when = min(times) if times else self.listed_at
        return dt.datetime.fromtimestamp(when, dt.timezone.utc).isoformat(timespec="milliseconds")

    def status(self) -> dict[str, Any]:
        rate = self.records_rate()
        lag = self.total_lag()
        partitions = []
        for (topic, partition), task in self.tasks.items():
            end = self.ends.get((topic, partition), PartitionEnd())
            partitions.append({
                "topic": topic, "partition": partition, "task": task.id, "state": task.state.value,
                "holder": task.holder, "offset": task.offset, "end": task.end if task.end >= 0 else None,
                "high": end.high if end.high >= 0 else None, "lag": self.lag((topic, partition)),
                "records": task.records,
                "time": (dt.datetime.fromtimestamp(task.event_time / 1000, dt.timezone.utc)
                         .isoformat(timespec="milliseconds") if task.event_time >= 0 else None)})
        progress = None
        if self.source.bounded and partitions and all(p["end"] is not None or p["state"] == "done"
                                                       for p in partitions):
            total = sum(max(0, t.end - t.start) for t in self.tasks.values())
            done = sum(max(0, min(t.offset, t.end) - t.start) if not t.state.resolved else max(0, t.end - t.start)
                       for t in self.tasks.values())
            progress = round(done / total, 6) if total else 1.0
        return {
            "source": self.source.name,
            "bootstrap_servers": self.source.bootstrap_servers,
            "topics": list(self.source.topics),
            "group": self.group,
            "start": self.start_mode,
            "end": self.source.end,
            "consumer_config": mask_secrets(dict(self.source.consumer_config)),
            "reachable": self.unreachable_since is None,
            "unreachable_since": (dt.datetime.fromtimestamp(self.unreachable_since, dt.timezone.utc).isoformat()
                                  if self.unreachable_since is not None else None),
            "lag": lag,
            "records_per_s": round(rate, 1),
            "eta_seconds": round(lag / rate, 1) if lag is not None and rate > 0 else (0.0 if lag == 0 else None),
            "watermark": self.watermark(),
            "progress": progress,
            "partitions": partitions,
        }
