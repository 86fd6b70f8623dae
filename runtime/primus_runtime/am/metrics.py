"""The AM's Prometheus metrics, served at ``/metrics`` (behind the job token, as the API).

What the status API also shows (executors per role and state, restarts, failures, the job's and
the input's state) is read from the AM's state when scraped, not kept in counters of its own: a
scrape and a status read at the same moment agree exactly, and nothing can drift. Each scrape costs
O(executors ever started) (ends by cause are counted over the current executors and the history).

Each AM has a registry of its own (several AMs may share a test process). Executors' feed rates
and buffer fill come from their heartbeats (``DataPlane.feed_stats``); the AM's own memory and CPU
from prometheus-client's ``ProcessCollector`` (``process_resident_memory_bytes``...).

prometheus-client is imported at the first scrape, not when the AM starts: until then the AM only
counts heartbeat handling times into its buckets (``AMMetrics.observe_heartbeat``).
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..partitions import label_end
from ..states import JOB_OUTCOMES, ExecutorState, JobState
from .state import Executor

if TYPE_CHECKING:
    from prometheus_client.core import Metric
    from prometheus_client.registry import CollectorRegistry

    from ..data.kafka import KafkaInput
    from .readout import AMReadout

# A heartbeat is handled in well under a millisecond on an idle AM; the upper buckets show an
# overloaded event loop.
HEARTBEAT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# The states an AM records (``lost`` is the clients' word for an AM gone without one).
JOB_STATES = [JobState.PENDING, JobState.STARTING, JobState.RUNNING, *sorted(JOB_OUTCOMES)]
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
    from prometheus_client.core import GaugeMetricFamily

    from ..data.kafka import RATE_WINDOW_SECONDS as KAFKA_RATE_WINDOW

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
    return now - label_end(watermark).replace(tzinfo=dt.timezone.utc).timestamp()


class AMMetrics:
    """The metrics of one AM: the one value the AM records as it goes (heartbeat handling times, in
    the histogram's buckets), and the registry that serves them with the state read at each scrape
    (made at the first one)."""

    def __init__(self, am: AMReadout):
        self.am = am
        self.heartbeat_counts = [0] * (len(HEARTBEAT_BUCKETS) + 1)  # per bucket (not cumulative); the last: +Inf
        self.heartbeat_sum = 0.0
        self._registry: CollectorRegistry | None = None

    def observe_heartbeat(self, seconds: float) -> None:
        # An observation counts in the first bucket whose bound is >= it, as Prometheus' ``le`` says.
        self.heartbeat_counts[bisect.bisect_left(HEARTBEAT_BUCKETS, seconds)] += 1
        self.heartbeat_sum += seconds

    def render(self, accept: str = "") -> tuple[bytes, str]:
        """The body of a ``/metrics`` reply and its content type: in the format the request's ``accept``
        header asks for (OpenMetrics, as Prometheus asks), else Prometheus text format 0.0.4."""
        from prometheus_client.exposition import choose_encoder

        encode, content_type = choose_encoder(accept)
        return encode(self.registry()), content_type

    def registry(self) -> CollectorRegistry:
        if self._registry is None:
            from prometheus_client import CollectorRegistry, ProcessCollector

            from .scrape import StateCollector

            self._registry = CollectorRegistry()
            ProcessCollector(registry=self._registry)
            self._registry.register(StateCollector(self.am, self))
        return self._registry
