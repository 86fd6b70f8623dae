"""The read side of the API and the web page, for the AM and the history server alike.

Every route needs the job: the token in a header (``Authorization: Bearer`` or ``X-Primus-Token``),
or the session cookie a browser gets by signing in (``auth.py``). A state-changing request signed
in by cookie must also carry ``X-Primus-Action`` (no cross-site form can). The page itself is
static (``static/``): it reads everything through the routes here, with relative URLs, so it works
behind the ResourceManager's and the API server's proxies.

Every read answers with an ETag (a hash of its bytes) and with a bodiless 304 to a request whose
If-None-Match names it; the status, the one document whose cost grows with the job, is encoded once
and shared by every poller for a second or until the next event (``EncodedCache``).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import json
import mimetypes
import time
import warnings
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.web_urldispatcher import MatchInfoError, SystemRoute, UrlMappingMatchInfo
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
# A read route: what to answer (data, or an ``Encoded`` it keeps itself), given the request and who asks.
Read = Callable[[web.Request, str], Any]
M = TypeVar("M", bound=BaseModel)

_ERROR_MARK = "<!--ERROR-->"
_V1 = protocol.API_PREFIX
# How long an encoded status is answered again (unless an event happened first): every page and
# client polling within it shares one encoding and one hash, and what changes without an event
# (heartbeat times, data progress) shows at most this late.
STATUS_REUSE_SECONDS = 1.0
# A browser that read the status within this long is showing the live page (it polls every 2 s, and
# not at all from a hidden tab): when the job ends, the AM waits for it to read the outcome.
PAGE_SEEN_SECONDS = 6.0


def json_reply(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(data).encode(), status=status, content_type="application/json")


def error_reply(status: int, message: str) -> web.Response:
    return json_reply({"error": message}, status)


@dataclass(frozen=True)
class Encoded:
    """A reply's JSON body and its ETag (a hash of the bytes: equal bodies, equal tags)."""

    body: bytes
    etag: str

    @classmethod
    def of(cls, data: Any) -> Encoded:
        body = json.dumps(data, separators=(",", ":")).encode()
        return cls(body, '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"')


def conditional_reply(request: web.Request, encoded: Encoded) -> web.Response:
    """``encoded`` with its ETag, or a 304 without a body when the caller's If-None-Match holds it."""
    headers = {"ETag": encoded.etag, "Cache-Control": "no-cache"}
    if etag_matches(request.headers.get("If-None-Match"), encoded.etag):
        return web.Response(status=304, headers=headers)
    return web.Response(body=encoded.body, content_type="application/json", headers=headers)


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """RFC 9110's weak comparison: ``*``, or any tag of the list equal to ``etag`` once ``W/`` is dropped."""
    if not if_none_match:
        return False
    tags = [tag.strip() for tag in if_none_match.split(",")]
    return "*" in tags or etag in (tag.removeprefix("W/") for tag in tags)


@dataclass(frozen=True)
class _Kept:
    encoded: Encoded
    version: Hashable
    until: float


class EncodedCache:
    """Encoded replies kept for ``seconds`` or until ``version`` moves (the job's event count: every
    state change and user action is an event), so that many pollers cost one build, one encoding
    and one hash."""

    def __init__(self, seconds: float = STATUS_REUSE_SECONDS, max_entries: int = 16):
        self.seconds = seconds
        self.max_entries = max_entries
        self._kept: dict[Hashable, _Kept] = {}

    def get(self, key: Hashable, version: Hashable, build: Callable[[], Any]) -> Encoded:
        now = time.monotonic()
        kept = self._kept.get(key)
        if kept is not None and kept.version == version and now < kept.until:
            return kept.encoded
        encoded = Encoded.of(build())
        if len(self._kept) >= self.max_entries:  # callers choose keys (events=N): keep only what is fresh
            self._kept = {k: v for k, v in self._kept.items() if now < v.until}
        self._kept[key] = _Kept(encoded, version, now + self.seconds)
        return encoded


def query(model: type[M], request: web.Request) -> M:
    """The query parameters as ``model``; a 400 naming each bad parameter and its value."""
    try:
        return model.model_validate({name: request.query[name] for name in request.query})
    except ValidationError as exc:
        raise RequestError(400, describe(exc, "query parameter")) from None


class PageReaders:
    """The browsers showing a live AM's page, by session, and whether each has read the job's outcome.

    The AM exits a moment after the outcome, and a page polls every 2 s: without this, a page would
    stay on ``running`` and then only say it lost the AM. So the AM keeps serving until every page
    seen lately has read a status with the outcome (``until_read``), within a bound."""

    def __init__(self, cookie: str, seen_within: float = PAGE_SEEN_SECONDS, max_kept: int = 256):
        self.cookie = cookie
        self.seen_within = seen_within
        self.max_kept = max_kept
        self._seen: dict[str, tuple[float, bool]] = {}  # session -> (when it read the status, outcome in it)

    def saw(self, request: web.Request, ended: bool) -> None:
        """``request``, a status read answered with (``ended``) or without the outcome."""
        session = request.cookies.get(self.cookie)
        if session is None:  # an API client: it falls back to the job store when the AM is gone
            return
        now = time.monotonic()
        if session not in self._seen and len(self._seen) >= self.max_kept:
            self._seen = {s: seen for s, seen in self._seen.items() if now - seen[0] < self.seen_within}
        self._seen[session] = (now, ended)

    def waiting(self) -> int:
        """Pages seen lately that have not read the outcome yet."""
        now = time.monotonic()
        return sum(1 for at, ended in self._seen.values() if not ended and now - at < self.seen_within)

    async def until_read(self, least: float, most: float) -> None:
        """Waits ``least`` seconds, then until no page is ``waiting``, ``most`` seconds in all."""
        await asyncio.sleep(least)
        deadline = time.monotonic() + max(0.0, most - least)
        while self.waiting() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)


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
            except web.HTTPException as exc:  # e.g. 413, a body over the limit
                if exc.status < 400:
                    raise
                return error_reply(exc.status, f"{exc.reason}: {request.method} {request.path}")

        return check


def add_read_routes(app: web.Application, view: JobView, guard: Guard, readers: PageReaders | None = None) -> None:
    """GET routes that only read the job; the same for a live AM and a finished job's history. Every
    answer carries an ETag; a caller that sends it back in If-None-Match gets a 304 while it holds.
    ``readers``: told of each status read (a live AM lingers for its pages)."""
    statuses = EncodedCache()

    def status(request: web.Request, actor: str) -> Encoded:
        asked = query(StatusQuery, request)
        ended = view.ended

        def build() -> dict[str, Any]:
            document = view.summary() if asked.view == "summary" else view.status()
            return {**document, "events": view.events_from(max(0, view.event_count() - asked.events))}
        # The outcome is part of the version: no answer kept from before it is given once it is known.
        encoded = statuses.get((asked.view, asked.events), (view.event_count(), ended), build)
        if readers is not None:
            readers.saw(request, ended)
        return encoded

    def job(request: web.Request, actor: str) -> Any:
        return view.summary()["job"]

    def roles(request: web.Request, actor: str) -> Any:
        return {"roles": view.summary()["roles"]}

    def executors(request: web.Request, actor: str) -> Any:
        asked = query(ExecutorsQuery, request)
        total, rows = view.executor_page(asked)
        data: dict[str, Any] = {"total": total, "offset": asked.offset, "limit": asked.limit, "executors": rows}
        if asked.history:
            matches = asked.matcher()
            data["history"] = [ex for ex in view.history() if matches(ex["role"], ex["state"], ex["id"])]
        return data

    def events(request: web.Request, actor: str) -> Any:
        return {"events": view.events(query(EventsQuery, request))}

    def data(request: web.Request, actor: str) -> Any:
        data = view.summary()["data"]
        if data is None:
            raise NotFound("this job has no input")
        return data

    def tasks(request: web.Request, actor: str) -> Any:
        return view.task_page(query(TasksQuery, request))

    def partitions(request: web.Request, actor: str) -> Any:
        return view.partitions()

    def timeline(request: web.Request, actor: str) -> Any:
        return view.timeline(query(TimelineQuery, request).since)

    def spec(request: web.Request, actor: str) -> Any:
        return view.spec()

    def whoami(request: web.Request, actor: str) -> Any:
        return {"user": actor, "live": view.live, "app_id": view.app_id}

    def openapi(request: web.Request, actor: str) -> Any:
        from ..am.openapi import openapi_document

        return openapi_document()

    async def log(request: web.Request, actor: str) -> web.Response:
        asked = query(LogQuery, request)
        chunk = await view.log(request.match_info["executor"], request.match_info["stream"], asked.offset,
                               asked.limit, asked.attempt)
        return conditional_reply(request, Encoded.of(chunk))

    routes: tuple[tuple[str, Read], ...] = (
        ("/status", status), ("/job", job), ("/roles", roles), ("/executors", executors), ("/events", events),
        ("/data", data), ("/data/tasks", tasks), ("/data/partitions", partitions), ("/timeline", timeline),
        ("/spec", spec), ("/whoami", whoami), ("/openapi.json", openapi),
    )
    for path, read in routes:
        app.router.add_route("GET", _V1 + path, guard(conditional(read)))
    app.router.add_route("GET", _V1 + "/executors/{executor}/logs/{stream}", guard(log))


def conditional(read: Read) -> GuardedHandler:
    """A guarded handler answering what ``read`` returns (data, or an ``Encoded`` it keeps itself) with
    an ETag, or a 304."""
    async def handler(request: web.Request, actor: str) -> web.Response:
        answer = read(request, actor)
        return conditional_reply(request, answer if isinstance(answer, Encoded) else Encoded.of(answer))

    return handler


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


class JsonErrorRouter(web.UrlDispatcher):
    """aiohttp answers unknown paths and methods in plain text; API clients always get JSON. Done here,
    when a request is routed, not in a middleware: a middleware wraps every request, and cost the
    executors' heartbeats 5% of the AM's capacity."""

    async def resolve(self, request: web.Request) -> UrlMappingMatchInfo:
        match = await super().resolve(request)
        if isinstance(match, MatchInfoError):
            return UrlMappingMatchInfo({}, _JsonErrorRoute(match.http_exception))
        return match


class _JsonErrorRoute(SystemRoute):
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        exc = self._http_exception
        return error_reply(exc.status, f"{exc.reason}: {request.method} {request.path}")


def json_error_app(**kwargs: Any) -> web.Application:
    """An aiohttp application whose errors (unknown path or method, a body over its limit) are JSON."""
    # aiohttp 3.14 deprecates handing an Application its router, but keeps it through 3.x (pinned <4);
    # the alternative, a middleware, costs every heartbeat (see JsonErrorRouter).
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "router argument is deprecated", DeprecationWarning)
        return web.Application(router=JsonErrorRouter(), **kwargs)
