"""The AM's Prometheus metrics, served at ``/metrics`` (behind the job token, as the API).

What the status API also shows (executors per role and state, restarts, failures, the job's and
the input's state) is read from the AM's state when scraped, not kept in counters of its own: a
scrape and a status read at the same moment agree exactly, and nothing can drift. Each scrape costs
O(executors ever started) (ends by cause are counted over the current executors and the history).

Each AM has a registry of its own (several AMs may share a test process). Executors' feed rates
and buffer fill come from their heartbeats (``DataPlane.feed_stats``); the AM's own memory and CPU
from prometheus-client's ``ProcessCollector`` (``process_resident_memory_bytes``...).
"""

from __future__ import annotations

import bisect
import datetime as dt
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from ..data.dispatcher import RATE_WINDOW_SECONDS, TaskState, _label_end
from ..data.kafka import RATE_WINDOW_SECONDS as KAFKA_RATE_WINDOW
from ..data.kafka import KafkaInput
from ..states import JOB_OUTCOMES, ExecutorState, JobState
from .state import Executor

if TYPE_CHECKING:
    from .master import ApplicationMaster

# A heartbeat is handled in well under a millisecond on an idle AM; the upper buckets show an
# overloaded event loop.
HEARTBEAT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# The states an AM records (``lost`` is the clients' word for an AM gone without one).
_JOB_STATES = [JobState.PENDING, JobState.STARTING, JobState.RUNNING, *sorted(JOB_OUTCOMES)]
_SIGNALS = range(1, 65)  # 128+N is how a shell (and the executor) reports death by signal N


def end_cause(ex: Executor) -> str:
    """Why an executor ended, as a label: ``succeeded``, ``stopped`` (by the AM), ``lost`` (silent),
    and for a failure ``preempted`` (the backend said so, or its exit code is one of the role's
    preemption codes), ``signal`` (negative code or 128+N), ``failed_exit`` (any other non-zero code) or
    ``no_exit_code`` (it never ran: launch failed, or its backend could not tell)."""
    if ex.state is not ExecutorState.FAILED:
        return ex.state.value
    if ex.preempted:
        return "preempted"
    code = ex.exit_code
    if code is None:
        return "no_exit_code"
    if code < 0 or code - 128 in _SIGNALS:
        return "signal"
    return "failed_exit"


def event_time_lag(watermark: str, now: float) -> float:
    """Seconds from an event-time watermark (ISO 8601 with its offset, as Kafka's) to ``now``."""
    return now - dt.datetime.fromisoformat(watermark).timestamp()


def kafka_metrics(kafka: KafkaInput, now: float) -> Iterator[Metric]:
    """The Kafka source's lag (per partition once its end is read; the total once every partition's
    is), its delivery rate, how far its event-time watermark is behind ``now``, and whether its
    brokers answer: the same readings as the status' ``data.kafka``."""
    lags = GaugeMetricFamily("primus_kafka_lag", "Records of a Kafka partition not read yet (to its end, or its "
                             "high watermark as last read)", labels=["topic", "partition"])
    for topic, partition in sorted(kafka.tasks):
        lag = kafka.lag((topic, partition))
        if lag is not None:
            lags.add_metric([topic, str(partition)], lag)
    yield lags
    total = kafka.total_lag()
    if total is not None:
        yield GaugeMetricFamily("primus_kafka_lag_total", "Records of every Kafka partition not read yet",
                                value=total)
    yield GaugeMetricFamily("primus_kafka_records_per_second", f"Kafka records delivered to trainers per second "
                            f"over the last {KAFKA_RATE_WINDOW:g} seconds", value=kafka.records_rate())
    watermark = kafka.watermark()
    if watermark is not None:
        yield GaugeMetricFamily("primus_kafka_watermark_lag_seconds", "Seconds from the Kafka event-time "
                                "watermark (every partition read up to it) to now",
                                value=event_time_lag(watermark, now))
    yield GaugeMetricFamily("primus_kafka_brokers_reachable", "1 while the Kafka brokers answer the AM, 0 once "
                            "they stopped", value=float(kafka.unreachable_since is None))


def watermark_lag(watermark: str, now: float) -> float:
    """Seconds from the end of the watermark's period (a day or an hour, its label read as UTC) to ``now``;
    negative while that end is still ahead."""
    return now - _label_end(watermark).replace(tzinfo=dt.timezone.utc).timestamp()


class LoopHistogram(Collector):
    """A histogram observed from the AM's event loop only, so without the lock prometheus-client's
    ``Histogram`` takes on every observation (a heartbeat's largest cost after parsing): plain counters,
    read as a ``HistogramMetricFamily`` at each scrape (which runs on the same loop)."""

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...]):
        self.name, self.documentation, self.buckets = name, documentation, buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1  # le: a value on a bound counts in it
        self.sum += value

    def collect(self) -> Iterable[Metric]:
        cumulative: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*map(str, self.buckets), "+Inf"), self.counts, strict=True):
            running += count
            cumulative.append((bound, running))
        yield HistogramMetricFamily(self.name, self.documentation, buckets=cumulative, sum_value=self.sum)


class AMMetrics:
    """The metrics of one AM: its registry, and the one value the AM records as it goes (heartbeat
    handling times)."""

    def __init__(self, am: ApplicationMaster):
        self.registry = CollectorRegistry()
        self.heartbeat_seconds = LoopHistogram(
            "primus_heartbeat_handling_seconds", "Time the AM took to handle one heartbeat of a live executor "
            "(the long poll's wait for its start command excluded; heartbeats of stale incarnations and of "
            "executors being stopped are not counted)", HEARTBEAT_BUCKETS)
        self.registry.register(self.heartbeat_seconds)
        ProcessCollector(registry=self.registry)
        self.registry.register(_StateCollector(am))
        # Bound once: the heartbeat calls it for every report.
        self.observe_heartbeat = self.heartbeat_seconds.observe

    def render(self, accept: str = "") -> tuple[bytes, str]:
        """The body of a ``/metrics`` reply and its content type: in the format the request's ``accept``
        header asks for (OpenMetrics, as Prometheus asks), else Prometheus text format 0.0.4."""
        encode, content_type = choose_encoder(accept)
        return encode(self.registry), content_type


class _StateCollector(Collector):
    """Reads the job's, the roles', the executors' and the input's state at each scrape."""

    def __init__(self, am: ApplicationMaster):
        self.am = am

    def collect(self) -> Iterable[Metric]:
        yield from self._job()
        yield from self._roles()
        yield self._ends()
        if self.am.data is not None:
            yield from self._data()
            yield from self._feeds()
            if self.am.data.kafka is not None:
                yield from kafka_metrics(self.am.data.kafka, time.time())

    def _job(self) -> Iterator[Metric]:
        state = GaugeMetricFamily("primus_job_state", "1 for the job's current state, 0 for the others",
                                  labels=["state"])
        for job_state in _JOB_STATES:
            state.add_metric([job_state.value], float(self.am.record.state is job_state))
        yield state

    def _roles(self) -> Iterator[Metric]:
        record = self.am.record
        executors = GaugeMetricFamily("primus_executors", "Current executors (one per index) by role and state",
                                      labels=["role", "state"])
        ready = GaugeMetricFamily("primus_executors_ready", "Current executors whose trainer passed the role's "
                                  "readiness probe", labels=["role"])
        replicas = GaugeMetricFamily("primus_role_replicas", "Executors the role is to have", labels=["role"])
        restarts = CounterMetricFamily("primus_role_restarts", "Executors of the role started again after "
                                       "they ended", labels=["role"])
        failures = CounterMetricFamily("primus_role_failures", "Failures charged to the role's failure budget "
                                       "(preemptions are not)", labels=["role"])
        for name, role in record.roles.items():
            for state, count in record.role_counts(name).items():
                executors.add_metric([name, state], count)
            ready.add_metric([name], record.count_ready(name))
            replicas.add_metric([name], role.replicas)
            restarts.add_metric([name], role.restarts)
            failures.add_metric([name], role.failures)
        yield from (executors, ready, replicas, restarts, failures)

    def _ends(self) -> Metric:
        ends = CounterMetricFamily("primus_executor_ends", "Executors (incarnations) that ended, by role, final "
                                   "state and cause", labels=["role", "state", "cause"])
        record = self.am.record
        counted: Counter[tuple[str, str, str]] = Counter()
        for ex in (*record.executors.values(), *record.history):
            if ex.state.terminal:  # one scaled down may still be stopping
                counted[ex.role, ex.state.value, end_cause(ex)] += 1
        for labels, count in sorted(counted.items()):
            ends.add_metric(list(labels), count)
        return ends

    def _data(self) -> Iterator[Metric]:
        assert self.am.data is not None
        dispatcher = self.am.data.dispatcher
        tasks = GaugeMetricFamily("primus_data_tasks", "Input tasks by state", labels=["state"])
        for state in TaskState:
            tasks.add_metric([state.value], dispatcher.counts[state])
        yield tasks
        yield CounterMetricFamily("primus_data_bytes_done", "Input bytes read (of tasks done, and of tasks "
                                  "being read up to their position)", value=dispatcher.bytes_done)
        yield CounterMetricFamily("primus_data_bytes", "Input bytes of every task listed so far",
                                  value=dispatcher.bytes_total)
        yield CounterMetricFamily("primus_data_records_done", "Input records delivered to trainers",
                                  value=dispatcher.records_done)
        yield GaugeMetricFamily("primus_data_rate_bytes_per_second", f"Input bytes read per second over the "
                                f"last {RATE_WINDOW_SECONDS:g} seconds", value=dispatcher.rate())
        watermark = dispatcher.watermark
        if watermark is not None:
            yield GaugeMetricFamily("primus_data_watermark_lag_seconds", "Seconds since the end of the latest "
                                    "period (day or hour, UTC) consumed completely", value=watermark_lag(
                                        watermark, time.time()))

    def _feeds(self) -> Iterator[Metric]:
        assert self.am.data is not None
        rates = GaugeMetricFamily("primus_executor_feed_bytes_per_second", "Bytes an executor wrote into its "
                                  "trainer's stdin per second, over its last few seconds", labels=["executor"])
        records = GaugeMetricFamily("primus_executor_feed_records_per_second", "Records an executor wrote into "
                                    "its trainer's stdin per second, over its last few seconds",
                                    labels=["executor"])
        fill = GaugeMetricFamily("primus_executor_feed_buffer_fill_ratio", "Share of an executor's read-ahead "
                                 "buffer in use: near 1 the trainer is the bottleneck, near 0 the input's storage",
                                 labels=["executor"])
        for executor, stats in sorted(self.am.data.feed_stats.items()):
            rates.add_metric([executor], stats.bytes_per_s)
            records.add_metric([executor], stats.records_per_s)
            fill.add_metric([executor], stats.buffer_fill)
        yield from (rates, records, fill)
