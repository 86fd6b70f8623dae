"""Kafka input on YARN: the AM in its master container lists and assigns the partitions, executors in
their containers read them (confluent-kafka where the containers' Python runs), against the broker
of tests/kafka."""

from __future__ import annotations

import sys

import pytest
from kafka.conftest import create_topic, kafka_broker, produce, unique_topic  # noqa: F401 - a fixture
from kafka.test_kafka_input import ids_read, records

from conftest import make_spec

from .test_yarn_backend import CONSUMER, SMALL, YARN

pytestmark = pytest.mark.timeout(300)


def test_a_kafka_backfill_runs_on_yarn(minicluster, kafka_broker, yarn_client, tmp_path):  # noqa: F811 - a fixture
    bootstrap, topic = kafka_broker.bootstrap, unique_topic()
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, records("y", 5_000, 2))
    out = tmp_path / "out"
    out.mkdir()
    spec = make_spec([{"name": "worker", "replicas": 2, "consumes_input": True, "resources": SMALL,
                       "command": [sys.executable, CONSUMER], "env": {"OUT_DIR": str(out)}}],
                     input={"kafka": {"bootstrap_servers": bootstrap, "topics": [topic], "start": "earliest",
                                      "end": "latest"}},
                     backend=YARN, am={"heartbeat_timeout": 30.0})
    app_id = yarn_client.submit(spec)
    status = yarn_client.wait(app_id, timeout=180)
    assert status.job.state == "succeeded", status.job
    assert sorted(ids_read(out)) == sorted(f"y{i}" for i in range(5_000))
    assert {p.partition: p.offset for p in status.data.kafka.partitions} == {0: 2_500, 1: 2_500}
