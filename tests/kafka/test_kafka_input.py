"""Kafka input end to end: a real broker (scripts/kafka.sh), a real AM, executors and trainers.

The trainer (tests/data/consumer.py) appends every record it reads to a file of its own, so a test
sees exactly what reached trainers, duplicates included. Records are JSON documents with an id.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import make_spec, read_log, wait_for
from kafka.conftest import Record, add_partitions, create_topic, produce, start_broker, stop_broker, unique_topic
from primus_runtime.models import EventView, KafkaStatus, StatusDocument
from primus_runtime.spec import load_spec

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
    assert status.job.state == "succeeded", status.job
    read = ids_read(out)
    assert sorted(read) == sorted(f"r{i}" for i in range(30_000))
    assert isinstance(status.data.kafka, KafkaStatus)  # the Kafka block is part of the typed status
    kafka = status.data.kafka
    assert kafka.lag == 0 and kafka.progress == 1.0
    assert {p.partition: p.offset for p in kafka.partitions} == {0: 10_000, 1: 10_000, 2: 10_000}
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
    status = wait_for(lambda: (s := client.status(app)).data.kafka.lag == 0 and s, 30, "no lag")
    assert status.job.state == "running"  # a stream has no end: the job runs until it is stopped
    assert len(status.data.kafka.partitions) == 4
    assert sum(r.restarts for r in status.roles) == len(killed)
    assert any("1 new partition(s)" in e.reason for e in status.events)
    read = ids_read(out)
    assert set(read) == expected
    assert len(read) - len(expected) <= len(killed)  # a killed reader.records() trainer sees only its record again
    client.kill(app)
    assert client.wait(app, timeout=60).job.state == "killed"


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
    assert status.job.state == "succeeded", status.job
    assert sum(r.restarts for r in status.roles) == 2
    committed = committed_ids(client, app, out)
    assert sorted(committed) == sorted(f"e{i}" for i in range(15_000))  # every record, each exactly once


def committed_ids(client, app: str, out: Path) -> list[str]:
    """Exactly-once: the records in every checkpoint a trainer committed (commits.jsonl of each executor)."""
    job_dir = client.cluster("local").job(app).path
    names = [json.loads(line)["checkpoint"] for f in job_dir.glob("executors/*/attempt-*/commits.jsonl")
             for line in f.read_text().splitlines()]
    return [json.loads(line)["id"] for name in names for line in (out / f"batch-{name}.txt").read_text().splitlines()]


BASE_MS = 1_796_083_200_000  # 2026-12-01T00:00:00Z


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat()


def test_start_modes_and_a_bounded_end_by_time(client, kafka_broker, tmp_path):
    bootstrap, topic, group = kafka_broker.bootstrap, unique_topic(), unique_topic("group")
    create_topic(bootstrap, topic, 2)
    # Record i at BASE + i seconds, alternating partitions.
    produce(bootstrap, topic, [Record(None, json.dumps({"id": f"s{i}"}).encode(), i % 2, BASE_MS + i * 1000)
                               for i in range(1000)])

    def run(name: str, **kafka: Any) -> tuple[StatusDocument, list[str]]:
        out = tmp_path / name
        out.mkdir()
        spec = kafka_spec(out, bootstrap, topic, replicas=2, **{"group_id": group, **kafka})
        status = client.wait(client.submit(spec), timeout=120)
        return status, ids_read(out)

    # A time range: the first record at or after the start, up to the last one before the end.
    status, read = run("window", start=iso(BASE_MS + 600_000), end=iso(BASE_MS + 800_000),
                       group_id=unique_topic("other"))
    assert status.job.state == "succeeded", status.job
    assert sorted(read) == sorted(f"s{i}" for i in range(600, 800))
    # An end by offsets: partition 0 up to offset 100, partition 1 (record i at offset i // 2) up to 50.
    status, read = run("offsets", start="earliest", end={topic: {0: 100, 1: 50}}, group_id=unique_topic("other"))
    assert status.job.state == "succeeded", status.job
    assert sorted(read) == sorted([f"s{i}" for i in range(0, 200, 2)] + [f"s{i}" for i in range(1, 100, 2)])
    # committed, with nothing committed yet: from the start. The AM commits the offsets to the group.
    status, read = run("first", start="committed", end="latest")
    assert status.job.state == "succeeded", status.job
    assert sorted(read) == sorted(f"s{i}" for i in range(1000))
    produce(bootstrap, topic, [Record(None, json.dumps({"id": f"s{i}"}).encode(), i % 2) for i in range(1000, 1300)])
    status, read = run("second", start="committed", end="latest")
    assert sorted(read) == sorted(f"s{i}" for i in range(1000, 1300))  # only what came since
    # latest up to latest: nothing to read, which is a mistake worth a clear failure.
    status, read = run("nothing", start="latest", end="latest")
    assert status.job.state == "failed" and "nothing to read between start (latest) and end (latest)" in \
        status.job.reason, status.job
    assert read == []


def test_files_then_kafka_join_without_a_gap_or_an_overlap(client, kafka_broker, tmp_path):
    bootstrap, topic = kafka_broker.bootstrap, unique_topic()
    create_topic(bootstrap, topic, 2)
    # The files hold 2026-12-01; the topic holds 2026-12-01 (again) and 2026-12-02.
    day = tmp_path / "data" / "20261201"
    day.mkdir(parents=True)
    (day / "part-0.jsonl").write_text("".join(json.dumps({"id": f"d1-{i}"}) + "\n" for i in range(500)))
    (day / "_SUCCESS").write_text("")
    hour_ms = 3_600_000
    produce(bootstrap, topic, [Record(None, json.dumps({"id": f"d1-{i}"}).encode(), i % 2, BASE_MS + i * 100_000)
                               for i in range(500)])  # spread over 2026-12-01
    produce(bootstrap, topic, [Record(None, json.dumps({"id": f"d2-{i}"}).encode(), i % 2,
                                      BASE_MS + 24 * hour_ms + i * 1000) for i in range(300)])
    out = tmp_path / "out"
    out.mkdir()
    spec = kafka_spec(out, bootstrap, topic, replicas=2, start=None, end="latest")
    spec["input"].update(sources=[{"name": "daily", "path": str(tmp_path / "data") + "/{{YYYY}}{{MM}}{{DD}}/",
                                   "format": "jsonl"}],
                         time_range={"start": "2026-12-01", "end": "2026-12-01"})
    del spec["input"]["kafka"]["start"]
    status = client.wait(client.submit(spec), timeout=120)
    assert status.job.state == "succeeded", status.job
    assert status.data.kafka.start == "2026-12-02T00:00:00+00:00"
    read = ids_read(out)
    assert sorted(read) == sorted([f"d1-{i}" for i in range(500)] + [f"d2-{i}" for i in range(300)])


def test_a_resubmitted_job_resumes_from_its_offsets(client, kafka_broker, tmp_path):
    bootstrap, topic = kafka_broker.bootstrap, unique_topic()
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, records("o", 6_000, 3))
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()

    def spec_for(out: Path) -> dict[str, Any]:
        spec = kafka_spec(out, bootstrap, topic)  # start: earliest, which the journal overrides
        spec["input"]["work_preserve_dir"] = str(tmp_path / "preserve")
        return spec

    app = client.submit(spec_for(first))
    wait_for(lambda: len(ids_read(first)) >= 6_000, 60, "the first records")
    wait_for(lambda: client.status(app).data.kafka.lag == 0, 30, "positions confirmed")
    client.kill(app)
    assert client.wait(app, timeout=60).job.state == "killed"
    produce(bootstrap, topic, records("n", 3_000, 3))
    app = client.submit(spec_for(second))
    wait_for(lambda: {f"n{i}" for i in range(3_000)} <= set(ids_read(second)), 60, "the new records")
    client.kill(app)
    assert sorted(ids_read(second)) == sorted(f"n{i}" for i in range(3_000))  # nothing read twice


def test_an_unreachable_broker_or_a_missing_topic_fails_the_job_saying_so(client, kafka_broker, out):
    spec = kafka_spec(out, "127.0.0.1:1", "clicks", connect_timeout=2)
    status = client.wait(client.submit(spec), timeout=60)
    assert status.job.state == "failed"
    assert "cannot reach the brokers 127.0.0.1:1 (kafka.bootstrap_servers) within 2 s" in status.job.reason
    spec = kafka_spec(out, kafka_broker.bootstrap, "no-such-topic")
    status = client.wait(client.submit(spec), timeout=60)
    assert status.job.state == "failed"
    assert "kafka.topics: topic 'no-such-topic' does not exist" in status.job.reason


def test_scaling_up_spreads_the_partitions_and_secrets_stay_masked(client, kafka_broker, out):
    bootstrap, topic = kafka_broker.bootstrap, unique_topic()
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, records("u", 8_000, 4))
    spec = kafka_spec(out, bootstrap, topic, replicas=1, env={"SLEEP_EVERY": "200", "SLEEP": "0.05"},
                      consumer_config={"ssl.key.password": "hunter2-secret", "client.id": "primus-test"})
    app = client.submit(spec)
    wait_for(lambda: ids_read(out), 30, "a first record")
    client.scale(app, "worker", 2)

    def spread() -> bool:
        holders = [p.holder for p in client.status(app).data.kafka.partitions]
        return None not in holders and len(set(holders)) == 2 and all(holders.count(h) == 2 for h in holders)

    wait_for(spread, 60, "two partitions per worker")
    wait_for(lambda: {f"u{i}" for i in range(8_000)} <= set(ids_read(out)), 60, "every record")
    read = ids_read(out)
    assert len(read) == len(set(read))  # a revoked partition is handed over where its trainer stopped
    status = client.status(app)
    assert "hunter2" not in status.model_dump_json() and status.data.kafka.consumer_config == {
        "ssl.key.password": "***", "client.id": "primus-test"}
    client.kill(app)
    client.wait(app, timeout=60)
    job_dir = client.cluster("local").job(app).path
    leaked = [str(p) for p in job_dir.rglob("*.log") if b"hunter2" in p.read_bytes()]
    assert not leaked


def test_a_producer_burst_scales_the_role_up_and_drained_lag_scales_it_down(client, kafka_broker, out):
    bootstrap, topic = kafka_broker.bootstrap, unique_topic()
    create_topic(bootstrap, topic, 4)
    # Each trainer reads about 2,000 records a second; the burst is 20,000 records.
    spec = kafka_spec(out, bootstrap, topic, replicas=1, env={"SLEEP_EVERY": "200", "SLEEP": "0.1"})
    spec["roles"][0]["autoscale"] = {"min_replicas": 1, "max_replicas": 3, "target_lag": 2000,
                                     "cooldown": "2s", "interval": "0.5s"}
    app = client.submit(spec)
    wait_for(lambda: client.status(app).job.state == "running", 30, "the job running")
    produce(bootstrap, topic, records("b", 20_000, 4))
    expected = {f"b{i}" for i in range(20_000)}
    wait_for(lambda: expected <= set(ids_read(out)), 120, "every record of the burst")

    def scaled_down() -> list[EventView] | None:
        status = client.status(app)
        events = [e for e in status.events if e.subject == "role/worker" and e.actor == "autoscaler"]
        return events if status.roles[0].replicas == 1 and len(events) >= 2 else None

    events = wait_for(scaled_down, 60, "the role back at min once the lag drained")
    sizes = [(int(e.from_state), int(e.to_state)) for e in events]
    assert sizes[0] == (1, 3), sizes  # lag 20,000 > 3 x 2,000: straight to max
    assert re.fullmatch(r"backlog [\d,]+ records of lag > 1 x 2,000 per replica: 1 -> 3 \(wants \d+, max 3\)",
                        events[0].reason), events[0]
    assert all(1 <= to <= 3 for _, to in sizes) and sizes[-1][1] == 1, sizes
    times = [e.time for e in events]
    assert all(b - a >= 2 for a, b in zip(times, times[1:], strict=False)), times  # the cooldown
    read = ids_read(out)
    assert set(read) == expected
    client.kill(app)


def test_the_kafka_example_trains_on_the_topic(client, kafka_broker, tmp_path):
    example = Path(__file__).resolve().parents[2] / "examples" / "kafka_stream"
    topic = unique_topic("clicks")
    subprocess.run([sys.executable, str(example / "produce.py"), kafka_broker.bootstrap, topic, "30000"], check=True,
                   timeout=120, capture_output=True)
    spec = load_spec(example / "job.yaml").model_dump(mode="json", exclude_unset=True)
    spec["input"]["kafka"].update(bootstrap_servers=kafka_broker.bootstrap, topics=[topic])
    spec["input"]["work_preserve_dir"] = str(tmp_path / "progress")
    for role in spec["roles"]:
        role["command"] = f"{sys.executable} {example / 'trainer.py'}"
        role.pop("files", None)
        role.pop("autoscale", None)  # a slow machine must not stop a worker mid-count
    app = client.submit(spec)
    status = client.wait(app, timeout=120)
    assert status.job.state == "succeeded", status.job
    summaries = [json.loads(read_log(client, app, "worker", e.index).strip().splitlines()[-1])
                 for e in status.executors if e.state == "succeeded"]
    assert sum(s["records"] for s in summaries) == 30_000


def test_a_broker_lost_while_running_is_reported_and_reading_resumes_when_it_is_back(client, tmp_path, out):
    # Its own broker: the session's must not stop under other tests.
    directory = tmp_path / "kafka"
    try:
        broker = start_broker(directory)
        topic = unique_topic()
        create_topic(broker.bootstrap, topic, 2)
        produce(broker.bootstrap, topic, records("x", 2_000, 2))
        app = client.submit(kafka_spec(out, broker.bootstrap, topic, replicas=2))
        wait_for(lambda: len(ids_read(out)) >= 2_000, 60, "the first records")
        stop_broker(directory)
        status = wait_for(lambda: (s := client.status(app)).data.kafka.unreachable_since and s, 60,
                          "the brokers reported unreachable")
        assert status.job.state == "running" and status.data.kafka.reachable is False
        assert any(e.to_state == "unreachable" and broker.bootstrap in e.reason for e in status.events)
        start_broker(directory)
        produce(broker.bootstrap, topic, records("y", 1_000, 2))
        expected = {f"x{i}" for i in range(2_000)} | {f"y{i}" for i in range(1_000)}
        wait_for(lambda: expected <= set(ids_read(out)), 90, "the records produced after the restart")
        status = wait_for(lambda: (s := client.status(app)).data.kafka.reachable and s, 30, "reachable")
        assert any(e.to_state == "reachable" for e in status.events)
        client.kill(app)
        client.wait(app, timeout=60)
    finally:
        stop_broker(directory)


def test_exactly_once_across_a_killed_and_resubmitted_job(client, kafka_broker, tmp_path):
    bootstrap, topic = kafka_broker.bootstrap, unique_topic()
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, records("z", 8_000, 2))
    committed: list[str] = []
    for run in ("first", "second"):
        out = tmp_path / run
        out.mkdir()
        spec = kafka_spec(out, bootstrap, topic, replicas=2, end="latest",
                          env={"COMMIT_EVERY": "500", "SLEEP_EVERY": "250", "SLEEP": "0.05"})
        spec["input"].update(delivery="exactly_once", work_preserve_dir=str(tmp_path / "preserve"))
        app = client.submit(spec)
        if run == "first":  # killed once its trainers committed some of the stream
            wait_for(lambda out=out: len(list(out.glob("batch-*"))) >= 4, 60, "a few checkpoints")
            client.kill(app)
            assert client.wait(app, timeout=60).job.state == "killed"
        else:
            status = client.wait(app, timeout=120)
            assert status.job.state == "succeeded", status.job
            restored = {f.read_text() for f in out.glob("restore-*")}
            assert "none" not in restored  # each worker restored the checkpoint its slot committed
        committed += committed_ids(client, app, out)
    assert sorted(committed) == sorted(f"z{i}" for i in range(8_000))  # over both jobs, each record once


def test_an_am_killed_mid_stream_keeps_its_executors_and_their_partitions(client, kafka_broker, out):
    bootstrap, topic = kafka_broker.bootstrap, unique_topic()
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, records("m", 6_000, 2))
    spec = kafka_spec(out, bootstrap, topic, replicas=2, env={"SLEEP_EVERY": "300", "SLEEP": "0.05"})
    spec["am"].update(max_attempts=2, recovery_grace="30s")
    app = client.submit(spec)
    before = wait_for(lambda: (s := client.status(app)).data is not None and s.data.records_done >= 1_000 and s,
                      60, "records read")
    holders = {p.partition: p.holder for p in before.data.kafka.partitions}
    os.kill(int(json.loads(client.cluster("local").job(app).am_info.read_text())["pid"]), signal.SIGKILL)
    produce(bootstrap, topic, records("n", 2_000, 2))
    expected = {f"m{i}" for i in range(6_000)} | {f"n{i}" for i in range(2_000)}
    wait_for(lambda: expected <= set(ids_read(out)), 120, "every record, across the AM's restart")
    status = wait_for(lambda: (s := client.status(app)).data.kafka.lag == 0 and s, 30, "no lag")
    assert [a.adopted for a in status.job.am_attempts] == [2]
    assert {p.partition: p.holder for p in status.data.kafka.partitions} == holders
    read = ids_read(out)
    assert len(read) == len(set(read)), "records read twice"
    client.kill(app)
