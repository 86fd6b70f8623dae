"""Schemathesis against the AM's own OpenAPI document, on a real AM served on a loopback port:
every operation, with valid and invalid requests, answers 2xx/4xx as documented, in the documented
shape (the document is generated from the models the server validates with, so a mismatch is a bug
in one or the other)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from aiohttp import web
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from conftest import make_spec
from primus_runtime.am.master import ApplicationMaster
from primus_runtime.am.openapi import openapi_document
from primus_runtime.am.server import build_app
from primus_runtime.spec import JobSpec
from simulated_backend import SimulatedBackend

TOKEN = "fuzz-token"
AUTH = {"Authorization": "Bearer " + TOKEN}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]

schema = schemathesis.openapi.from_dict(openapi_document())
schema.config.generation.update(modes=["positive", "negative"], max_examples=30, deterministic=True)


class ServedAM:
    """An AM on the simulated backend (its executors never start: the fuzzing plays no executor),
    served by aiohttp on a loopback port from a thread of its own."""

    def __init__(self) -> None:
        spec = JobSpec.from_dict(make_spec([{"name": "worker", "command": "x", "replicas": 2}],
                                           am={"heartbeat_timeout": "600s"}))
        self.loop = asyncio.new_event_loop()
        self.am = ApplicationMaster(spec, "app", SimulatedBackend())
        self.runner = web.AppRunner(build_app(self.am, TOKEN))
        started = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(started,), daemon=True)
        self.thread.start()
        started.wait(30)
        self.url = f"http://127.0.0.1:{self.port}"

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        started.set()
        self.loop.run_forever()

    async def _start(self) -> None:
        await self.am.start("127.0.0.1:1")
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()

    async def _stop(self) -> None:
        await self.runner.cleanup()
        await self.am.close()


@pytest.fixture(scope="module")
def served() -> Iterator[ServedAM]:
    am = ServedAM()
    yield am
    am.close()


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    with requests.Session() as http:
        yield http


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
def test_every_operation_answers_as_documented(case: Any, served: ServedAM, session: requests.Session) -> None:
    case.call_and_validate(base_url=served.url, session=session, headers=AUTH, checks=CHECKS)


def _bounded_strings() -> Iterator[tuple[str, str, str, int]]:
    """(method, path, parameter, maxLength or 0) of every free-text path or query parameter."""
    for path, methods in openapi_document()["paths"].items():
        for method, operation in methods.items():
            for param in operation.get("parameters", []):
                alternatives = param["schema"].get("anyOf", [param["schema"]])
                texts = [alt for alt in alternatives if alt.get("type") == "string" and "enum" not in alt]
                if texts:
                    yield method.upper(), path, param["name"], max(alt.get("maxLength", 0) for alt in texts)


def test_every_string_parameter_is_bounded_within_a_request_line(served: ServedAM, session: requests.Session) -> None:
    """The longest value the document allows, in characters that percent-encode longest, reaches the
    handler (the server's HTTP parser refuses longer request lines with a plain-text 400)."""
    checked = 0
    for method, path, name, bound in _bounded_strings():
        assert bound, f"{method} {path}: parameter {name} has no maxLength"
        longest = "\U0001f600" * bound
        url = served.url + path
        params = {}
        for other in ("role", "executor", "stream"):
            url = url.replace(f"{{{other}}}", longest if other == name else "worker-0")
        if f"{{{name}}}" not in path:
            params[name] = longest
        response = session.request(method, url, params=params, headers=AUTH, json={} if method == "POST" else None)
        assert response.headers["Content-Type"].startswith("application/json"), (method, path, name, response.text)
        checked += 1
    assert checked >= 8
