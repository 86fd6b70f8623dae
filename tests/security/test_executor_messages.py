"""Forged and replayed executor messages: a real AM in-process on the simulated backend, with an
input of small tasks, and two executors played by the test over the real protocol. Only the live
incarnation of an executor may change its state or its tasks; everything else changes nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from conftest import make_spec
from primus_runtime import protocol
from primus_runtime.am.master import ApplicationMaster
from primus_runtime.am.server import build_app
from primus_runtime.spec import JobSpec
from simulated_backend import SimulatedBackend

TOKEN = "t"
AUTH = {"Authorization": "Bearer " + TOKEN}
TASK_BYTES = 64


class Job:
    """The AM, its API, and the live incarnation of each executor (``worker-0``, ``worker-1``)."""

    def __init__(self, am: ApplicationMaster, http: TestClient):
        self.am = am
        self.http = http
        self.incarnations: dict[str, str] = {}

    async def post(self, path: str, body: Any, status: int = 200) -> dict[str, Any]:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = await self.http.post(path, data=raw, headers={**AUTH, "Content-Type": "application/json"})
        reply = await response.json()
        assert response.status == status, reply
        return reply

    async def get(self, path: str) -> dict[str, Any]:
        response = await self.http.get(protocol.API_PREFIX + path, headers=AUTH)
        assert response.status == 200
        return await response.json()

    async def start(self, *executor_ids: str) -> None:
        """Register the executors' current incarnations and take their start commands, as executors do."""
        for executor_id in executor_ids:
            incarnation = self.am.record.executors[executor_id].incarnation
            self.incarnations[executor_id] = incarnation
            registered = await self.post(protocol.REGISTER_PATH, {"id": executor_id, "incarnation": incarnation,
                                                                  "host": "127.0.0.1", "ports": [1000], "pid": 7})
            assert registered["ok"] is True
        for executor_id in executor_ids:
            for _ in range(50):  # each long poll lasts at most a heartbeat interval
                reply = await self.beat(executor_id, state="registered", wait=True)
                if reply["command"] == protocol.CMD_START:
                    break
            assert reply["command"] == protocol.CMD_START, reply

    async def beat(self, executor_id: str, incarnation: str | None = None, **report: Any) -> dict[str, Any]:
        body = {"id": executor_id, "incarnation": incarnation or self.incarnations[executor_id], "state": "running",
                "cluster_version": self.am.record.cluster_version, **report}
        return await self.post(protocol.HEARTBEAT_PATH, body)

    async def take_tasks(self, executor_id: str, count: int) -> list[str]:
        reply = await self.beat(executor_id, need_tasks=count, held=[])
        return [task["task_id"] for task in reply.get("tasks", ())]

    async def tasks(self) -> dict[str, dict[str, Any]]:
        """Every task as the task table shows it, by id."""
        page = await self.get("/data/tasks?limit=1000")
        return {task["id"]: task for task in page["tasks"]}

    async def executors(self) -> dict[str, dict[str, Any]]:
        return {ex["id"]: ex for ex in (await self.get("/executors"))["executors"]}


Scenario = Callable[[Job], Awaitable[None]]


async def _play(data_dir: Path, scenario: Scenario) -> None:
    (data_dir / "input.txt").write_bytes(b"\n" * (20 * TASK_BYTES))
    spec = JobSpec.from_dict(make_spec(
        [{"name": "worker", "replicas": 2, "command": "x", "consumes_input": True}],
        am={"heartbeat_timeout": "600s"},
        input={"sources": [{"name": "in", "path": str(data_dir), "success_marker": None}],
               "task_size": f"{TASK_BYTES}B", "max_tasks_per_executor": 2}))
    am = ApplicationMaster(spec, "app", SimulatedBackend())
    await am.start("127.0.0.1:1")
    try:
        async with TestClient(TestServer(build_app(am, TOKEN))) as http:
            job = Job(am, http)
            for _ in range(200):  # the AM lists the input in the background
                if (await job.get("/data"))["scan_complete"]:
                    break
                await asyncio.sleep(0.05)
            await job.start("worker-0", "worker-1")
            await scenario(job)
    finally:
        await am.close()


@pytest.fixture
def play(tmp_path: Path) -> Callable[[Scenario], None]:
    """Runs a scenario against a fresh job whose two executors run."""
    return lambda scenario: asyncio.run(_play(tmp_path, scenario))


async def _restarted(job: Job, executor_id: str) -> str:
    """Restart an executor as a user would; its old incarnation (returned) exits and is a zombie."""
    old = job.incarnations[executor_id]
    await job.http.post(f"{protocol.API_PREFIX}/executors/{executor_id}/restart", json={}, headers=AUTH)
    await job.post(protocol.UNREGISTER_PATH, {"id": executor_id, "incarnation": old, "exit_code": -15})
    await job.start(executor_id)
    assert job.incarnations[executor_id] != old
    return old


def test_a_zombie_incarnation_is_told_to_die_and_changes_nothing(play: Callable[[Scenario], None]) -> None:
    async def scenario(job: Job) -> None:
        mine = await job.take_tasks("worker-0", 2)
        zombie = await _restarted(job, "worker-0")
        taken = await job.take_tasks("worker-0", 2)  # the new incarnation re-reads them
        assert set(taken) == set(mine)
        before = await job.tasks(), await job.executors()

        reply = await job.beat("worker-0", zombie, need_tasks=5, done=mine, held=mine,
                               progress={task: {"records": 9, "bytes": 9} for task in mine},
                               failed={task: "forged" for task in mine}, reading=mine[0])
        assert reply["command"] == protocol.CMD_KILL and "tasks" not in reply
        await job.post(protocol.UNREGISTER_PATH, {"id": "worker-0", "incarnation": zombie, "exit_code": 1})
        assert await job.post(protocol.REGISTER_PATH, {"id": "worker-0", "incarnation": zombie, "host": "evil",
                                                       "ports": [2]}) == {
            "ok": False, "command": protocol.CMD_KILL, "reason": "unknown or stale incarnation"}

        assert (await job.tasks(), await job.executors()) == before
        assert (await job.executors())["worker-0"]["state"] == "running"
        assert (await job.beat("worker-0"))["command"] == protocol.CMD_NONE

    play(scenario)


def test_a_forged_incarnation_cannot_register_or_heartbeat(play: Callable[[Scenario], None]) -> None:
    async def scenario(job: Job) -> None:
        mine = await job.take_tasks("worker-0", 2)
        before = await job.tasks(), await job.executors()
        forged = {"id": "worker-0", "role": "worker", "index": 0, "incarnation": "forged-1234"}

        registered = await job.post(protocol.REGISTER_PATH, {**forged, "host": "evil", "ports": [2]})
        assert registered["ok"] is False and registered["command"] == protocol.CMD_KILL
        beat = await job.beat("worker-0", "forged-1234", need_tasks=5, done=mine, held=[])
        assert beat["command"] == protocol.CMD_KILL and "tasks" not in beat

        assert (await job.tasks(), await job.executors()) == before
        assert (await job.beat("worker-0"))["command"] == protocol.CMD_NONE

    play(scenario)


def test_a_replayed_register_does_not_reset_a_running_executor(play: Callable[[Scenario], None]) -> None:
    async def scenario(job: Job) -> None:
        await job.take_tasks("worker-0", 2)
        before = await job.tasks(), await job.executors()
        version = job.am.record.cluster_version

        await job.post(protocol.REGISTER_PATH, {"id": "worker-0", "incarnation": job.incarnations["worker-0"],
                                                "host": "evil", "ports": [2], "pid": 8})

        assert (await job.tasks(), await job.executors()) == before
        assert job.am.record.cluster_version == version
        assert (await job.beat("worker-0"))["command"] == protocol.CMD_NONE

    play(scenario)


def test_a_report_naming_another_executors_tasks_changes_nothing(play: Callable[[Scenario], None]) -> None:
    async def scenario(job: Job) -> None:
        theirs = await job.take_tasks("worker-0", 2)
        assert theirs
        before = await job.tasks()

        await job.beat("worker-1", done=theirs, held=theirs, reading=theirs[0],
                       progress={task: {"records": 5, "bytes": 50} for task in theirs},
                       failed={task: "not mine" for task in theirs})

        assert await job.tasks() == before
        assert all(task["holder"] == "worker-0" and task["state"] == "running"
                   for task_id, task in before.items() if task_id in theirs)

    play(scenario)


@pytest.mark.parametrize("path,body,error", [
    (protocol.REGISTER_PATH, {"host": 7, "ports": "x"},
     "register body: host: should be a valid string, got 7; ports: should be a valid array, got 'x'"),
    (protocol.REGISTER_PATH, {"host": "h" * 100_000}, "register body: host: string should have at most 256 characters, got 'hhhh"),
    (protocol.HEARTBEAT_PATH, {"held": "t1"}, "heartbeat body: held: should be a valid array, got 't1'"),
    (protocol.HEARTBEAT_PATH, {"progress": {"t": {"records": -1}}},
     "heartbeat body: progress.t.records: should be greater than or equal to 0, got -1"),
    (protocol.HEARTBEAT_PATH, {"commit": [[[[[]]]]]}, "heartbeat body: commit: "),
    (protocol.UNREGISTER_PATH, {"exit_code": 2**40}, "unregister body: exit_code: should be less than or equal to"),
])
def test_a_malformed_report_of_the_live_executor_is_a_400_naming_the_field(
        play: Callable[[Scenario], None], path: str, body: dict[str, Any], error: str) -> None:
    async def scenario(job: Job) -> None:
        before = await job.tasks(), await job.executors()
        reply = await job.post(path, {"id": "worker-0", "incarnation": job.incarnations["worker-0"], **body}, 400)
        assert reply["error"].startswith(error), reply
        assert len(reply["error"]) < 2000  # a huge value is not echoed back whole
        assert (await job.tasks(), await job.executors()) == before

    play(scenario)


def test_deeply_nested_json_is_a_400(play: Callable[[Scenario], None]) -> None:
    async def scenario(job: Job) -> None:
        nested = b'{"incarnation": "x", "held": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        reply = await job.post(protocol.HEARTBEAT_PATH, nested, 400)
        assert reply["error"].startswith("heartbeat: request body is not valid JSON"), reply

    play(scenario)
