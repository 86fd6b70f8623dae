"""The AM's REST API: every endpoint needs the token; the protocol fences zombies."""

from __future__ import annotations

import http.client
import json

import pytest

from conftest import executor, make_spec, wait_for
from primus_runtime import protocol
from primus_runtime.am.openapi import openapi_document
from primus_runtime.api_client import AMClient
from primus_runtime.backends.local.jobs import processes_of_job


@pytest.fixture(scope="module")
def module_client(tmp_path_factory):
    from primus_runtime.client import PrimusClient

    return PrimusClient(tmp_path_factory.mktemp("api") / "home")


@pytest.fixture(scope="module")
def running_job(module_client):
    client = module_client
    app = client.submit(make_spec([{"name": "worker", "replicas": 1, "command": "sleep 300"}]))
    wait_for(lambda: client.status(app).job.state == "running", 30, "job running")
    address, token = client.cluster("local").am_endpoint(app)
    yield app, address, token
    client.kill(app)


def _raw(address: str, method: str, path: str, headers: dict[str, str] | None = None, body: bytes | None = None):
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request(method, path, body, headers or {})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, data


ROUTES = [(method.upper(), path) for path, ops in openapi_document()["paths"].items() for method in ops]


@pytest.mark.parametrize("method,path", ROUTES)
def test_every_endpoint_answers_401_without_the_token(running_job, method, path):
    _, address, token = running_job
    path = path.replace("{role}", "worker").replace("{executor}", "worker-0").replace("{stream}", "stdout")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token},
                    {protocol.TOKEN_HEADER: "wrong"}, {protocol.TOKEN_HEADER: "Bearer " + token},
                    {"Authorization": "Bearer wrong", protocol.TOKEN_HEADER: token[:-1]}):
        status, body = _raw(address, method, path, headers, b"{}" if method == "POST" else None)
        assert status == 401, (path, headers)
        assert b"token" in body and token.encode() not in body


@pytest.mark.parametrize("headers", [
    lambda token: {protocol.TOKEN_HEADER: token},  # what passes the Kubernetes API server's proxy
    lambda token: {"Authorization": "Bearer wrong", protocol.TOKEN_HEADER: token},  # the proxy's own bearer
    lambda token: {"Authorization": "Bearer " + token},
])
def test_the_token_is_accepted_in_either_header(running_job, headers):
    _, address, token = running_job
    status, body = _raw(address, "GET", "/api/v1/job", headers(token))
    assert status == 200 and json.loads(body)["state"] == "running"


def test_openapi_lists_exactly_the_served_routes(running_job):
    from primus_runtime.am.master import ApplicationMaster
    from primus_runtime.am.server import build_app
    from primus_runtime.spec import JobSpec

    spec = JobSpec.from_dict(make_spec([{"name": "worker", "command": "x"}]))
    app = build_app(ApplicationMaster(spec, "app", backend=None), "t")  # type: ignore[arg-type]
    served = {(r.method, r.resource.canonical) for r in app.router.routes()}
    assert served - PAGE == set(ROUTES)
    assert served & PAGE == PAGE


# The page, its files and signing in: the routes the token does not guard (tests/test_web_auth.py).
PAGE = {("GET", "/"), ("GET", "/ui"), ("GET", "/ui/"), ("GET", "/ui/login"), ("GET", "/ui/static/{name}")}
PAGE |= {("HEAD", path) for _, path in PAGE} | {("POST", "/ui/login"), ("POST", "/ui/logout")}


def test_status_endpoints_describe_the_job(running_job):
    app, address, token = running_job
    api = AMClient(address, token)
    job = api.get("/api/v1/job", timeout=10)
    assert job["app_id"] == app and job["state"] == "running"
    roles = api.get("/api/v1/roles", timeout=10)["roles"]
    assert roles[0]["name"] == "worker" and roles[0]["states"]["running"] == 1
    ex = api.get("/api/v1/executors?role=worker", timeout=10)["executors"][0]
    assert ex["host"] == "127.0.0.1" and len(ex["ports"]) == 1 and ex["restarts"] == 0
    assert set(ex["logs"]) == {"executor", "stdout", "stderr"}
    events = api.get("/api/v1/events?since=1", timeout=10)["events"]
    assert events[0]["seq"] == 2


def test_bad_requests_get_clear_errors(running_job):
    _, address, token = running_job
    auth = {"Authorization": "Bearer " + token}
    status, body = _raw(address, "POST", "/api/v1/roles/worker/scale", auth, b"not json")
    assert status == 400 and b"not valid JSON" in body
    status, body = _raw(address, "POST", "/api/v1/roles/worker/scale", auth, b'{"replicas": "many"}')
    assert status == 400 and b"scale body: replicas: should be a valid integer, got 'many'" in body
    status, body = _raw(address, "GET", "/api/v1/events?since=x", auth)
    assert status == 400
    status, body = _raw(address, "POST", protocol.REGISTER_PATH, auth, b'{"incarnation": "x", "host": "h"}')
    assert status == 200 and b'"ok": false' in body  # unknown incarnation: told to die, nothing else


def test_a_malformed_executor_report_is_a_400_and_changes_nothing():
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from primus_runtime.am.master import ApplicationMaster
    from primus_runtime.am.server import build_app
    from primus_runtime.spec import JobSpec
    from simulated_backend import SimulatedBackend

    async def scenario():
        spec = JobSpec.from_dict(make_spec([{"name": "worker", "command": "x"}]))
        am = ApplicationMaster(spec, "app", SimulatedBackend())
        await am.start("127.0.0.1:1")
        incarnation = am.record.executors["worker-0"].incarnation
        async with TestClient(TestServer(build_app(am, "t"))) as http:
            reply = await http.post(protocol.REGISTER_PATH, json={"incarnation": incarnation},
                                    headers={"Authorization": "Bearer t"})
            assert reply.status == 400
            assert (await reply.json())["error"] == "register body: host: field required"
        assert am.record.executors["worker-0"].state.value == "starting"
        await am.close()

    asyncio.run(scenario())


def test_reports_from_an_old_incarnation_are_answered_with_kill(running_job, module_client):
    client = module_client
    app, address, token = running_job
    api = AMClient(address, token)
    ex = executor(client.status(app), "worker-0")
    zombie = {"id": "worker-0", "incarnation": "not-" + ex.incarnation, "state": "running"}
    reply = api.post(protocol.HEARTBEAT_PATH, zombie, timeout=10)
    assert reply["command"] == protocol.CMD_KILL
    register = api.post(protocol.REGISTER_PATH, {**zombie, "host": "h", "ports": [1]}, timeout=10)
    assert register["ok"] is False and register["command"] == protocol.CMD_KILL
    api.post(protocol.UNREGISTER_PATH, {**zombie, "exit_code": 1}, timeout=10)
    # The zombie's reports changed nothing.
    assert executor(client.status(app), "worker-0").state == "running"


def test_token_never_reaches_logs_or_the_trainer(running_job, module_client):
    client = module_client
    app, _, token = running_job
    job_dir = client.cluster("local").jobs / app
    for path in job_dir.rglob("*"):
        if path.is_file() and path.name != "token":
            assert token not in path.read_text(errors="replace"), path
    assert (job_dir / "token").stat().st_mode & 0o077 == 0
    assert token not in client.status(app).model_dump_json()
    trainers = [pid for pid in processes_of_job(app) if b"primus" not in _cmdline(pid)]
    assert trainers, "no trainer process found"
    for pid in trainers:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
        assert token.encode() not in environ and protocol.ENV_TOKEN_FILE.encode() not in environ


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


@pytest.mark.parametrize("path,body,error", [
    (protocol.HEARTBEAT_PATH, {"cluster_version": "abc"}, "heartbeat body: cluster_version: should be a valid integer, "
                                                          "got 'abc'"),
    (protocol.HEARTBEAT_PATH, {"need_tasks": "many", "progress": "x"},
     "heartbeat body: need_tasks: should be a valid integer, got 'many'; progress: should be an object, got 'x'"),
    (protocol.UNREGISTER_PATH, {"exit_code": "1"}, "unregister body: exit_code: should be a valid integer, got '1'"),
])
def test_a_live_executors_malformed_report_is_a_400_naming_the_field(running_job, module_client, path, body, error):
    app, address, token = running_job
    live = executor(module_client.status(app), "worker-0")
    status, reply = _raw(address, "POST", path, {"Authorization": "Bearer " + token},
                         json.dumps({"id": "worker-0", "incarnation": live.incarnation, **body}).encode())
    assert (status, json.loads(reply)["error"]) == (400, error)
    assert executor(module_client.status(app), "worker-0").model_dump(mode="json") == \
        {**live.model_dump(mode="json"), "state": "running"}


@pytest.mark.parametrize("query,error", [
    ("/status?events=abc", "query parameter: events: should be a valid integer, unable to parse string as an "
                           "integer, got 'abc'"),
    ("/status?events=-1", "query parameter: events: should be greater than or equal to 0, got '-1'"),
    ("/events?since=-3", "query parameter: since: should be greater than or equal to 0, got '-3'"),
    ("/executors?history=maybe", "query parameter: history: should be a valid boolean, unable to interpret "
                                 "input, got 'maybe'"),
])
def test_bad_query_parameters_are_a_400_naming_the_parameter(running_job, query, error):
    _, address, token = running_job
    status, reply = _raw(address, "GET", "/api/v1" + query, {"Authorization": "Bearer " + token})
    assert (status, json.loads(reply)["error"]) == (400, error)


def test_status_events_zero_returns_no_events(running_job):
    _, address, token = running_job
    status, reply = _raw(address, "GET", "/api/v1/status?events=0", {"Authorization": "Bearer " + token})
    assert status == 200 and json.loads(reply)["events"] == []


def test_every_status_reply_is_what_the_models_describe(running_job, module_client):
    from primus_runtime import models

    app, address, token = running_job
    api = AMClient(address, token)
    models.StatusDocument.model_validate(api.get("/api/v1/status", timeout=10))
    models.JobSummary.model_validate(api.get("/api/v1/job", timeout=10))
    models.RolesReply.model_validate(api.get("/api/v1/roles", timeout=10))
    models.ExecutorsReply.model_validate(api.get("/api/v1/executors?history=1", timeout=10))
    models.EventsReply.model_validate(api.get("/api/v1/events", timeout=10))


def test_unknown_paths_and_methods_get_json_errors(running_job):
    _, address, token = running_job
    auth = {"Authorization": "Bearer " + token}
    for method, path, code in (("GET", "/api/v1/nothing", 404), ("POST", "/api/v1/roles/a/b/scale", 404),
                               ("DELETE", "/api/v1/status", 405)):
        status, body = _raw(address, method, path, auth)
        assert status == code, (method, path, body)
        assert json.loads(body)["error"].endswith(f"{method} {path}"), body

    too_big = b'{"incarnation": "' + b"x" * (2 << 20) + b'"}'
    for path in ("/api/v1/executors/heartbeat", "/api/v1/job/kill"):
        status, body = _raw(address, "POST", path, {**auth, "Content-Type": "application/json"}, too_big)
        assert status == 413, (path, body)
        assert json.loads(body)["error"].endswith(f"POST {path}"), body
