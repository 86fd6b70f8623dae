"""The AM's /metrics: Prometheus text, behind the job token, agreeing with the status API read at the same
moment; executors' feed rates and buffer fill, measured by the executor and exported by the AM."""

from __future__ import annotations

import datetime as dt
import http.client
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from unittest import mock

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from conftest import make_spec, wait_for
from primus_runtime import protocol
from primus_runtime.am.metrics import event_time_lag, kafka_metrics, watermark_lag
from primus_runtime.api_client import AMClient
from primus_runtime.executor import feed
from primus_runtime.executor.feed import BUFFER_CHUNKS, Feeder, FeedRate

CONSUMER = str(Path(__file__).with_name("data") / "consumer.py")
Samples = dict[str, dict[frozenset[tuple[str, str]], float]]


def _get(address: str, path: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read()
    finally:
        conn.close()


def scrape(address: str, token: str) -> Samples:
    """Sample name -> labels -> value, as Prometheus' own parser reads the page."""
    status, content_type, body = _get(address, "/metrics", {"Authorization": "Bearer " + token})
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4"), (status, content_type)
    samples: Samples = defaultdict(dict)
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples[sample.name][frozenset(sample.labels.items())] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[name][frozenset(labels.items())]


def by_label(samples: Samples, name: str, label: str, **fixed: str) -> dict[str, float]:
    """The samples of ``name`` whose other labels are ``fixed``, by the value of ``label``."""
    out = {}
    for key, number in samples[name].items():
        labels = dict(key)
        if {k: v for k, v in labels.items() if k != label} == fixed:
            out[labels[label]] = number
    return out


def test_executor_ends_and_restarts_by_cause_agree_with_the_status(client):
    # Attempt 0 of worker-0 fails with exit 3, of worker-1 dies of SIGKILL, of worker-2 is preempted (42).
    first_try = ('if [ "$PRIMUS_ATTEMPT" = 0 ]; then case $PRIMUS_INDEX in 0) exit 3;; 1) kill -9 $$;; '
                 '2) exit 42;; esac; fi; exec sleep 300')
    app = client.submit(make_spec([
        {"name": "worker", "replicas": 3, "command": ["sh", "-c", first_try],
         "failover": {"max_failures_per_index": 1, "preemption_exit_codes": [42]}},
        {"name": "ps", "replicas": 1, "command": "exec sleep 300"},
    ]))

    def restarted() -> bool:
        workers = [ex for ex in client.status(app).executors if ex.role == "worker"]
        return len(workers) == 3 and all(ex.attempt == 1 and ex.state == "running" for ex in workers)

    wait_for(restarted, 30, "every worker restarted")
    address, token = client.cluster("local").am_endpoint(app)
    samples = scrape(address, token)
    status = client.status(app)

    assert value(samples, "primus_job_state", state="running") == 1
    assert sum(samples["primus_job_state"].values()) == 1
    for role in status.roles:
        assert by_label(samples, "primus_executors", "state", role=role.name) == role.states
        assert value(samples, "primus_role_restarts_total", role=role.name) == role.restarts
        assert value(samples, "primus_role_failures_total", role=role.name) == role.failures
        assert value(samples, "primus_executors_ready", role=role.name) == role.ready
        assert value(samples, "primus_role_replicas", role=role.name) == role.replicas
    assert (status.roles[0].restarts, status.roles[0].failures) == (3, 2)  # a preemption is free
    assert by_label(samples, "primus_executor_ends_total", "cause", role="worker", state="failed") == {
        "failed_exit": 1, "signal": 1, "preempted": 1}
    assert not by_label(samples, "primus_executor_ends_total", "cause", role="ps", state="failed")
    assert value(samples, "primus_heartbeat_handling_seconds_count") > 0
    assert value(samples, "process_resident_memory_bytes") > 10 * 1024 * 1024
    assert "primus_data_tasks" not in samples  # no input
    # Goodput: three workers were restarting a while; every second scraped is in a later status too.
    goodput = by_label(samples, "primus_goodput_seconds", "cause")
    assert set(goodput) == {"productive", "pending_resources", "restarting", "waiting_for_data", "draining"}
    assert goodput["restarting"] > 0 and goodput["productive"] > 0 and goodput["pending_resources"] > 0
    assert goodput["waiting_for_data"] == 0 == goodput["draining"]  # no input, no drain
    assert 0 < value(samples, "primus_goodput_ratio") < 1
    later = client.status(app, summary=True).goodput
    assert later is not None and all(later.seconds[cause] >= seconds - 0.001 for cause, seconds in goodput.items())


def test_a_consuming_jobs_metrics_need_the_token_and_agree_with_the_status(client, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    out.mkdir()
    for day in (1, 2, 3):  # December 2026, two files of 3,000 lines a day
        (data / f"202612{day:02d}").mkdir(parents=True)
        for part in range(2):
            lines = (f"d{day}-f{part}-{i:05d}\n" for i in range(3000))
            (data / f"202612{day:02d}" / f"part-{part}.txt").write_text("".join(lines))
        (data / f"202612{day:02d}" / "_SUCCESS").write_text("")
    # The trainer reads slowly (about 2,000 records/s), so the input lasts while the test looks.
    spec = make_spec([{"name": "worker", "replicas": 2, "consumes_input": True,
                       "command": [sys.executable, CONSUMER],
                       "env": {"OUT_DIR": str(out), "SLEEP_EVERY": "100", "SLEEP": "0.05"}}],
                     input={"sources": [{"name": "clicks", "path": str(data) + "/{{YYYY}}{{MM}}{{DD}}/"}],
                            "time_range": {"start": "2026-12-01", "end": "2026-12-03"}, "task_size": "20000B",
                            "poll_interval": 0.2})
    app = client.submit(spec)
    wait_for(lambda: (data := client.data(app)) is not None and data.records_done, 30, "records fed")
    address, token = client.cluster("local").am_endpoint(app)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {protocol.TOKEN_HEADER: token[:-1]}):
        status_code, _, body = _get(address, "/metrics", headers)
        assert status_code == 401 and token.encode() not in body
    # Prometheus asks for OpenMetrics, and gets it (with the token in the header that passes proxies).
    status_code, content_type, body = _get(address, "/metrics", {
        protocol.TOKEN_HEADER: token, "Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"})
    assert status_code == 200 and content_type.startswith("application/openmetrics-text; version=1.0.0")
    families = {f.name: f for f in openmetrics_families(body.decode())}
    assert families["primus_data_records_done"].type == "counter"

    # Feeding: each executor reports its rate into the trainer's stdin and its buffer's fill.
    feeding = wait_for(lambda: (s := scrape(address, token)) and all(
        by_label(s, "primus_executor_feed_bytes_per_second", "executor").get(f"worker-{i}", 0) > 0
        for i in range(2)) and s, 30, "both executors feeding")
    for i in range(2):
        assert value(feeding, "primus_executor_feed_records_per_second", executor=f"worker-{i}") > 0
        assert 0 <= value(feeding, "primus_executor_feed_buffer_fill_ratio", executor=f"worker-{i}") <= 1

    # Suspended, with every task handed out finished, nothing moves: both reads see the same job.
    AMClient(address, token).post("/api/v1/data/suspend", {}, timeout=10)
    wait_for(lambda: client.data(app).tasks["running"] == 0, 60, "the tasks handed out finished")
    samples = scrape(address, token)
    status = client.status(app)
    data_status = status.data
    assert data_status.state == "suspended" and 0 < data_status.tasks["done"] < data_status.tasks["total"]
    tasks = by_label(samples, "primus_data_tasks", "state")
    assert tasks == {k: v for k, v in data_status.tasks.items() if k != "total"}
    assert value(samples, "primus_data_records_done_total") == data_status.records_done
    assert value(samples, "primus_data_bytes_done_total") == data_status.bytes["done"]
    assert value(samples, "primus_data_bytes_total") == data_status.bytes["total"]
    assert value(samples, "primus_data_rate_bytes_per_second") >= 0
    assert by_label(samples, "primus_executors", "state", role="worker") == status.roles[0].states
    if data_status.watermark is None:
        assert "primus_data_watermark_lag_seconds" not in samples
    else:
        lag = value(samples, "primus_data_watermark_lag_seconds")
        assert abs(lag - watermark_lag(data_status.watermark, time.time())) < 60
    client.kill(app)


def test_watermark_lag_counts_from_the_end_of_its_period_in_utc():
    end_of_day = dt.datetime(2026, 12, 2, tzinfo=dt.timezone.utc).timestamp()
    assert watermark_lag("2026-12-01", end_of_day + 90) == 90
    assert watermark_lag("2026-12-01T23", end_of_day - 30) == -30  # the hour's end is still ahead


class FakeKafka:
    """What kafka_metrics reads of a KafkaInput: partitions' lags (None: end not read yet), rate, watermark."""

    def __init__(self, lags: dict[tuple[str, int], int | None], watermark: str | None,
                 unreachable_since: float | None):
        self.tasks = dict.fromkeys(lags)
        self.lags, self._watermark, self.unreachable_since = lags, watermark, unreachable_since

    def lag(self, tp: tuple[str, int]) -> int | None:
        return self.lags[tp]

    def total_lag(self) -> int | None:
        known = [lag for lag in self.lags.values() if lag is not None]
        return sum(known) if len(known) == len(self.lags) else None

    def records_rate(self) -> float:
        return 1234.5

    def watermark(self) -> str | None:
        return self._watermark


def kafka_samples(kafka: FakeKafka, now: float) -> Samples:
    samples: Samples = defaultdict(dict)
    for family in kafka_metrics(kafka, now):  # type: ignore[arg-type]
        for sample in family.samples:
            samples[sample.name][frozenset(sample.labels.items())] = sample.value
    return samples


def test_kafka_metrics_show_lag_per_partition_and_in_total_rate_watermark_lag_and_reachability():
    now = dt.datetime(2026, 12, 1, 0, 1, 30, tzinfo=dt.timezone.utc).timestamp()
    kafka = FakeKafka({("clicks", 0): 10, ("clicks", 1): 0, ("views", 0): 5}, "2026-12-01T00:00:00.000+00:00", None)
    samples = kafka_samples(kafka, now)
    assert by_label(samples, "primus_kafka_lag", "partition", topic="clicks") == {"0": 10, "1": 0}
    assert value(samples, "primus_kafka_lag", topic="views", partition="0") == 5
    assert value(samples, "primus_kafka_lag_total") == 15
    assert value(samples, "primus_kafka_records_per_second") == 1234.5
    assert value(samples, "primus_kafka_watermark_lag_seconds") == 90
    assert value(samples, "primus_kafka_brokers_reachable") == 1


def test_kafka_metrics_leave_out_what_is_not_known_yet_and_show_unreachable_brokers():
    kafka = FakeKafka({("clicks", 0): 10, ("clicks", 1): None}, None, unreachable_since=time.time())
    samples = kafka_samples(kafka, time.time())
    assert by_label(samples, "primus_kafka_lag", "partition", topic="clicks") == {"0": 10}
    assert "primus_kafka_lag_total" not in samples  # a partition's end is not read yet
    assert "primus_kafka_watermark_lag_seconds" not in samples
    assert value(samples, "primus_kafka_brokers_reachable") == 0


def test_event_time_lag_reads_the_watermarks_offset():
    now = dt.datetime(2026, 12, 1, 1, 0, tzinfo=dt.timezone.utc).timestamp()
    assert event_time_lag("2026-12-01T00:59:59.500+00:00", now) == 0.5
    assert event_time_lag("2026-12-01T02:00:00+01:00", now) == 0


def test_feed_rate_is_over_the_recent_window():
    rate = FeedRate(window=10)
    assert rate.sample(100, 0, 0) == (0, 0)  # one sample says nothing yet
    assert rate.sample(105, 500, 50) == (100, 10)
    assert rate.sample(112, 1200, 120) == (100, 10)
    assert rate.sample(120, 1200, 120) == (700 / 15, 70 / 15)  # from t=105, the newest sample 10 s old or more
    assert rate.sample(140, 1200, 120) == (0, 0)  # nothing written in the last 20 s


def test_feed_stats_show_the_buffer_filling_while_the_trainer_does_not_read(tmp_path: Path):
    path = tmp_path / "input.txt"
    line = b"x" * 99 + b"\n"
    path.write_bytes(line * 40_000)  # 4 MB: more than the pipe and the buffer hold
    read_fd, write_fd = os.pipe()
    feeder = Feeder(open(write_fd, "wb", buffering=0), max_tasks=1)
    task = {"task_id": "t0", "url": str(path), "format": "text", "compression": "none", "start": 0,
            "end": path.stat().st_size, "skip": 0}
    first = feeder.report()
    assert first["feed"] == {"bytes_per_s": 0, "records_per_s": 0, "buffer_fill": 0}
    feeder.reported(first, {"tasks": [task]})
    # The pipe is full, the writer blocked: the readers fill the buffer to its capacity.
    seen: list[dict[str, float]] = []  # each report's feed figures: the rate is of the time since the last

    def full_buffer() -> bool:
        seen.append(feeder.report()["feed"])
        return seen[-1]["buffer_fill"] == 1
    wait_for(full_buffer, 30, "a full buffer")
    assert feeder.buffer.qsize() == BUFFER_CHUNKS
    # While the pipe and the buffer filled, the feed wrote (at whatever pace the machine allowed).
    assert max(f["bytes_per_s"] for f in seen) > 0 and max(f["records_per_s"] for f in seen) > 0
    reader = threading.Thread(target=lambda: all(iter(lambda: os.read(read_fd, 1 << 20), b"")))
    reader.start()
    # The trainer reads again: the buffer empties as the input is written, and the pipe closes at its end.
    with mock.patch.object(feed, "QUIET_SECONDS", 0.05):
        while not feeder.closed:
            report = feeder.report()
            feeder.reported(report, {"data_exhausted": True})
            time.sleep(0.01)
    assert report["done"] == ["t0"] and report["feed"]["buffer_fill"] == 0
    reader.join(10)
    os.close(read_fd)
    assert feeder.total_written == path.stat().st_size
