"""The read side of the API and the web page, for the AM and the history server alike.

Every route needs the job: the token in a header (``Authorization: Bearer`` or ``X-Primus-Token``),
or the session cookie a browser gets by signing in (``auth.py``). A state-changing request signed
in by cookie must also carry ``X-Primus-Action`` (no cross-site form can). The page itself is
static (``static/``): it reads everything through the routes here, with relative URLs, so it works
behind the ResourceManager's and the API server's proxies.
"""

from __future__ import annotations

import functools
import hmac
import json
import mimetypes
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from .. import protocol
from ..models import (
    EventsQuery,
    ExecutorsQuery,
    LogQuery,
    RequestError,
    StatusQuery,
    TasksQuery,
    TimelineQuery,
    describe,
)
from .auth import ACTION_HEADER, USER_HEADER, WebAuth, clean_name
from .views import JobView, NotFound

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# A guarded handler gets who is asking: the signed-in name, the API caller's X-Primus-User, or "token".
GuardedHandler = Callable[[web.Request, str], Awaitable[web.StreamResponse]]
M = TypeVar("M", bound=BaseModel)

_ERROR_MARK = "<!--ERROR-->"
_V1 = protocol.API_PREFIX


def json_reply(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(data).encode(), status=status, content_type="application/json")


def error_reply(status: int, message: str) -> web.Response:
    return json_reply({"error": message}, status)


def query(model: type[M], request: web.Request) -> M:
    """The query parameters as ``model``; a 400 naming each bad parameter and its value."""
    try:
        return model.model_validate({name: request.query[name] for name in request.query})
    except ValidationError as exc:
        raise RequestError(400, describe(exc, "query parameter")) from None


class Guard:
    """Wraps handlers so that only callers with the job (token or session) reach them, and tells them
    who is asking."""

    def __init__(self, auth: WebAuth):
        self.auth = auth
        self._bearer = ("Bearer " + auth.token).encode()

    def caller(self, request: web.Request, action: bool) -> str | None:
        """Who is asking (None: nobody we know). Raises a 403 for a cookie-signed action without the
        action header."""
        bearer = request.headers.get("Authorization", "").encode()
        plain = request.headers.get(protocol.TOKEN_HEADER, "")
        # Both compared, always: the time taken says nothing about which one was close.
        if hmac.compare_digest(bearer, self._bearer) | self.auth.token_matches(plain):
            return clean_name(request.headers.get(USER_HEADER, "")) if USER_HEADER in request.headers else "token"
        session = request.cookies.get(self.auth.cookie)
        user = self.auth.session_user(session) if session else None
        if user is not None and action and request.headers.get(ACTION_HEADER) != "1":
            raise RequestError(403, f"a signed-in browser must send {ACTION_HEADER}: 1 with an action "
                                    f"(cross-site requests are refused)")
        return user

    def __call__(self, handler: GuardedHandler, action: bool = False) -> Handler:
        async def check(request: web.Request) -> web.StreamResponse:
            try:
                actor = self.caller(request, action)
                if actor is None:
                    return error_reply(401, f"missing or wrong job token (Authorization: Bearer <token>, "
                                            f"or {protocol.TOKEN_HEADER}: <token>, or sign in at /ui/)")
                return await handler(request, actor)
            except RequestError as exc:
                return error_reply(exc.status, str(exc))
            except NotFound as exc:
                return error_reply(404, str(exc))

        return check


def add_read_routes(app: web.Application, view: JobView, guard: Guard) -> None:
    """GET routes that only read the job; the same for a live AM and a finished job's history."""

    async def status(request: web.Request, actor: str) -> web.Response:
        wanted = query(StatusQuery, request).events
        return json_reply({**view.status(), "events": view.events_from(max(0, view.event_count() - wanted))})

    async def job(request: web.Request, actor: str) -> web.Response:
        return json_reply(view.status()["job"])

    async def roles(request: web.Request, actor: str) -> web.Response:
        return json_reply({"roles": view.status()["roles"]})

    async def executors(request: web.Request, actor: str) -> web.Response:
        asked = query(ExecutorsQuery, request)
        data: dict[str, Any] = {"executors": [ex for ex in view.status()["executors"]
                                              if asked.role is None or ex["role"] == asked.role]}
        if asked.history:
            data["history"] = [ex for ex in view.history() if asked.role is None or ex["role"] == asked.role]
        return json_reply(data)

    async def events(request: web.Request, actor: str) -> web.Response:
        return json_reply({"events": view.events(query(EventsQuery, request))})

    async def data(request: web.Request, actor: str) -> web.Response:
        data = view.status()["data"]
        if data is None:
            raise NotFound("this job has no input")
        return json_reply(data)

    async def tasks(request: web.Request, actor: str) -> web.Response:
        return json_reply(view.task_page(query(TasksQuery, request)))

    async def partitions(request: web.Request, actor: str) -> web.Response:
        return json_reply(view.partitions())

    async def timeline(request: web.Request, actor: str) -> web.Response:
        return json_reply(view.timeline(query(TimelineQuery, request).since))

    async def spec(request: web.Request, actor: str) -> web.Response:
        return json_reply(view.spec())

    async def log(request: web.Request, actor: str) -> web.Response:
        asked = query(LogQuery, request)
        return json_reply(await view.log(request.match_info["executor"], request.match_info["stream"],
                                         asked.offset, asked.limit))

    async def whoami(request: web.Request, actor: str) -> web.Response:
        return json_reply({"user": actor, "live": view.live, "app_id": view.app_id})

    async def openapi(request: web.Request, actor: str) -> web.Response:
        from ..am.openapi import openapi_document

        return json_reply(openapi_document())

    routes: tuple[tuple[str, GuardedHandler], ...] = (
        ("/status", status), ("/job", job), ("/roles", roles), ("/executors", executors), ("/events", events),
        ("/data", data), ("/data/tasks", tasks), ("/data/partitions", partitions), ("/timeline", timeline),
        ("/spec", spec), ("/executors/{executor}/logs/{stream}", log), ("/whoami", whoami),
        ("/openapi.json", openapi),
    )
    for path, handler in routes:
        app.router.add_route("GET", _V1 + path, guard(handler))


def add_page_routes(app: web.Application, auth: WebAuth) -> None:
    """The page, its static files and signing in and out."""

    def login_page(error: str = "", status: int = 200) -> web.Response:
        from html import escape

        text = static_file("login.html").decode()
        message = f'<p class="error" role="alert">{escape(error)}</p>' if error else ""
        return web.Response(text=text.replace(_ERROR_MARK, message), status=status, content_type="text/html",
                            headers={"Cache-Control": "no-store"})

    def signed_in(user: str, request: web.Request) -> web.HTTPSeeOther:
        # Relative, so that it stays below a proxy's prefix; 303: the browser GETs the page.
        response = web.HTTPSeeOther("./")
        response.set_cookie(auth.cookie, auth.session(user), httponly=True, samesite="Strict", path="/",
                            secure=request.secure)
        return response

    async def static(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        try:
            body = static_file(name)
        except (FileNotFoundError, KeyError, ValueError):
            raise web.HTTPNotFound() from None
        return web.Response(body=body, content_type=mimetypes.guess_type(name)[0] or "application/octet-stream",
                            headers={"Cache-Control": "no-cache"})

    async def root(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("ui/")

    async def page(request: web.Request) -> web.StreamResponse:
        session = request.cookies.get(auth.cookie)
        if session is None or auth.session_user(session) is None:
            return login_page()
        return web.Response(body=static_file("index.html"), content_type="text/html",
                            headers={"Cache-Control": "no-store"})

    async def login_form(request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket")
        if ticket is None:
            return login_page()
        user = auth.redeem(ticket)
        if user is None:
            return login_page("This sign-in link has expired or was used already: ask for a new one "
                              "(primus status APP, or reload the Airflow page), or sign in with the job token.", 401)
        raise signed_in(user, request)

    async def login(request: web.Request) -> web.StreamResponse:
        form = await request.post()
        if not auth.token_matches(str(form.get("token", "")).strip()):
            return login_page("Wrong job token.", 401)
        raise signed_in(str(form.get("name", "")), request)

    async def logout(request: web.Request) -> web.StreamResponse:
        response = web.HTTPSeeOther("./")
        response.del_cookie(auth.cookie, path="/")
        raise response

    app.router.add_get("/", root)
    app.router.add_get("/ui", root)
    app.router.add_get("/ui/", page)
    app.router.add_get("/ui/login", login_form)
    app.router.add_post("/ui/login", login)
    app.router.add_post("/ui/logout", logout)
    app.router.add_get("/ui/static/{name}", static)


@functools.cache
def static_file(name: str) -> bytes:
    """A file of ``static/`` (from the package or the runtime bundle's zip)."""
    if "/" in name or name.startswith("."):
        raise ValueError(name)
    return (resources.files(__package__) / "static" / name).read_bytes()


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    # aiohttp answers unknown paths and methods in plain text; API clients always get JSON.
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_reply(exc.status, f"{exc.reason}: {request.method} {request.path}")
