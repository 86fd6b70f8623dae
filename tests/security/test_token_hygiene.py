"""The job token stays where it is kept (the job directory's private ``token`` file, and the memory
of the AM and executors): never in a process's argv, a trainer's environment, a log, a status or
history file, or an API answer. A real local job whose trainers print their environment and argv."""

from __future__ import annotations

import asyncio
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from conftest import make_spec, wait_for
from primus_runtime import protocol
from primus_runtime.am.openapi import openapi_document
from primus_runtime.backends.local.jobs import processes_of_job
from primus_runtime.client import PrimusClient
from primus_runtime.ui.history import archive_view, history_app

MARK = "hygiene-trainer"
# The trainer shows everything it was given: a token there would reach its logs too.
TRAINER = (f"exec {sys.executable} -c 'import os, sys, time; print(sys.argv, dict(os.environ), flush=True); "
           f"print(dict(os.environ), file=sys.stderr, flush=True); time.sleep(300)' {MARK}")


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrimusClient, Path, str, str, str]]:
    """(client, its home, app id, AM address, token) of a running job with two trainers."""
    home = tmp_path_factory.mktemp("hygiene") / "home"
    client = PrimusClient(home)
    app = client.submit(make_spec([{"name": "worker", "replicas": 2, "command": TRAINER}]))
    try:
        wait_for(lambda: len(_trainers(app)) == 2 and client.status(app).job.state == "running", 60,
                 "two trainers running")
        address, token = client.cluster("local").am_endpoint(app)
        yield client, home, app, address, token
    finally:
        if processes_of_job(app):
            client.cluster("local").force_kill(app)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:  # it ended meanwhile
        return b""


def _trainers(app: str) -> list[int]:
    return [pid for pid in processes_of_job(app) if MARK.encode() in _read(f"/proc/{pid}/cmdline")]


def _get(address: str, token: str, path: str) -> bytes:
    """The answer's body, an error's too (this job has no input: /data answers 404)."""
    request = urllib.request.Request(f"http://{address}{path}", headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        assert exc.code == 404, (path, exc.code)
        return exc.read()


def _files_without_the_token_file(home: Path) -> Iterator[Path]:
    for path in home.rglob("*"):
        if path.is_file() and path.name != "token":
            yield path


def _every_read_answer(get: object, executors: list[str]) -> Iterator[tuple[str, bytes]]:
    """Each GET route of the API, with every executor's every log."""
    for path, methods in openapi_document()["paths"].items():
        if "get" not in methods:
            continue
        if "{executor}" not in path:
            yield path, get(path)  # type: ignore[operator]
            continue
        for executor_id in executors:
            for stream in ("stdout", "stderr", "executor"):
                concrete = path.replace("{executor}", executor_id).replace("{stream}", stream)
                yield concrete, get(concrete)  # type: ignore[operator]


def test_the_token_is_in_no_process_argv_and_no_trainer_environment(job):
    client, home, app, _, token = job
    processes = processes_of_job(app)
    assert len(processes) >= 5, processes  # the AM, two executors and their trainers
    for pid in processes:
        assert token.encode() not in _read(f"/proc/{pid}/cmdline"), pid
    for pid in _trainers(app):
        environ = _read(f"/proc/{pid}/environ")
        assert environ, pid
        assert token.encode() not in environ
        assert protocol.ENV_TOKEN_FILE.encode() not in environ  # nor the way to it


def test_the_api_answers_and_the_running_jobs_files_carry_no_token(job):
    client, home, app, address, token = job
    answers = dict(_every_read_answer(lambda path: _get(address, token, path), ["worker-0", "worker-1"]))
    assert b"hygiene-trainer" in answers[protocol.API_PREFIX + "/executors/worker-0/logs/stdout"]
    for path, answer in answers.items():
        assert token.encode() not in answer, path
    for path in _files_without_the_token_file(home):
        assert token.encode() not in path.read_bytes(), path


def test_after_the_job_its_files_and_history_pages_carry_no_token(job):
    client, home, app, _, token = job
    client.kill(app, timeout=60)
    wait_for(lambda: not processes_of_job(app), 30, "every process of the job gone")
    logs = [path for path in _files_without_the_token_file(home) if path.suffix == ".log"]
    assert any(MARK.encode() in path.read_bytes() for path in logs), logs
    for path in _files_without_the_token_file(home):
        assert token.encode() not in path.read_bytes(), path

    app_view = archive_view(client, app)
    web, auth = history_app(app_view)

    async def history_answers() -> dict[str, bytes]:
        async with TestClient(TestServer(web)) as http:
            headers = {"Authorization": "Bearer " + auth.token}
            found = {}
            for path, methods in openapi_document()["paths"].items():
                if "get" in methods and path != "/metrics":
                    concrete = path.replace("{executor}", "worker-0").replace("{stream}", "stdout")
                    found[concrete] = await (await http.get(concrete, headers=headers)).read()
            return found

    answers = asyncio.run(history_answers())
    assert b"hygiene-trainer" in answers[protocol.API_PREFIX + "/executors/worker-0/logs/stdout"]
    for path, answer in answers.items():
        assert token.encode() not in answer, path
