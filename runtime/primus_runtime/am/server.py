"""The AM's REST API (aiohttp): the executor protocol, the job's control, and (``ui/web.py``) its
read side and web page.

Every endpoint requires the job's token as ``Authorization: Bearer <token>`` or in the header
``X-Primus-Token`` (requests that pass through the Kubernetes API server's proxy: it consumes the
``Authorization`` of a caller that authenticates with a bearer token), or, for the page and the
user's endpoints, a browser's session (``ui/auth.py``); a request without it gets 401 and nothing
else. The executor endpoints are the hot path (thousands of heartbeats a second), so their
handlers check the token inline and reply with pre-encoded bytes when there is nothing to say.
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
    DrainRequest,
    EmptyRequest,
    EndRequest,
    HeartbeatRequest,
    RegisterRequest,
    RequestError,
    RestartRequest,
    SavepointRequest,
    ScaleRequest,
    TaskActionRequest,
    UnregisterRequest,
    describe,
)
from ..ui.auth import WebAuth
from ..ui.views import LiveView, task_view
from ..ui.web import (
    Guard,
    GuardedHandler,
    PageReaders,
    add_page_routes,
    add_read_routes,
    error_reply,
    json_error_app,
)
from .errors import Conflict, ControlRefused, Invalid, NotFound
from .executor_protocol import NONE_BYTES, NONE_REPLY
from .master import ApplicationMaster

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_JSON = "application/json"
M = TypeVar("M", bound=BaseModel)
# The HTTP status of each kind of refused control (am/errors.py): the only place that knows it.
_REFUSED: tuple[tuple[type[ControlRefused], int], ...] = ((NotFound, 404), (Conflict, 409), (Invalid, 400))


def encode_reply(data: dict[str, Any]) -> bytes:
    """``data`` as JSON; a value that is bytes is JSON already (the membership, encoded once for every
    executor: ``am/membership.py``) and goes in as it is, at any depth of dicts."""
    if data is NONE_REPLY:
        return NONE_BYTES
    if not any(isinstance(value, (bytes, dict)) for value in data.values()):
        return json.dumps(data).encode()
    return b"{%s}" % b",".join(
        b"%s:%s" % (json.dumps(key).encode(), value if isinstance(value, bytes)
                    else encode_reply(value) if isinstance(value, dict) else json.dumps(value).encode())
        for key, value in data.items())


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(data).encode(), status=status, content_type=_JSON)


def _reply(reply: BaseModel) -> web.Response:
    """A control's reply model, as the JSON it always was (``json.dumps`` of its fields, in order)."""
    return _json(reply.model_dump(mode="json"))


def refused(exc: ControlRefused) -> RequestError:
    """A control the job refused, as the HTTP error to answer with."""
    status = next((code for kind, code in _REFUSED if isinstance(exc, kind)), 409)
    return RequestError(status, str(exc))


def _executor_reply(data: dict[str, Any]) -> web.Response:
    return web.Response(body=encode_reply(data), content_type=_JSON)


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


# The browsers showing the page (``serve`` lingers after the outcome until they have read it).
PAGE_READERS = web.AppKey("page_readers", PageReaders)


def build_app(am: ApplicationMaster, token: str) -> web.Application:
    auth = WebAuth(token, am.record.app_id)
    readers = PageReaders(auth.cookie)
    guard = Guard(auth)
    view = LiveView(am)
    expected = ("Bearer " + token).encode()
    expected_plain = token.encode()

    def control(handler: GuardedHandler) -> GuardedHandler:
        async def refusing(request: web.Request, actor: str) -> web.StreamResponse:
            try:
                return await handler(request, actor)
            except ControlRefused as exc:
                raise refused(exc) from None

        return refusing

    def executor_only(handler: Handler) -> Handler:
        async def check(request: web.Request) -> web.StreamResponse:
            bearer = request.headers.get("Authorization", "").encode()
            plain = request.headers.get(protocol.TOKEN_HEADER, "").encode()
            # Both compared, always: the time taken says nothing about which one was close.
            if not (hmac.compare_digest(bearer, expected) | hmac.compare_digest(plain, expected_plain)):
                return error_reply(401, f"missing or wrong job token (Authorization: Bearer <token>, "
                                        f"or {protocol.TOKEN_HEADER}: <token>)")
            try:
                return await handler(request)
            except RequestError as exc:
                return error_reply(exc.status, str(exc))
            except web.HTTPException as exc:  # e.g. 413, a body over the limit
                if exc.status < 400:
                    raise
                return error_reply(exc.status, f"{exc.reason}: {request.method} {request.path}")

        return check

    # --- executor protocol ---

    async def register(request: web.Request) -> web.Response:
        return _executor_reply(am.executors.register(parse(RegisterRequest, await request.read(), "register")))

    async def heartbeat(request: web.Request) -> web.Response:
        return _executor_reply(await am.executors.heartbeat(parse(HeartbeatRequest, await request.read(), "heartbeat")))

    async def unregister(request: web.Request) -> web.Response:
        return _executor_reply(am.executors.unregister(parse(UnregisterRequest, await request.read(), "unregister")))

    # --- control (each recorded with who asked) ---

    async def kill(request: web.Request, actor: str) -> web.Response:
        am.controls.kill(parse(EndRequest, await request.read(), "kill").reason, actor)
        return _json({"accepted": True, "state": "killing"}, 202)

    async def succeed(request: web.Request, actor: str) -> web.Response:
        am.controls.succeed(parse(EndRequest, await request.read(), "succeed").reason, actor)
        return _json({"accepted": True, "state": "succeeding"}, 202)

    async def scale(request: web.Request, actor: str) -> web.Response:
        replicas = parse(ScaleRequest, await request.read(), "scale").replicas
        return _reply(am.controls.scale(request.match_info["role"], replicas, actor))

    async def restart(request: web.Request, actor: str) -> web.Response:
        reason = parse(RestartRequest, await request.read(), "restart").reason
        return _reply(am.controls.restart(request.match_info["executor"], reason, actor))

    async def drain(request: web.Request, actor: str) -> web.Response:
        reason = parse(DrainRequest, await request.read(), "drain").reason
        return _reply(am.controls.drain(request.match_info["executor"], reason, actor))

    async def data_suspend(request: web.Request, actor: str) -> web.Response:
        parse(EmptyRequest, await request.read(), "suspend")
        return _json(am.controls.data("suspend", actor))

    async def data_resume(request: web.Request, actor: str) -> web.Response:
        parse(EmptyRequest, await request.read(), "resume")
        return _json(am.controls.data("resume", actor))

    def task_action(action: str) -> GuardedHandler:
        async def act(request: web.Request, actor: str) -> web.Response:
            body = parse(TaskActionRequest, await request.read(), action)
            task = am.controls.task(action, body.task, body.reason, actor, body.holder)
            return _json(task_view(task, view.holder_name(task.holder)))

        return act

    async def metrics(request: web.Request, actor: str) -> web.Response:
        body, content_type = am.metrics.render(request.headers.get("Accept", ""))
        # (aiohttp's content_type= refuses parameters such as the format's version)
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def data_savepoint(request: web.Request, actor: str) -> web.Response:
        directory = parse(SavepointRequest, await request.read(), "savepoint").dir
        return _reply(await am.controls.savepoint(directory))

    app = json_error_app(client_max_size=1 << 20)
    executor_routes: tuple[tuple[str, Handler], ...] = (
        (protocol.REGISTER_PATH, register), (protocol.HEARTBEAT_PATH, heartbeat),
        (protocol.UNREGISTER_PATH, unregister))
    for path, handler in executor_routes:
        app.router.add_post(path, executor_only(handler))
    prefix = protocol.API_PREFIX
    control_routes: tuple[tuple[str, GuardedHandler], ...] = (
        ("/job/kill", kill), ("/job/succeed", succeed), ("/roles/{role}/scale", scale),
        ("/executors/{executor}/restart", restart), ("/executors/{executor}/drain", drain),
        ("/data/suspend", data_suspend),
        ("/data/resume", data_resume), ("/data/tasks/requeue", task_action("requeue")),
        ("/data/tasks/skip", task_action("skip")), ("/data/savepoint", data_savepoint),
    )
    for path, controlled in control_routes:
        app.router.add_post(prefix + path, guard(control(controlled), action=True))
    app.router.add_route("GET", "/metrics", guard(metrics))
    add_read_routes(app, view, guard, readers)
    add_page_routes(app, auth)
    app[PAGE_READERS] = readers
    return app
