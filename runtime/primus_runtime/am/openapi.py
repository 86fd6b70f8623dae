"""OpenAPI 3.1 description of the AM API, served at /api/v1/openapi.json, generated from the
models the server validates with (models.py): it cannot describe a field the AM does not read.

A test checks that it lists exactly the routes the server has.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from .. import __version__, models, protocol

_REF = "#/components/schemas/{model}"
# Role, executor and stream names are short; documenting a bound keeps generated URLs within the
# request line aiohttp reads (8190 bytes), beyond which it answers in plain text before any handler.
_MAX_NAME = 256


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    summary: str
    # None: any JSON object, or text when media_type says so; several: one of them, as the query asks.
    reply: type[BaseModel] | tuple[type[BaseModel], ...] | None
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    ok: int = 200
    media_type: str = "application/json"
    errors: tuple[int, ...] = ()  # what it may answer besides 400 and 401 (see ERRORS)


#: The error answers an operation may give besides 400 (bad request) and 401 (no token).
ERRORS = {
    403: "A browser signed in by cookie sent an action without X-Primus-Action: 1",
    404: "No such role, executor, log or task, or the job has no input",
    409: "Not possible now: the job is already ending or ended, or the target's state refuses it",
}
_ACTION = (403, 404, 409)


_V1 = protocol.API_PREFIX
OPERATIONS = (
    Operation("get", f"{_V1}/status", "Job summary, roles, executors and the latest events; with view=summary "
              "no executor rows (page them with GET /executors)", (models.StatusDocument, models.StatusSummary),
              query=models.StatusQuery),
    Operation("get", f"{_V1}/job", "Job summary: state, reason, times, attempt, tags", models.JobSummary),
    Operation("get", f"{_V1}/roles", "Each role's replicas, executor counts by state, failures, restarts",
              models.RolesReply),
    Operation("get", f"{_V1}/executors", "Executors with state, host, ports, restarts, exit code and log paths: "
              "filtered by role, state and id, paged with offset and limit, with the total matching",
              models.ExecutorsReply, query=models.ExecutorsQuery),
    Operation("get", f"{_V1}/events", "State transitions in order", models.EventsReply, query=models.EventsQuery),
    Operation("get", f"{_V1}/openapi.json", "This document", None),
    Operation("get", "/metrics", "Prometheus metrics: executors per role and state, restarts, ends by cause, "
              "heartbeat handling times, input progress and each executor's feed rate (text format 0.0.4)",
              None, media_type="text/plain"),
    Operation("post", f"{_V1}/job/kill", "Stop every executor (SIGTERM, then SIGKILL after the grace period); "
              "the job ends killed", models.Accepted, body=models.EndRequest, ok=202, errors=(403, 409)),
    Operation("post", f"{_V1}/job/succeed", "Stop every executor; the job ends succeeded", models.Accepted,
              body=models.EndRequest, ok=202, errors=(403, 409)),
    Operation("post", f"{_V1}/roles/{{role}}/scale", "Change a role's replicas while the job runs; running "
              "executors are told the new membership", models.ScaleReply, body=models.ScaleRequest, errors=_ACTION),
    Operation("get", f"{_V1}/data", "Input progress: state, tasks and bytes done/total, records, rate, ETA, "
              "watermark, quarantined tasks (404 when the job has no input)", models.DataStatus, errors=(404,)),
    Operation("post", f"{_V1}/data/suspend", "Stop handing out input tasks (executors finish what they hold); "
              "the data status", models.DataStatus, body=models.EmptyRequest, errors=_ACTION),
    Operation("post", f"{_V1}/data/resume", "Hand out input tasks again; the data status", models.DataStatus,
              body=models.EmptyRequest, errors=_ACTION),
    Operation("post", f"{_V1}/data/savepoint", "Write every input task's position to a directory; a job with "
              "input.restore_from there resumes from it", models.SavepointReply, body=models.SavepointRequest,
              errors=(403, 404)),
    Operation("post", f"{_V1}/executors/{{executor}}/restart", "Stop one executor (`<role>-<index>`) and start a "
              "new incarnation of it once stopped; not charged to its failure budget", models.RestartReply,
              body=models.RestartRequest, errors=_ACTION),
    Operation("post", f"{_V1}/executors/{{executor}}/drain", "Drain one running executor as on a preemption "
              "notice: it takes no more tasks, its trainer gets SIGTERM and the role's preemption.grace to "
              "checkpoint, its tasks move at their final positions; a new incarnation follows, uncharged",
              models.DrainReply, body=models.DrainRequest, errors=_ACTION),
    Operation("get", f"{_V1}/executors/{{executor}}/logs/{{stream}}", "A slice of one log (stdout, stderr, "
              "executor) of an executor's current incarnation, or of an earlier one (attempt): a tail by default", models.LogChunk,
              query=models.LogQuery, errors=(404,)),
    Operation("get", f"{_V1}/data/tasks", "One page of the input's task table, in reading order, filtered by "
              "state and text", models.TasksPage, query=models.TasksQuery, errors=(404,)),
    Operation("get", f"{_V1}/data/partitions", "Progress per source and partition, each source's watermark, and "
              "what the scan waits for", models.PartitionsReply, errors=(404,)),
    Operation("post", f"{_V1}/data/tasks/requeue", "Put a quarantined or done task back at the front of the queue, "
              "read from its start with a fresh attempt budget", models.TaskView, body=models.TaskActionRequest,
              errors=_ACTION),
    Operation("post", f"{_V1}/data/tasks/skip", "Quarantine a queued or running task (the executor reading it is "
              "restarted, uncharged)", models.TaskView, body=models.TaskActionRequest, errors=_ACTION),
    Operation("get", f"{_V1}/timeline", "The job's life in samples: records and tasks done, executors by state, "
              "restarts", models.TimelineReply, query=models.TimelineQuery),
    Operation("get", f"{_V1}/spec", "The resolved job spec, secret-looking values masked", None),
    Operation("get", f"{_V1}/whoami", "Who the caller is, and whether this is the live job or its history",
              models.WhoAmI),
    Operation("post", protocol.REGISTER_PATH, "Executor protocol: register an incarnation", models.RegisterReply,
              body=models.RegisterRequest),
    Operation("post", protocol.HEARTBEAT_PATH, "Executor protocol: heartbeat (with the data report of a "
              "consuming role); the reply carries a command", models.HeartbeatReply, body=models.HeartbeatRequest),
    Operation("post", protocol.UNREGISTER_PATH, "Executor protocol: report the trainer's exit",
              models.UnregisterReply, body=models.UnregisterRequest),
)


def _conditional(op: Operation) -> bool:
    """Every GET of the API is a read route (ui/web.py): answered with an ETag, or 304 to If-None-Match."""
    return op.method == "get" and op.path.startswith(_V1)


def _parameters(op: Operation) -> list[dict[str, Any]]:
    params = []
    for name in ("role", "executor", "stream"):
        if f"{{{name}}}" in op.path:
            params.append({"name": name, "in": "path", "required": True,
                           "schema": {"type": "string", "maxLength": _MAX_NAME}})
    if op.query is not None:
        for name, schema in op.query.model_json_schema()["properties"].items():
            params.append({"name": name, "in": "query", "required": False,
                           "description": schema.get("description", ""), "schema": schema})
    if _conditional(op):
        params.append({"name": "If-None-Match", "in": "header", "required": False,
                       "description": "The ETag of the answer the caller holds: 304 without a body while it "
                                      "is still the answer", "schema": {"type": "string", "maxLength": _MAX_NAME}})
    return params


def _replies(op: Operation) -> tuple[type[BaseModel], ...]:
    if op.reply is None:
        return ()
    return op.reply if isinstance(op.reply, tuple) else (op.reply,)


def _operation(op: Operation, refs: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    def content(ref: dict[str, Any], media_type: str = "application/json") -> dict[str, Any]:
        return {media_type: {"schema": ref}}

    error = content({"$ref": _REF.format(model="ErrorReply")})
    replies = [refs[(model, "serialization")] for model in _replies(op)]
    if replies:
        reply = content(replies[0] if len(replies) == 1 else {"oneOf": replies})
    else:
        reply = content({"type": "object" if op.media_type == "application/json" else "string"}, op.media_type)
    ok: dict[str, Any] = {"description": "OK", "content": reply}
    not_modified: dict[str, Any] = {}
    if _conditional(op):
        ok["headers"] = {"ETag": {"description": "Names this answer: send it back in If-None-Match",
                                  "schema": {"type": "string"}}}
        not_modified = {"304": {"description": "Not modified: the answer is still the one If-None-Match names "
                                               "(no body)"}}
    out: dict[str, Any] = {
        "summary": op.summary,
        "responses": {
            str(op.ok): ok,
            **not_modified,
            "400": {"description": "Invalid body or query parameter: the error names the field and the value",
                    "content": error},
            "401": {"description": "Missing or wrong job token", "content": error},
            **{str(status): {"description": ERRORS[status], "content": error} for status in op.errors},
        },
    }
    if op.body is not None:
        out["requestBody"] = {"required": bool(op.body.model_json_schema().get("required")),
                              "content": content(refs[(op.body, "validation")])}
    params = _parameters(op)
    if params:
        out["parameters"] = params
    return out


@functools.cache
def openapi_document() -> dict[str, Any]:
    wanted: set[tuple[type[BaseModel], JsonSchemaMode]] = {
        (model, "serialization") for op in OPERATIONS for model in _replies(op)} | {
        (op.body, "validation") for op in OPERATIONS if op.body is not None} | {(models.ErrorReply, "serialization")}
    refs, defs = models_json_schema(sorted(wanted, key=lambda pair: (pair[0].__name__, pair[1])), ref_template=_REF)
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method] = _operation(op, refs)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Primus Application Master API", "version": __version__},
        "components": {"schemas": defs.get("$defs", {}),
                       "securitySchemes": {"jobToken": {"type": "http", "scheme": "bearer"}}},
        "security": [{"jobToken": []}],
        "paths": paths,
    }
