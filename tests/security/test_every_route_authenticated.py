"""Every route of the AM's app and of the history server's app refuses a caller without the job
(token or signed-in session), except the few that only let a browser sign in. The routes are read
from the apps themselves, so a route added later is covered without touching this test."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from conftest import make_spec
from primus_runtime.am.master import ApplicationMaster
from primus_runtime.am.server import build_app
from primus_runtime.spec import JobSpec
from primus_runtime.ui.auth import WebAuth
from primus_runtime.ui.history import history_app
from primus_runtime.ui.views import ArchiveView, LiveView
from simulated_backend import SimulatedBackend

TOKEN = "secret-job-token"

#: (method, route) -> why it answers without the job, and what it must answer instead of 401.
PUBLIC = {
    ("GET", "/"): ("redirects to the page, which asks for the token", 302),
    ("GET", "/ui"): ("redirects to the page, which asks for the token", 302),
    ("GET", "/ui/"): ("without a session it is the sign-in form, with no job data", 200),
    ("GET", "/ui/login"): ("the sign-in form (a ticket is checked before it signs anyone in)", 200),
    ("POST", "/ui/login"): ("signing in: refused without the right token", 401),
    ("POST", "/ui/logout"): ("signing out only clears the caller's own cookie", 303),
    ("GET", "/ui/static/{name}"): ("the page's own HTML/JS/CSS, the same for every job", 200),
}
#: HEAD is GET without a body: the same rule.
PUBLIC |= {("HEAD", path): why for (method, path), why in PUBLIC.items() if method == "GET"}
#: Job data a public answer must never show: the executors' ids and the job's spec.
JOB_DATA = re.compile(rb"worker-0|sleep-marker")


def _live_app() -> tuple[web.Application, ApplicationMaster]:
    spec = JobSpec.from_dict(make_spec([{"name": "worker", "command": "sleep-marker"}]))
    am = ApplicationMaster(spec, "app-1", SimulatedBackend())
    return build_app(am, TOKEN), am


def _history_app(am: ApplicationMaster) -> web.Application:
    live = LiveView(am)
    archive = ArchiveView(live.status(), am.spec.model_dump(mode="json"), None, [], None, None,
                          lambda path, offset: b"log")
    return history_app(archive)[0]


def _concrete(path: str) -> str:
    return (path.replace("{role}", "worker").replace("{executor}", "worker-0").replace("{stream}", "stdout")
            .replace("{name}", "index.html"))


def _routes(app: web.Application) -> Iterator[tuple[str, str]]:
    for route in app.router.routes():
        yield route.method, route.resource.canonical  # type: ignore[union-attr]


async def _without_credentials(app_of: str) -> dict[tuple[str, str], tuple[int, bytes]]:
    app, am = _live_app()
    await am.start("127.0.0.1:1")
    try:
        served = app if app_of == "am" else _history_app(am)
        answers = {}
        async with TestClient(TestServer(served)) as http:
            for method, path in _routes(served):
                # Junk credentials too: a wrong token, or a cookie that is no session.
                for headers in ({}, {"Authorization": "Bearer wrong"}, {"Cookie": f"{WebAuth(TOKEN, am.record.app_id).cookie}=forged"}):
                    response = await http.request(method, _concrete(path), data=b"{}", headers=headers,
                                                  allow_redirects=False)
                    body = await response.read()
                    previous = answers.setdefault((method, path), (response.status, body))
                    assert previous[0] == response.status, (method, path, headers)
        return answers
    finally:
        await am.close()


@pytest.mark.parametrize("app_of", ["am", "history"])
def test_every_route_but_signing_in_answers_401_without_the_job(app_of: str) -> None:
    answers = asyncio.run(_without_credentials(app_of))
    assert len(answers) >= 30 if app_of == "am" else len(answers) >= 20
    for (method, path), (status, body) in answers.items():
        if (method, path) in PUBLIC:
            assert status == PUBLIC[method, path][1], (method, path, status)
        else:
            assert status == 401, (method, path, status, body[:200])
            assert "token" in json.loads(body)["error"]
        assert not JOB_DATA.search(body), (method, path, body[:200])
        assert TOKEN.encode() not in body


def test_the_allow_list_names_only_routes_that_exist() -> None:
    app, _ = _live_app()
    assert set(PUBLIC) <= set(_routes(app))
