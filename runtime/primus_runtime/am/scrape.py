"""What ``/metrics`` reads at each scrape (prometheus-client): imported with the first one."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from ..data.dispatcher import RATE_WINDOW_SECONDS, TaskState
from .metrics import HEARTBEAT_BUCKETS, JOB_STATES, AMMetrics, end_cause, kafka_metrics, watermark_lag

if TYPE_CHECKING:
    from .readout import AMReadout


class StateCollector:
    """Reads the job's, the roles', the executors' and the input's state at each scrape (a prometheus
    ``Collector``: registries only call ``collect``)."""

    def __init__(self, am: AMReadout, metrics: AMMetrics):
        self.am = am
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        yield self._heartbeats()
        yield from self._job()
        yield from self._roles()
        yield self._ends()
        yield from self._goodput()
        if self.am.data is not None:
            yield from self._data()
            yield from self._feeds()
            if self.am.data.kafka is not None:
                yield from kafka_metrics(self.am.data.kafka, time.time())

    def _heartbeats(self) -> Metric:
        cumulative, buckets = 0, []
        for bound, count in zip([*map(float, HEARTBEAT_BUCKETS), float("inf")], self.metrics.heartbeat_counts, strict=True):
            cumulative += count
            buckets.append((_bound_label(bound), cumulative))
        return HistogramMetricFamily(
            "primus_heartbeat_handling_seconds", "Time the AM took to handle one heartbeat of a live executor "
            "(the long poll's wait for its start command excluded; heartbeats of stale incarnations and of "
            "executors being stopped are not counted)", buckets=buckets, sum_value=self.metrics.heartbeat_sum)

    def _job(self) -> Iterator[Metric]:
        state = GaugeMetricFamily("primus_job_state", "1 for the job's current state, 0 for the others",
                                  labels=["state"])
        for job_state in JOB_STATES:
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

    def _goodput(self) -> Iterator[Metric]:
        goodput = self.am.record.goodput.view()  # as the status has it (a scrape and a status read agree)
        ratio = goodput["ratio"]
        yield GaugeMetricFamily("primus_goodput_ratio", "Effective training time ratio (ETTR): productive "
                                "executor-seconds over every executor-second accounted (NaN before any)",
                                value=float("nan") if ratio is None else ratio)
        # A gauge, not a counter: the name stays primus_goodput_seconds (a counter's gets _total).
        seconds = GaugeMetricFamily("primus_goodput_seconds", "Executor-seconds by where they went: productive, "
                                    "pending_resources, restarting, waiting_for_data, draining", labels=["cause"])
        for cause, value in goodput["seconds"].items():
            seconds.add_metric([cause], value)
        yield seconds

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


def _bound_label(bound: float) -> str:
    """A bucket's ``le`` as prometheus-client writes it (``0.005``, ``1.0``, ``+Inf``)."""
    return str(floatToGoString(bound))
