"""The AM's REST API (aiohttp): status, control, and the executor protocol.

Every API endpoint, the OpenAPI document included, requires the job's token as
``Authorization: Bearer <token>`` or in the header ``X-Primus-Token`` (requests that pass through
the Kubernetes API server's proxy: it consumes the ``Authorization`` of a caller that authenticates
with a bearer token); a request without it gets 401 and nothing else. The one exception is the read-only status page at ``/`` (status_page.py). The executor endpoints are the hot path (thousands of heartbeats a
second), so handlers check the token inline instead of through middleware
and reply with pre-encoded bytes when there is nothing to say.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from .. import protocol
from ..models import (
    EmptyRequest,
    EndRequest,
    EventsQuery,
    ExecutorsQuery,
    HeartbeatRequest,
    RegisterRequest,
    SavepointRequest,
    ScaleRequest,
    StatusQuery,
    UnregisterRequest,
    describe,
)
from .master import NONE_REPLY, ApplicationMaster, RequestError
from .openapi import openapi_document
from .status_page import render as render_status_page

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_NONE_BYTES = json.dumps(NONE_REPLY).encode()
_JSON = "application/json"
M = TypeVar("M", bound=BaseModel)


def _json(data: Any, status: int = 200) -> web.Response:
    body = _NONE_BYTES if data is NONE_REPLY else json.dumps(data).encode()
    return web.Response(body=body, status=status, content_type=_JSON)


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


def parse(model: type[M], raw: bytes, what: str) -> M:
    """A request body (an empty body is ``{}``) as ``model``; a 400 naming each bad field and its value."""
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "json_invalid":
            why = first["msg"].removeprefix("Invalid JSON: ")
            raise RequestError(400, f"{what}: request body is not valid JSON ({why})") from None
        raise RequestError(400, describe(exc, f"{what} body")) from None


def query(model: type[M], request: web.Request) -> M:
    """The query parameters as ``model``; a 400 naming each bad parameter and its value."""
    try:
        return model.model_validate({name: request.query[name] for name in request.query})
    except ValidationError as exc:
        raise RequestError(400, describe(exc, "query parameter")) from None


def build_app(am: ApplicationMaster, token: str) -> web.Application:
    expected = ("Bearer " + token).encode()
    expected_plain = token.encode()

    def authorized(handler: Handler) -> Handler:
        async def check(request: web.Request) -> web.StreamResponse:
            bearer = request.headers.get("Authorization", "").encode()
            plain = request.headers.get(protocol.TOKEN_HEADER, "").encode()
            # Both compared, always: the time taken says nothing about which one was close.
            if not (hmac.compare_digest(bearer, expected) | hmac.compare_digest(plain, expected_plain)):
                return _error(401, f"missing or wrong job token (Authorization: Bearer <token>, "
                                   f"or {protocol.TOKEN_HEADER}: <token>)")
            try:
                return await handler(request)
            except RequestError as exc:
                return _error(exc.status, str(exc))

        return check

    # --- executor protocol ---

    async def register(request: web.Request) -> web.Response:
        return _json(am.register(parse(RegisterRequest, await request.read(), "register")))

    async def heartbeat(request: web.Request) -> web.Response:
        return _json(await am.heartbeat(parse(HeartbeatRequest, await request.read(), "heartbeat")))

    async def unregister(request: web.Request) -> web.Response:
        return _json(am.unregister(parse(UnregisterRequest, await request.read(), "unregister")))

    # --- status ---

    async def status(request: web.Request) -> web.Response:
        wanted = query(StatusQuery, request).events
        data = am.record.to_dict()
        data["events"] = data["events"][max(0, len(data["events"]) - wanted):]
        data.pop("history")
        return _json(data)

    async def job(request: web.Request) -> web.Response:
        return _json(am.record.summary())

    async def roles(request: web.Request) -> web.Response:
        return _json({"roles": am.record.roles_view()})

    async def executors(request: web.Request) -> web.Response:
        asked = query(ExecutorsQuery, request)
        role = asked.role
        data: dict[str, Any] = {"executors": am.record.executors_view(role)}
        if asked.history:
            data["history"] = [ex.to_dict() for ex in am.record.history if role is None or ex.role == role]
        return _json(data)

    async def events(request: web.Request) -> web.Response:
        since = query(EventsQuery, request).since
        return _json({"events": [e.__dict__ for e in am.record.events[since:]]})

    async def openapi(request: web.Request) -> web.Response:
        return _json(openapi_document())

    async def metrics(request: web.Request) -> web.Response:
        body, content_type = am.metrics.render(request.headers.get("Accept", ""))
        return web.Response(body=body, headers={"Content-Type": content_type})

    # --- control ---

    async def kill(request: web.Request) -> web.Response:
        am.request_kill(parse(EndRequest, await request.read(), "kill").reason)
        return _json({"accepted": True, "state": "killing"}, 202)

    async def succeed(request: web.Request) -> web.Response:
        am.request_succeed(parse(EndRequest, await request.read(), "succeed").reason)
        return _json({"accepted": True, "state": "succeeding"}, 202)

    async def scale(request: web.Request) -> web.Response:
        replicas = parse(ScaleRequest, await request.read(), "scale").replicas
        return _json(am.request_scale(request.match_info["role"], replicas))

    async def status_page(request: web.Request) -> web.Response:
        # The one route without the token: read-only, for a browser (see status_page.py).
        return web.Response(text=render_status_page(am.record.to_dict()), content_type="text/html")

    async def data(request: web.Request) -> web.Response:
        return _json(am.request_data("status"))

    async def data_suspend(request: web.Request) -> web.Response:
        parse(EmptyRequest, await request.read(), "suspend")
        return _json(am.request_data("suspend"))

    async def data_resume(request: web.Request) -> web.Response:
        parse(EmptyRequest, await request.read(), "resume")
        return _json(am.request_data("resume"))

    async def data_savepoint(request: web.Request) -> web.Response:
        directory = parse(SavepointRequest, await request.read(), "savepoint").dir
        return _json(await am.request_savepoint(directory))

    @web.middleware
    async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        # aiohttp answers unknown paths and methods in plain text; API clients always get JSON.
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return _error(exc.status, f"{exc.reason}: {request.method} {request.path}")

    app = web.Application(client_max_size=1 << 20, middlewares=[json_errors])
    app.router.add_get("/", status_page)
    prefix = protocol.API_PREFIX
    routes = [
        ("POST", protocol.REGISTER_PATH, register),
        ("POST", protocol.HEARTBEAT_PATH, heartbeat),
        ("POST", protocol.UNREGISTER_PATH, unregister),
        ("GET", prefix + "/status", status),
        ("GET", prefix + "/job", job),
        ("GET", prefix + "/roles", roles),
        ("GET", prefix + "/executors", executors),
        ("GET", prefix + "/events", events),
        ("GET", prefix + "/openapi.json", openapi),
        ("GET", "/metrics", metrics),
        ("POST", prefix + "/job/kill", kill),
        ("POST", prefix + "/job/succeed", succeed),
        ("POST", prefix + "/roles/{role}/scale", scale),
        ("GET", prefix + "/data", data),
        ("POST", prefix + "/data/suspend", data_suspend),
        ("POST", prefix + "/data/resume", data_resume),
        ("POST", prefix + "/data/savepoint", data_savepoint),
    ]
    for method, path, handler in routes:
        app.router.add_route(method, path, authorized(handler))
    return app
