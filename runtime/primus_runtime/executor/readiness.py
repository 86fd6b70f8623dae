"""Readiness probes: when a started trainer counts as ready (the role's ``readiness.probe``).

Standard library only. ``spawned``: at once; ``ports``: once every reserved port accepts a TCP
connection on the executor's advertised host or on loopback; ``file``: once the trainer created
the file named by ``PRIMUS_READY_FILE``.
"""

from __future__ import annotations

import os
import socket

# How often a trainer that is not ready yet is probed.
PROBE_PERIOD = 0.1


class ReadinessProbe:
    def __init__(self, kind: str, ports: list[int], host: str, ready_file: str):
        if kind not in ("spawned", "ports", "file"):
            raise ValueError(f"unknown readiness probe {kind!r}")
        self.kind = kind
        self.ports = ports
        self.hosts = list(dict.fromkeys([host, "127.0.0.1"]))
        self.ready_file = ready_file
        self.ready = kind == "spawned"
        self._accepting: set[int] = set()

    def check(self) -> bool:
        """Whether the trainer is ready (probing it again unless it already was)."""
        if not self.ready:
            self.ready = os.path.exists(self.ready_file) if self.kind == "file" else self._ports_accept()
        return self.ready

    def _ports_accept(self) -> bool:
        for port in self.ports:
            if port not in self._accepting and any(_accepts(host, port) for host in self.hosts):
                self._accepting.add(port)
        return len(self._accepting) == len(self.ports)


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=PROBE_PERIOD):
            return True
    except OSError:
        return False
