"""Property: whatever a token holder sends to any endpoint, the AM answers 2xx or 4xx, keeps
running, and junk leaves the job as it was (a live executor's heartbeats keep working)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from conftest import make_spec
from primus_runtime import models, protocol
from primus_runtime.am.master import ApplicationMaster
from primus_runtime.am.openapi import OPERATIONS
from primus_runtime.am.server import build_app
from primus_runtime.spec import JobSpec
from simulated_backend import SimulatedBackend

TOKEN = "t"
AUTH = {"Authorization": "Bearer " + TOKEN}
INTS = st.one_of(st.integers(-10, 10), st.integers(), st.integers(min_value=2**63, max_value=2**200).map(lambda n: -n))
SCALARS = st.one_of(st.none(), st.booleans(), INTS, st.floats(allow_nan=False), st.text(max_size=20))
JUNK = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=4), max_leaves=12)


def maybe_junk(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(valid, JUNK)


def shaped(incarnations: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Bodies shaped like executor messages: the right fields, with right or wrong values."""
    task_ids = st.text(max_size=8)
    position = st.fixed_dictionaries({}, optional={"records": maybe_junk(INTS), "bytes": maybe_junk(INTS)})
    return st.fixed_dictionaries({"incarnation": maybe_junk(incarnations)}, optional={
        "id": maybe_junk(st.text(max_size=10)), "host": maybe_junk(st.text(max_size=10)),
        "ports": maybe_junk(st.lists(INTS, max_size=3)), "pid": maybe_junk(INTS), "gpus": maybe_junk(st.lists(INTS)),
        "state": maybe_junk(st.sampled_from(["registered", "running", "lost"])),
        "cluster_version": maybe_junk(INTS), "wait": st.just(False), "ready": maybe_junk(st.booleans()),
        "need_tasks": maybe_junk(INTS), "held": maybe_junk(st.lists(task_ids, max_size=3)),
        "progress": maybe_junk(st.dictionaries(task_ids, maybe_junk(position), max_size=3)),
        "done": maybe_junk(st.lists(task_ids, max_size=3)),
        "failed": maybe_junk(st.dictionaries(task_ids, maybe_junk(st.text(max_size=10)), max_size=3)),
        "commit": maybe_junk(st.fixed_dictionaries({}, optional={"checkpoint": maybe_junk(st.text(max_size=5)),
                                                                 "records": maybe_junk(INTS)})),
        "exit_code": maybe_junk(INTS), "message": maybe_junk(st.text(max_size=10)),
        "reason": maybe_junk(st.text(max_size=10)), "replicas": maybe_junk(INTS), "dir": maybe_junk(st.text()),
    })


def encoded(body: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    return body.map(lambda value: json.dumps(value).encode())


class LiveJob:
    """An AM on the simulated backend with one running executor, played by the test."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        spec = JobSpec.from_dict(make_spec([{"name": "worker", "command": "x"}],
                                           am={"heartbeat_timeout": "600s"}))  # the fuzzing may take a while
        self.am = ApplicationMaster(spec, "app", SimulatedBackend())
        self.http = TestClient(TestServer(build_app(self.am, TOKEN)), loop=self.loop)
        self.run(self._start())

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    async def _start(self) -> None:
        await self.am.start("127.0.0.1:1")
        await self.http.start_server()
        self.incarnation = self.am.record.executors["worker-0"].incarnation
        await self.send(protocol.REGISTER_PATH, {"incarnation": self.incarnation, "host": "h", "ports": [1]})
        reply = await self.send(protocol.HEARTBEAT_PATH, {"incarnation": self.incarnation, "state": "registered",
                                                          "wait": True})
        assert reply["command"] == protocol.CMD_START
        await self.beat()

    async def send(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.http.post(path, json=body, headers=AUTH)
        assert response.status == 200, await response.text()
        return await response.json()

    async def beat(self) -> None:
        """The live executor's heartbeat: answered, and with nothing to do."""
        body = {"id": "worker-0", "incarnation": self.incarnation, "state": "running",
                "cluster_version": self.am.record.cluster_version, "wait": False}
        reply = await self.send(protocol.HEARTBEAT_PATH, body)
        assert models.HeartbeatReply.model_validate(reply).command is models.Command.NONE

    def snapshot(self) -> tuple[Any, ...]:
        record = self.am.record
        return record.summary(), record.roles_view(), record.executors_view(), len(record.events)

    def close(self) -> None:
        self.run(self.http.close())
        self.run(self.am.close())
        self.loop.close()


@pytest.fixture(scope="module")
def live() -> Iterator[LiveJob]:
    job = LiveJob()
    yield job
    job.close()


ROUTES = [(op.method.upper(), op.path, op.body) for op in OPERATIONS]
QUERY = st.dictionaries(st.sampled_from(["events", "since", "role", "history"]) | st.text(max_size=5),
                        st.sampled_from(["1", "0", "-1", "true", "abc", "", "1e9", str(2**70), "worker"]) | st.text(),
                        max_size=3)
#: Requests that would legitimately change the job when valid: only invalid bodies are sent there.
MUTATING = {"/job/kill", "/job/succeed", "/roles/{role}/scale"}
REQUESTS_OF_EXECUTORS = {protocol.REGISTER_PATH, protocol.HEARTBEAT_PATH, protocol.UNREGISTER_PATH}


def _valid(model: type[BaseModel] | None, raw: bytes) -> bool:
    try:
        if model is not None:
            model.model_validate_json(raw or b"{}")
        return model is not None
    except ValidationError:
        return False


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(route=st.sampled_from(ROUTES), role=st.sampled_from(["worker", "ghost"]) | st.text(min_size=1, max_size=5),
       query=QUERY, data=st.data())
def test_any_request_gets_2xx_or_4xx_and_junk_changes_nothing(live, route, role, query, data):
    method, path, body_model = route
    live_or_not = st.sampled_from([live.incarnation, "stale"]) | st.text(max_size=12)
    raw = data.draw(st.one_of(encoded(JUNK), encoded(shaped(live_or_not)), st.binary(max_size=40)), "body")
    touches_live = live.incarnation.encode() in raw and path in REQUESTS_OF_EXECUTORS
    if path.removeprefix(protocol.API_PREFIX) in MUTATING or touches_live:
        assume(not _valid(body_model, raw))
    before = live.snapshot()
    url = path.replace("{role}", role) + ("?" + urlencode(query) if query else "")

    async def call() -> tuple[int, Any]:
        response = await live.http.request(method, url, data=raw if method == "POST" else None, headers=AUTH)
        return response.status, await response.read()

    status, reply = live.run(call())
    assert status < 500, (method, url, raw, reply)
    if status >= 400:
        assert "error" in json.loads(reply)
    if not touches_live or status >= 400:
        assert live.snapshot() == before
    live.run(live.beat())
