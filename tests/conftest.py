"""Shared fixtures: a private job home per test and helpers to drive real jobs."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from primus_runtime.backends.local.jobs import processes_of_job
from primus_runtime.client import PrimusClient

# Fast but tolerant of a loaded 2-core CI machine.
FAST_AM = {"heartbeat_interval": 0.25, "heartbeat_timeout": 3.0, "shutdown_grace": 2.0}


def make_spec(roles: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "test", "am": dict(FAST_AM), "roles": copy.deepcopy(roles)}
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key].update(value)
        else:
            spec[key] = value
    return spec


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
             poll: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(poll)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def client(home: Path):
    client = PrimusClient(home)
    yield client
    for job in client.list():  # never leave a test's processes behind
        if processes_of_job(job["app_id"]):
            client.cluster("local").force_kill(job["app_id"])


def executor(status: dict[str, Any], executor_id: str) -> dict[str, Any]:
    for ex in status["executors"]:
        if ex["id"] == executor_id:
            return ex
    raise AssertionError(f"no executor {executor_id} in {[e['id'] for e in status['executors']]}")


def read_log(client: PrimusClient, app_id: str, role: str, index: int, stream: str = "stdout") -> str:
    return b"".join(client.follow_log(app_id, client.log_path(app_id, role, index, stream))).decode()
