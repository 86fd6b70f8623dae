"""Kafka records/s fed into trainers' stdin by Primus, against a bare confluent-kafka consumer loop.

RECORDS JSON lines of 100 B (``{"id": N, "pad": "..."}``, default 1,000,000) are produced into a
topic with 1 partition and, as many again, into one with 2. The consumer process (the trainer) is
the same small program on every side: it reads its stdin in large chunks, counts lines, and writes
its count and the times of its first and last chunk to a file; records/s is measured there (first
record -> last record), so job start-up is excluded.

- bare: a loop in this process, one ``Consumer`` ``assign``ed to offset 0 of the 1-partition topic
  (``fetch.queue.backoff.ms=0`` and the fetch settings in ``BARE_CONFIG``), ``consume(10000)``, the
  values framed as the feed frames JSON (``b"\\n".join(values) + b"\\n"``) and written into the
  trainer's stdin pipe (1 MiB, as the executor makes it) up to the high watermark. One thread, as
  such a loop is written: it does not consume while it writes (the executor's feed does: a reader
  thread per partition, a writer thread).
- primus 1: a local job, 1 worker, ``input.kafka: {start: earliest, end: latest}`` on the
  1-partition topic, the trainer as the worker's command.
- primus 2: the same with 2 workers on the 2-partition topic: the aggregate rate is the total
  records / (last record of either - first record of either). The table also shows the two
  trainers' own rates added up (the aggregate without the gap between their starts).

The three run REPEAT times (default 3), interleaved, each side taking each place in the round in
turn; the next run waits until the last job's processes are gone. Every count is checked. The
last line is the median over rounds of primus 1 / bare and primus 2 / primus 1.

The broker: PRIMUS_KAFKA_BOOTSTRAP if set (the topics are deleted at the end), else one started in a
temporary directory with scripts/kafka.sh (needs Java 17+ and ``scripts/kafka.sh build`` done once)
and stopped at the end. JSON=1 prints each run as a JSON line too.

    python bench/kafka.py          # RECORDS=1000000 REPEAT=3
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from primus_runtime.client import PrimusClient

try:
    from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
except ImportError:
    sys.exit("bench/kafka.py needs confluent-kafka (pip extra 'kafka')")

RECORDS = int(os.environ.get("RECORDS", 1_000_000))
REPEAT = int(os.environ.get("REPEAT", 3))
JSON = bool(os.environ.get("JSON"))
RECORD_BYTES = 100
TIMEOUT = float(os.environ.get("TIMEOUT", 600))
REPO = Path(__file__).resolve().parents[1]
KAFKA_SH = REPO / "scripts" / "kafka.sh"
QUIET = {"log_level": 0}  # librdkafka logs refused connections to stderr otherwise
PIPE_BYTES = 1 << 20  # the executor makes the trainer's stdin pipe this large (feed.PIPE_BYTES)
F_SETPIPE_SZ = 1031
# The bare consumer's settings: no back-off between fetches (librdkafka's default 1 s caps reading at
# ~150k records/s) and up to 1M records fetched ahead (the best of the fetch settings tried on 2 cores:
# the defaults, fetch.max.bytes 64 MiB + max.partition.fetch.bytes 16 MiB, queued.min.messages 1M with
# and without queued.max.messages.kbytes 1 GiB, fetch.wait.max.ms 10). BARE_CONFIG='{...}' adds more.
BARE_CONFIG: dict[str, Any] = {"enable.auto.commit": False, "enable.partition.eof": False,
                               "fetch.queue.backoff.ms": 0, "queued.min.messages": 1_000_000,
                               **json.loads(os.environ.get("BARE_CONFIG", "{}"))}

# The trainer: counts the lines of its stdin; its first and last chunk's times (CLOCK_MONOTONIC, one
# clock for every process of the machine) go to DIR/INDEX.json.
TRAINER = r"""
import json, os, sys, time
records = nbytes = 0
first = last = 0.0
while True:
    chunk = os.read(0, 1 << 20)
    if not chunk:
        break
    last = time.monotonic()
    if not first:
        first = last
    records += chunk.count(b"\n")
    nbytes += len(chunk)
name = os.path.join(sys.argv[1], os.environ.get("PRIMUS_INDEX", "bare") + ".json")
with open(name + ".tmp", "w") as f:
    json.dump({"records": records, "bytes": nbytes, "first": first, "last": last}, f)
os.replace(name + ".tmp", name)
"""


# --- the broker and the topics ---

@contextmanager
def broker() -> Iterator[str]:
    """The bootstrap address of PRIMUS_KAFKA_BOOTSTRAP's broker, else of one started for the run."""
    given = os.environ.get("PRIMUS_KAFKA_BOOTSTRAP")
    if given:
        yield given
        return
    if shutil.which("java") is None:
        sys.exit("bench/kafka.py: no PRIMUS_KAFKA_BOOTSTRAP and no java to start a broker (Java 17+)")
    directory = Path(tempfile.mkdtemp(prefix="primus-bench-kafka-"))
    started = subprocess.run([str(KAFKA_SH), "start", str(directory)], capture_output=True, text=True)
    try:
        if started.returncode != 0:
            sys.exit(f"bench/kafka.py: scripts/kafka.sh start {directory} failed (was `scripts/kafka.sh build` "
                     f"run?):\n{started.stderr.strip()[-1500:]}")
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([str(KAFKA_SH), "stop", str(directory)], capture_output=True)
        shutil.rmtree(directory, ignore_errors=True)


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    client.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30)[name].result(timeout=30)
    deadline = time.monotonic() + 30
    while True:  # until every partition has a leader, so that the producer finds them
        topic = client.list_topics(name, timeout=10).topics[name]
        if topic.error is None and len(topic.partitions) == partitions and \
                all(p.leader >= 0 for p in topic.partitions.values()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name}: {partitions} partitions with leaders never appeared")
        time.sleep(0.1)


def delete_topics(bootstrap: str, names: list[str]) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for future in client.delete_topics(names, operation_timeout=30).values():
        try:
            future.result(timeout=30)
        except KafkaException as exc:
            print(f"could not delete a bench topic: {exc}", file=sys.stderr)


def record(i: int) -> bytes:
    """A JSON document of exactly RECORD_BYTES bytes with its id."""
    head = f'{{"id": {i}, "pad": "'.encode()
    return head + b"x" * (RECORD_BYTES - len(head) - 2) + b'"}'


def produce(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    """``count`` records round-robin over the partitions; raises unless every one is delivered."""
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000, "acks": 1, **QUIET})
    for i in range(count):
        while True:
            try:
                producer.produce(topic, record(i), partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
    left = producer.flush(120)
    if failed or left:
        raise KafkaException(f"{topic}: {len(failed)} records failed ({failed[:1]}), {left} undelivered")


# --- the trainer's measurements ---

def trainer_command(out: Path) -> list[str]:
    return [sys.executable, "-c", TRAINER, str(out)]


def rate(out: Path, expect: int, what: str) -> float:
    """Records/s over every trainer's file in ``out``: all records / (last record of any - first of any)."""
    results = [json.loads(f.read_text()) for f in sorted(out.glob("*.json"))]
    records = sum(r["records"] for r in results)
    if records != expect:
        raise AssertionError(f"{what}: the trainers counted {records} records, expected {expect}")
    seconds = max(r["last"] for r in results) - min(r["first"] for r in results)
    if seconds <= 0:
        raise ValueError(f"{what}: RECORDS={RECORDS} arrived in one read, which cannot be timed: take more")
    return records / seconds


def sum_of_each(out: Path) -> float:
    """The trainers' own rates added up: the aggregate without the gap between their starts."""
    results = [json.loads(f.read_text()) for f in out.glob("*.json")]
    return sum(r["records"] / (r["last"] - r["first"]) for r in results if r["last"] > r["first"])


def fresh(out: Path) -> Path:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return out


# --- the sides ---

def bare(bootstrap: str, topic: str, out: Path) -> float:
    """The bare loop: one assigned consumer in this process writing framed values into the trainer."""
    fresh(out)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-bare-{uuid.uuid4().hex[:8]}",
                         **QUIET, **BARE_CONFIG})
    proc = subprocess.Popen(trainer_command(out), stdin=subprocess.PIPE, start_new_session=True)
    assert proc.stdin is not None
    try:
        fd = proc.stdin.fileno()
        try:
            import fcntl
            fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass  # a smaller pipe than the executor's: only if the system refuses
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        position, deadline = 0, time.monotonic() + TIMEOUT
        while position < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"bare: read {position} of {end} records in {TIMEOUT:.0f}s")
            messages = consumer.consume(10_000, 0.2)
            if not messages:
                continue
            # Every record has a value (no tombstones here); map: no Python frame per message.
            values = cast("list[bytes]", list(map(Message.value, messages)))
            block = memoryview(b"\n".join(values) + b"\n")
            while block:
                block = block[os.write(fd, block):]
            position = cast(int, messages[-1].offset()) + 1
        proc.stdin.close()
        if proc.wait(TIMEOUT) != 0:
            raise RuntimeError(f"bare: the trainer exited {proc.returncode}")
    finally:
        consumer.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return rate(out, RECORDS, "bare")


def primus(client: PrimusClient, home: Path, bootstrap: str, topic: str, workers: int, out: Path) -> float:
    """A local job of ``workers`` trainers reading the topic from its start to its end (``home``: the
    client's)."""
    fresh(out)
    spec = {
        "name": "bench-kafka",
        "am": {"heartbeat_interval": 0.25, "heartbeat_timeout": 10.0, "shutdown_grace": 2.0},
        "roles": [{"name": "worker", "replicas": workers, "consumes_input": True,
                   "command": trainer_command(out), "resources": {"cpu": 0.5, "memory": "256Mi"}}],
        "input": {"kafka": {"bootstrap_servers": bootstrap, "topics": [topic], "start": "earliest",
                            "end": "latest", "group_id": f"bench-primus-{uuid.uuid4().hex[:8]}"}},
    }
    app = client.submit(spec)
    status = client.wait(app, timeout=TIMEOUT)
    if status.job.state != "succeeded":
        raise RuntimeError(f"primus {workers}: job {app} ended {status.job.state}: "
                           f"{status.job.reason}")
    wait_until_gone(str(home))
    return rate(out, RECORDS, f"primus {workers}")


def wait_until_gone(marker: str, timeout: float = 30) -> None:
    """Until no process has ``marker`` in its command line: the AM and its fork server outlive the
    job's end by a second or so, which the next run would share the CPUs with."""
    deadline = time.monotonic() + timeout
    needle = marker.encode()
    while time.monotonic() < deadline:
        alive = False
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    alive = needle in f.read()
            except OSError:
                continue
            if alive:
                break
        if not alive:
            return
        time.sleep(0.1)


# --- the run ---

def thousands(value: float) -> str:
    return f"{value / 1000:.0f}k"


def main() -> None:
    names = {1: f"bench-kafka-1p-{uuid.uuid4().hex[:8]}", 2: f"bench-kafka-2p-{uuid.uuid4().hex[:8]}"}
    with broker() as bootstrap, tempfile.TemporaryDirectory(prefix="primus-bench-kafka-") as tmp:
        try:
            for partitions, name in names.items():
                create_topic(bootstrap, name, partitions)
                started = time.perf_counter()
                produce(bootstrap, name, partitions, RECORDS)
                print(f"produced {RECORDS:,} records of {RECORD_BYTES} B into {name} ({partitions} partition(s)) "
                      f"in {time.perf_counter() - started:.1f}s", flush=True)
            home = Path(tmp) / "home"
            client = PrimusClient(home)
            out = Path(tmp) / "out"
            sides: dict[str, list[float]] = {"bare": [], "primus 1": [], "primus 2": [], "primus 2 each": []}
            print(f"{'round':>5} {'bare 1p':>12} {'primus 1x1p':>12} {'primus 2x2p':>12} {'(sum of each)':>13}  "
                  f"records/s", flush=True)
            runs = {"bare": lambda: bare(bootstrap, names[1], out),
                    "primus 1": lambda: primus(client, home, bootstrap, names[1], 1, out),
                    "primus 2": lambda: primus(client, home, bootstrap, names[2], 2, out)}
            order = list(runs)
            for run in range(REPEAT):
                for side in order[run % 3:] + order[:run % 3]:  # each side takes each place in turn
                    sides[side].append(runs[side]())
                    if side == "primus 2":
                        sides["primus 2 each"].append(sum_of_each(out))
                print(f"{run + 1:>5} " + " ".join(f"{s[-1]:>12,.0f}" for s in sides.values()), flush=True)
                if JSON:
                    print(json.dumps({"bench": "kafka", "round": run + 1, "records": RECORDS,
                                      **{k.replace(" ", "_"): round(v[-1]) for k, v in sides.items()}}), flush=True)
        finally:
            delete_topics(bootstrap, list(names.values()))
    medians = {name: statistics.median(rates) for name, rates in sides.items()}
    print(f"{'median':>5} " + " ".join(f"{m:>12,.0f}" for m in medians.values()), flush=True)
    one = statistics.median(p / b for p, b in zip(sides["primus 1"], sides["bare"], strict=True))
    two = statistics.median(p2 / p1 for p2, p1 in zip(sides["primus 2"], sides["primus 1"], strict=True))
    print(f"kafka: 1 executor {one:.2f}x bare consumer ({thousands(medians['primus 1'])} vs "
          f"{thousands(medians['bare'])} records/s), 2 executors {two:.2f}x one")


if __name__ == "__main__":
    main()
