"""Kafka progress where users look, against a real broker and a real job: /metrics, `primus status`,
the Airflow data-progress sensor and its trigger.

One stalled job (tests/kafka/conftest.submit_stalled_job: its trainers stop reading, so its offsets
and lag stay put) serves every test of the module: each compares its view with the status API's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow.sdk.exceptions import TaskDeferred
from provider.conftest import make_context
from provider.test_trigger import first_event
from test_cli import primus
from test_metrics import by_label, scrape, value

from kafka.conftest import STALL_LAG, KafkaBroker, kafka_broker, submit_stalled_job  # noqa: F401 - the fixture
from primus_runtime.am.metrics import event_time_lag
from primus_runtime.client import PrimusClient

WATERMARK = "2026-12-01T00:19:57.000+00:00"  # record 1197's event time


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kafka-surface") / "home"


@pytest.fixture(scope="module")
def stalled(home: Path, kafka_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
            ) -> Iterator[tuple[PrimusClient, str]]:
    client = PrimusClient(home)
    out = tmp_path_factory.mktemp("kafka-surface-out")
    app, _ = submit_stalled_job(client, kafka_broker.bootstrap, out)
    yield client, app
    client.cluster("local").force_kill(app)


def test_metrics_show_the_kafka_lag_rate_watermark_and_brokers_as_the_status_does(stalled):
    client, app = stalled
    address, token = client.cluster("local").am_endpoint(app)
    samples = scrape(address, token)
    kafka = client.status(app).data.kafka
    assert kafka.lag == 3 * STALL_LAG and kafka.reachable
    assert value(samples, "primus_kafka_lag_total") == kafka.lag
    for p in kafka.partitions:
        assert value(samples, "primus_kafka_lag", topic=p.topic, partition=str(p.partition)) == p.lag
    assert len(by_label(samples, "primus_kafka_lag", "partition", topic=kafka.topics[0])) == 3
    assert value(samples, "primus_kafka_records_per_second") >= 0
    assert value(samples, "primus_kafka_brokers_reachable") == 1
    # Every partition is read up to the first wave: its last record in partition 0 is record 1197.
    assert kafka.watermark == WATERMARK
    lag = value(samples, "primus_kafka_watermark_lag_seconds")
    assert abs(lag - event_time_lag(kafka.watermark, time.time())) < 60


def test_primus_status_and_data_print_the_kafka_line(stalled, home):
    client, app = stalled
    code, out, err = primus(home, "status", app)
    assert code == 0, err
    line = next(line.strip() for line in out.splitlines() if line.strip().startswith("kafka "))
    assert line.startswith(f"kafka lag {3 * STALL_LAG} records, ")
    assert f"watermark {WATERMARK}" in line and line.endswith(", brokers reachable")
    code, out, err = primus(home, "data", "status", app)
    assert code == 0 and f"{app}: kafka lag {3 * STALL_LAG} records" in out, err


def test_the_data_progress_sensor_waits_for_the_kafka_lag_and_watermark(stalled, home, monkeypatch):
    from airflow_provider_primus.sensors.primus import PrimusDataProgressSensor
    from airflow_provider_primus.triggers.primus import PrimusDataProgressTrigger

    client, app = stalled
    monkeypatch.setenv("PRIMUS_HOME", str(home))  # the hook's default connection: this module's jobs
    lag = 3 * STALL_LAG

    def poke(**condition) -> bool:
        return PrimusDataProgressSensor(task_id="d", app_id=app, **condition).poke({})

    assert poke(max_lag=lag) and not poke(max_lag=lag - 1)
    assert poke(watermark_after="2026-12-01T00:19") and poke(watermark_after=WATERMARK)
    assert not poke(watermark_after="2026-12-01T00:19:57.001Z")
    assert not poke(max_lag=lag, watermark_after="2026-12-01T01")  # all must hold
    # Unmet, a deferrable sensor defers with its arguments normalized; met, it ends without deferring.
    waiting = PrimusDataProgressSensor(task_id="d", app_id=app, max_lag=lag - 1, watermark_after="2026-12-01T00:19",
                                       deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        waiting.execute(make_context())
    kwargs = deferred.value.trigger.serialize()[1]
    conditions = ("app_id", "primus_conn_id", "poll_interval", "min_progress", "partition", "max_lag",
                  "watermark_after")
    assert {k: kwargs[k] for k in conditions} == {
        "app_id": app, "primus_conn_id": "primus_default", "poll_interval": 60,
        "min_progress": None, "partition": None, "max_lag": lag - 1, "watermark_after": "2026-12-01T00:19:00.000+00:00"}
    PrimusDataProgressSensor(task_id="d", app_id=app, max_lag=lag, deferrable=True).execute(make_context())
    # Deferred: the trigger judges alike, from the normalized arguments the sensor hands it.
    event = first_event(PrimusDataProgressTrigger(app, max_lag=lag, watermark_after=WATERMARK, poll_interval=0.2))
    assert event["status"] == "success" and f"kafka lag {lag} records" in event["reason"]
