"""What scripts/kafka.sh cannot do in bash: pick free ports and tell when the broker is ready.

    probe.py ports N                       N free loopback ports, one per line
    probe.py cluster-id                    a new cluster id, as `StorageTool random-uuid` makes
    probe.py wait BOOTSTRAP PID TIMEOUT    until the broker serves metadata and consumer groups
    probe.py answers BOOTSTRAP             rc 0 if the broker answers a metadata request

`wait` and `answers` need confluent_kafka (the project's venv has it).
"""

from __future__ import annotations

import base64
import random
import socket
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

# Quiet clients that retry fast: readiness is polled, and librdkafka's connection-refused lines
# would fill the start log.
CLIENT_CONFIG = {"log_level": 0, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200}
# Ports below the kernel's ephemeral range: no outgoing connection takes them between a stop and
# the next start on the same DIR, which reuses them.
LOWEST_PORT = 20000


class NotReady(Exception):
    """The broker did not get ready: why, for the start command's message."""


def free_ports(count: int) -> list[int]:
    low, _ = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    candidates = list(range(LOWEST_PORT, low))
    random.shuffle(candidates)
    ports: list[int] = []
    for port in candidates:
        if _bindable(port):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise NotReady(f"no {count} free loopback ports in {LOWEST_PORT}-{low - 1}")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_id() -> str:
    """Kafka's Uuid.randomUuid() as text: a version 4 UUID (so never Kafka's reserved all-zero or
    metadata-topic ids) in URL-safe base64 without padding, never starting with "-" (it would read
    as an option). Made here because asking the StorageTool costs a JVM start (1.4 s of a 9 s
    first start)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _split(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


def accepts_connections(bootstrap: str) -> bool:
    """A TCP connect: refused at once while nothing listens, unlike any Kafka client call."""
    try:
        socket.create_connection(_split(bootstrap), timeout=2).close()
    except OSError:
        return False
    return True


def _alive(pid: int) -> bool:
    """Running and not a zombie: the broker is a child of the start script until it exits."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _until(step: str, check: Callable[[], bool], pid: int, deadline: float) -> None:
    while not check():
        if not _alive(pid):
            raise NotReady(f"the broker (pid {pid}) exited while waiting for {step}")
        if time.monotonic() > deadline:
            raise NotReady(f"timed out waiting for {step}")
        time.sleep(0.1)


def wait_ready(bootstrap: str, pid: int, timeout: float) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    started = time.monotonic()
    deadline = started + timeout
    _until("the listener", lambda: accepts_connections(bootstrap), pid, deadline)
    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_CONFIG})

    def metadata_answered() -> bool:
        try:
            return bool(admin.list_topics(timeout=2).brokers)
        except KafkaException:
            return False

    _until("metadata", metadata_answered, pid, deadline)
    # The group coordinator: on fresh storage __consumer_offsets is created on first use, after a
    # restart it is loading for a moment. Probed with Consumer.committed(): AdminClient's group
    # calls can segfault (librdkafka 2.16) while the coordinator is not ready.
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "__primus_readiness",
                      "enable.auto.commit": False, **CLIENT_CONFIG})

    def coordinator_answered() -> bool:
        try:
            probe.committed([TopicPartition("__primus_readiness", 0)], timeout=2)
        except KafkaException:
            return False
        return True

    try:
        _until("the group coordinator", coordinator_answered, pid, deadline)
    finally:
        probe.close()
    print(f"kafka: broker answered after {time.monotonic() - started:.1f}s", file=sys.stderr)


def answers(bootstrap: str) -> bool:
    if not accepts_connections(bootstrap):
        return False
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        return bool(AdminClient({"bootstrap.servers": bootstrap, **CLIENT_CONFIG}).list_topics(timeout=5).brokers)
    except KafkaException:
        return False


def main(argv: list[str]) -> int:
    match argv:
        case ["ports", count]:
            print("\n".join(map(str, free_ports(int(count)))))
        case ["cluster-id"]:
            print(cluster_id())
        case ["wait", bootstrap, pid, timeout]:
            wait_ready(bootstrap, int(pid), float(timeout))
        case ["answers", bootstrap]:
            return 0 if answers(bootstrap) else 1
        case _:
            print(__doc__, file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except NotReady as exc:
        sys.exit(f"kafka: {exc}")
