"""Kafka input end to end: a real broker (scripts/kafka.sh), a real AM, executors and trainers.

The trainer (tests/data/consumer.py) appends every record it reads to a file of its own, so a test
sees exactly what reached trainers, duplicates included. Records are JSON documents with an id.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import make_spec, wait_for
from kafka.conftest import Record, add_partitions, create_topic, produce, unique_topic

CONSUMER = str(Path(__file__).resolve().parents[1] / "data" / "consumer.py")


def records(prefix: str, count: int, partitions: int, timestamp_ms: int | None = None) -> list[Record]:
    """``count`` JSON records ``{"id": PREFIX-N}`` spread round-robin over ``partitions``."""
    return [Record(f"{prefix}{i}".encode(), json.dumps({"id": f"{prefix}{i}"}).encode(), i % partitions,
                   timestamp_ms) for i in range(count)]


def ids_read(out: Path) -> list[str]:
    return [json.loads(line)["id"] for f in sorted(out.iterdir()) if not f.name.startswith(("restore-", "batch-"))
            for line in f.read_text().splitlines()]


def kafka_spec(out: Path, bootstrap: str, topic: str, replicas: int = 3, env: dict[str, str] | None = None,
               **kafka: Any) -> dict[str, Any]:
    source = {"bootstrap_servers": bootstrap, "topics": [topic], "start": "earliest", **kafka}
    return make_spec([{"name": "worker", "replicas": replicas, "consumes_input": True,
                       "command": [sys.executable, CONSUMER], "env": {"OUT_DIR": str(out), **(env or {})}}],
                     input={"kafka": source, "poll_interval": 0.5})


@pytest.fixture
def out(tmp_path: Path) -> Path:
    path = tmp_path / "out"
    path.mkdir()
    return path


def test_a_bounded_backfill_delivers_every_record_once_to_three_workers(client, kafka_broker, out):
    topic = unique_topic()
    create_topic(kafka_broker.bootstrap, topic, 3)
    produce(kafka_broker.bootstrap, topic, records("r", 30_000, 3))
    app = client.submit(kafka_spec(out, kafka_broker.bootstrap, topic, end="latest"))
    status = client.wait(app, timeout=120)
    assert status["job"]["state"] == "succeeded", status["job"]
    read = ids_read(out)
    assert sorted(read) == sorted(f"r{i}" for i in range(30_000))
    kafka = status["data"]["kafka"]
    assert kafka["lag"] == 0 and kafka["progress"] == 1.0
    assert {p["partition"]: p["offset"] for p in kafka["partitions"]} == {0: 10_000, 1: 10_000, 2: 10_000}
    # Every worker had a partition of its own.
    assert len([f for f in out.iterdir() if f.stat().st_size]) == 3


def trainer_pids(out: Path) -> list[int]:
    return [int(f.stem.rsplit("-", 1)[1]) for f in out.iterdir()
            if not f.name.startswith(("restore-", "batch-")) and f.stat().st_size > 0]


def kill_trainers(out: Path, count: int) -> list[int]:
    """SIGKILL ``count`` trainers that have read something, one at a time, each after the previous
    one's replacement has read too."""
    killed: list[int] = []
    for _ in range(count):
        pid = wait_for(lambda: next((p for p in trainer_pids(out) if p not in killed), None), 60,
                       "a trainer that read records")
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    return killed


def test_a_stream_survives_worker_kills_and_picks_up_new_partitions_and_data(client, kafka_broker, out):
    bootstrap, topic = kafka_broker.bootstrap, unique_topic()
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, records("a", 20_000, 3))
    spec = kafka_spec(out, bootstrap, topic, env={"SLEEP_EVERY": "1000", "SLEEP": "0.05"})
    spec["roles"][0]["failover"] = {"max_failures_per_index": 5}
    app = client.submit(spec)
    killed = kill_trainers(out, 2)
    add_partitions(bootstrap, topic, 4)
    produce(bootstrap, topic, records("b", 4_000, 4))
    expected = {f"a{i}" for i in range(20_000)} | {f"b{i}" for i in range(4_000)}
    wait_for(lambda: expected <= set(ids_read(out)), 120, "every record, the new partition's too")
    # The last positions are confirmed once the trainers ask for more, and the lag read every 2 s.
    status = wait_for(lambda: (s := client.status(app))["data"]["kafka"]["lag"] == 0 and s, 30, "no lag")
    assert status["job"]["state"] == "running"  # a stream has no end: the job runs until it is stopped
    assert len(status["data"]["kafka"]["partitions"]) == 4
    assert sum(r["restarts"] for r in status["roles"]) == len(killed)
    assert any("1 new partition(s)" in e["reason"] for e in status["events"])
    read = ids_read(out)
    assert set(read) == expected
    assert len(read) - len(expected) <= len(killed)  # a killed reader.records() trainer sees only its record again
    client.kill(app)
    assert client.wait(app, timeout=60)["job"]["state"] == "killed"


def test_exactly_once_across_worker_kills(client, kafka_broker, out):
    bootstrap, topic = kafka_broker.bootstrap, unique_topic()
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, records("e", 15_000, 3))
    spec = kafka_spec(out, bootstrap, topic, end="latest",
                      env={"COMMIT_EVERY": "700", "SLEEP_EVERY": "500", "SLEEP": "0.05"})
    spec["input"]["delivery"] = "exactly_once"
    spec["roles"][0]["failover"] = {"max_failures_per_index": 5}
    app = client.submit(spec)
    wait_for(lambda: list(out.glob("batch-*")), 60, "a first checkpoint")
    for f in list(out.glob("restore-*"))[:2]:
        os.kill(int(f.stem.rsplit("-", 1)[1]), signal.SIGKILL)
    status = client.wait(app, timeout=120)
    assert status["job"]["state"] == "succeeded", status["job"]
    assert sum(r["restarts"] for r in status["roles"]) == 2
    committed = committed_ids(client, app, out)
    assert sorted(committed) == sorted(f"e{i}" for i in range(15_000))  # every record, each exactly once


def committed_ids(client, app: str, out: Path) -> list[str]:
    """Exactly-once: the records in every checkpoint a trainer committed (commits.jsonl of each executor)."""
    job_dir = client.local.job(app).path
    names = [json.loads(line)["checkpoint"] for f in job_dir.glob("executors/*/attempt-*/commits.jsonl")
             for line in f.read_text().splitlines()]
    return [json.loads(line)["id"] for name in names for line in (out / f"batch-{name}.txt").read_text().splitlines()]
