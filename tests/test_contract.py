"""The contract: what the executor (standard library only) sends is what the AM's models read, the
OpenAPI document is generated from those models, and the states have one spelling."""

from __future__ import annotations

import sys
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from primus_runtime import models, protocol
from primus_runtime.am.openapi import OPERATIONS, openapi_document
from primus_runtime.executor.main import Config, Executor
from primus_runtime.states import ExecutorState, JobState

REQUESTS: dict[str, type[BaseModel]] = {
    protocol.REGISTER_PATH: models.RegisterRequest,
    protocol.HEARTBEAT_PATH: models.HeartbeatRequest,
    protocol.UNREGISTER_PATH: models.UnregisterRequest,
}
REPLIES: dict[str, type[BaseModel]] = {
    protocol.REGISTER_PATH: models.RegisterReply,
    protocol.HEARTBEAT_PATH: models.HeartbeatReply,
    protocol.UNREGISTER_PATH: models.UnregisterReply,
}
TRAINER = """
import os, sys
records = sum(1 for _ in sys.stdin.buffer)
with open(os.environ["PRIMUS_DATA_COMMIT_FILE"], "a") as f:
    f.write('{"checkpoint": "ckpt-1", "records": %d}\\n' % records)
"""


class ScriptedAM:
    """Plays the AM for a real executor run: start with exactly-once input, one task, then exhausted.
    Records every message; checks every reply it gives against the reply models."""

    def __init__(self, task_file: Path):
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.task = {"task_id": "t0", "url": str(task_file), "format": "text", "compression": "none",
                     "start": 0, "end": task_file.stat().st_size, "skip": 0}
        self.task_given = False

    def post(self, path: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.sent.append((path, body))
        reply = self._reply(path, body)
        REPLIES[path].model_validate(reply)
        return reply

    def _reply(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path == protocol.REGISTER_PATH:
            return {"ok": True, "heartbeat_interval": 0.1, "heartbeat_timeout": 5.0}
        if path == protocol.UNREGISTER_PATH:
            return {"ok": True}
        if body["state"] == protocol.REPORT_REGISTERED:
            cluster = {"version": 1, "roles": {"worker": ["h:1"]}}
            feed = {"max_tasks": 2, "readers": 1, "exit_grace": None, "delivery": "exactly_once",
                    "restore_checkpoint": None}
            return {"command": protocol.CMD_START,
                    "start": {"command": [sys.executable, "-c", TRAINER], "env": {}, "cluster": cluster, "feed": feed}}
        if not self.task_given:
            self.task_given = True
            return {"command": protocol.CMD_NONE, "tasks": [self.task]}
        return {"command": protocol.CMD_NONE, "data_exhausted": True}

    def close(self) -> None:
        pass


def test_what_a_real_executor_sends_is_exactly_what_the_models_read(tmp_path):
    task_file = tmp_path / "part-0.txt"
    task_file.write_text("a\nb\nc\n")
    (tmp_path / "token").write_text("t")
    config = Config({protocol.ENV_AM_ADDRESS: "127.0.0.1:1", protocol.ENV_TOKEN_FILE: str(tmp_path / "token"),
                     protocol.ENV_ROLE: "worker", protocol.ENV_INDEX: "0", protocol.ENV_INCARNATION: "inc-1",
                     protocol.ENV_LOG_DIR: str(tmp_path), protocol.ENV_WORK_DIR: str(tmp_path),
                     protocol.ENV_GPUS: "0,1"})
    am = ScriptedAM(task_file)
    assert Executor(config, am).run() == 0  # type: ignore[arg-type]

    for path, body in am.sent:
        model = REQUESTS[path]
        unknown = set(body) - set(model.model_fields)
        assert not unknown, f"the executor sends {sorted(unknown)} to {path}, which the AM's model ignores"
        model.model_validate(body)
    heartbeats = [body for path, body in am.sent if path == protocol.HEARTBEAT_PATH]
    data_fields = set(models.DataReport.model_fields)
    assert data_fields <= set().union(*heartbeats), "every data report field was exercised"
    # Exactly-once: the task is reported done (once, in whichever heartbeat comes after the commit:
    # a busy machine may send another one after it) together with the commit that covers it.
    done = [models.HeartbeatRequest.model_validate(hb) for hb in heartbeats if hb.get("done")]
    assert [hb.done for hb in done] == [["t0"]]
    assert done[0].commit == models.Commit(checkpoint="ckpt-1", records=3)
    assert [path for path, _ in am.sent][::len(am.sent) - 1] == [protocol.REGISTER_PATH, protocol.UNREGISTER_PATH]


def test_protocol_constants_are_the_models_values():
    state = models.HeartbeatRequest.model_fields["state"].annotation
    literal = next(arg for arg in typing.get_args(state) if typing.get_origin(arg) is typing.Literal)
    assert set(typing.get_args(literal)) == {protocol.REPORT_REGISTERED, protocol.REPORT_RUNNING}
    assert {c.value for c in models.Command} == {protocol.CMD_NONE, protocol.CMD_START, protocol.CMD_KILL,
                                                 protocol.CMD_CLUSTER, protocol.CMD_DRAIN}
    # protocol.py documents every field the models know.
    for model in (*REQUESTS.values(), models.DataReport, models.Commit, models.TaskPosition, models.FeedStats):
        for field in model.model_fields:
            assert f'"{field}"' in protocol.__doc__, f"protocol.py does not document {model.__name__}.{field}"


def test_openapi_is_generated_from_the_models():
    document = openapi_document()
    schemas = document["components"]["schemas"]
    heartbeat = document["paths"][protocol.HEARTBEAT_PATH]["post"]["requestBody"]["content"]["application/json"]
    assert heartbeat["schema"] == {"$ref": "#/components/schemas/HeartbeatRequest"}
    assert {"commit", "ready", "need_tasks", "progress", "held", "done", "failed", "draining", "drained"} <= set(
        schemas["HeartbeatRequest"]["properties"])
    assert schemas["HeartbeatRequest"]["properties"]["commit"]["anyOf"][0] == {"$ref": "#/components/schemas/Commit"}
    assert set(schemas["Command"]["enum"]) == {"none", "start", "kill", "cluster", "drain"}
    assert "stopped" in schemas["ExecutorState"]["enum"] and "killed" not in schemas["ExecutorState"]["enum"]
    assert {(op.method.upper(), op.path) for op in OPERATIONS} == {
        (method.upper(), path) for path, ops in document["paths"].items() for method in ops}


@pytest.mark.parametrize("state", list(JobState))
def test_lost_is_the_only_finished_state_an_am_never_records(state):
    assert state.finished == (state in (JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED, JobState.LOST))
    assert state.terminal == (state.finished and state is not JobState.LOST)


def test_executors_have_no_killed_state():
    assert "killed" not in {s.value for s in ExecutorState}
    assert ExecutorState.STOPPED.terminal and not ExecutorState.STOPPED.alive
