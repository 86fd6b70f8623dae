"""OpenAPI 3.1 description of the AM API, served at /api/v1/openapi.json.

A test checks that it lists exactly the routes the server has.
"""

from __future__ import annotations

from typing import Any

from .. import __version__


def _op(summary: str, *, body: dict[str, Any] | None = None, params: list[dict[str, Any]] | None = None,
        ok: str = "200") -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "responses": {
            ok: {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}},
            "401": {"description": "Missing or wrong job token"},
        },
    }
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if params:
        op["parameters"] = params
    return op


def _query(name: str, description: str, type_: str = "string") -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": {"type": type_}}


_IDS = {"id": {"type": "string"}, "incarnation": {"type": "string"}}


def openapi_document() -> dict[str, Any]:
    v1 = "/api/v1"
    return {
        "openapi": "3.1.0",
        "info": {"title": "Primus Application Master API", "version": __version__},
        "components": {"securitySchemes": {"jobToken": {"type": "http", "scheme": "bearer"}}},
        "security": [{"jobToken": []}],
        "paths": {
            f"{v1}/status": {"get": _op("Job summary, roles, executors and the latest events",
                                        params=[_query("events", "How many recent events", "integer")])},
            f"{v1}/job": {"get": _op("Job summary: state, reason, times, attempt, tags")},
            f"{v1}/roles": {"get": _op("Each role's replicas, executor counts by state, failures, restarts")},
            f"{v1}/executors": {"get": _op(
                "Executors with state, host, ports, restarts, exit code and log paths",
                params=[_query("role", "Only this role"), _query("history", "Include earlier incarnations")])},
            f"{v1}/events": {"get": _op("State transitions in order",
                                        params=[_query("since", "Skip the first N events", "integer")])},
            f"{v1}/openapi.json": {"get": _op("This document")},
            f"{v1}/job/kill": {"post": _op("Stop every executor (SIGTERM, then SIGKILL after the grace period); "
                                           "the job ends killed", body={"type": "object", "properties": {
                                               "reason": {"type": "string"}}}, ok="202")},
            f"{v1}/job/succeed": {"post": _op("Stop every executor; the job ends succeeded",
                                              body={"type": "object", "properties": {
                                                  "reason": {"type": "string"}}}, ok="202")},
            f"{v1}/roles/{{role}}/scale": {"post": {
                **_op("Change a role's replicas while the job runs; running executors are told the new "
                      "membership", body={"type": "object", "required": ["replicas"],
                                          "properties": {"replicas": {"type": "integer", "minimum": 0}}}),
                "parameters": [{"name": "role", "in": "path", "required": True, "schema": {"type": "string"}}],
            }},
            f"{v1}/data": {"get": _op("Input progress: state, tasks and bytes done/total, records, rate, ETA, "
                                      "watermark, quarantined tasks (404 when the job has no input)")},
            f"{v1}/data/suspend": {"post": _op("Stop handing out input tasks (executors finish what they hold); "
                                               "the data status", body={"type": "object"})},
            f"{v1}/data/resume": {"post": _op("Hand out input tasks again; the data status", body={"type": "object"})},
            f"{v1}/data/savepoint": {"post": _op(
                "Write every input task's position to a directory; a job with input.restore_from there resumes "
                "from it", body={"type": "object", "required": ["dir"], "properties": {"dir": {"type": "string"}}})},
            f"{v1}/executors/register": {"post": _op("Executor protocol: register an incarnation", body={
                "type": "object", "required": ["id", "incarnation", "host"],
                "properties": {**_IDS, "host": {"type": "string"}, "ports": {"type": "array"},
                               "pid": {"type": "integer"}}})},
            f"{v1}/executors/heartbeat": {"post": _op("Executor protocol: heartbeat; the reply carries a command",
                                                      body={"type": "object", "required": ["incarnation"],
                                                            "properties": {**_IDS, "state": {"type": "string"},
                                                                           "wait": {"type": "boolean"},
                                                                           "need_tasks": {"type": "integer"},
                                                                           "held": {"type": "array"},
                                                                           "progress": {"type": "object"},
                                                                           "done": {"type": "array"},
                                                                           "failed": {"type": "object"},
                                                                           "cluster_version": {
                                                                               "type": "integer"}}})},
            f"{v1}/executors/unregister": {"post": _op("Executor protocol: report the trainer's exit", body={
                "type": "object", "required": ["incarnation", "exit_code"],
                "properties": {**_IDS, "exit_code": {"type": "integer"}, "message": {"type": "string"}}})},
        },
    }
