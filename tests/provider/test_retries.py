"""Which errors the provider retries (``retries.py``), and that the async hook reads AM answers by
the same rules as the runtime's client."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error

import aiohttp
import pytest
from test_api_errors import stub_am  # noqa: F401 - the fixture
from urllib3.exceptions import MaxRetryError

from airflow_provider_primus import retries
from airflow_provider_primus.hooks.primus import PrimusAsyncHook, PrimusHook
from airflow_provider_primus.triggers.primus import PrimusJobTrigger
from conftest import make_spec, wait_for
from primus_runtime.api_client import AMClient, AMRejected, AMUnavailable, AMUntrusted
from primus_runtime.backends.local.client import LocalClusterClient
from primus_runtime.client import JobNotFound
from primus_runtime.spec import SpecError

from .test_trigger import first_event

QUICK = [{"name": "worker", "command": "sleep 0.2"}]
SLEEPY = [{"name": "worker", "command": "sleep 300"}]


@pytest.fixture
def quick_backoff(monkeypatch):
    """Retries a few milliseconds apart (the policy is the same, only shorter)."""
    monkeypatch.setattr(retries, "BACKOFF_START", 0.01)
    monkeypatch.setattr(retries, "JITTER", 0.0)


try:  # the kubernetes extra (the oldest-Airflow venv has no extras)
    from kubernetes.client.exceptions import ApiException
    KUBERNETES_CASES = [(ApiException(status=503), True), (ApiException(status=429), True),
                        (ApiException(status=403), False)]
except ImportError:
    KUBERNETES_CASES = []


@pytest.mark.parametrize(("error", "transient"), [
    (AMUnavailable("HTTP 503"), True),
    (ConnectionResetError(104, "Connection reset by peer"), True),
    (TimeoutError(), True),
    (asyncio.TimeoutError(), True),
    (aiohttp.ServerDisconnectedError(), True),
    (urllib.error.URLError("Connection refused"), True),  # YARN's ResourceManager, the WebHDFS job store
    (urllib.error.HTTPError("http://nn/webhdfs", 503, "unavailable", {}, None), True),  # type: ignore[arg-type]
    *KUBERNETES_CASES,
    (MaxRetryError(None, "/api/v1/namespaces", "connection refused"), True),  # type: ignore[arg-type]
    (urllib.error.HTTPError("http://nn/webhdfs", 404, "not found", {}, None), False),  # type: ignore[arg-type]
    (AMRejected(401, "wrong token"), False),
    (AMUntrusted("am:1", "self-signed certificate"), False),
    (JobNotFound("primus-1"), False),
    (SpecError(["roles: empty"]), False),
    (PermissionError("not a log of this job"), False),
    (FileNotFoundError("gone"), False),
    (KeyError("state"), False),  # a bug: never retried, its traceback shows
], ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else str(value))
def test_only_transient_errors_are_retried(error, transient):
    assert retries.is_transient(error) is transient


def test_the_async_hook_reads_answers_as_the_am_client_does(primus_home, stub_am, monkeypatch):  # noqa: F811
    class StubCluster:  # the job's AM is the stub server
        am_reachable_directly = True

        def __init__(self, address: str) -> None:
            self.address = address

        def am_endpoint(self, app_id: str) -> tuple[str, str]:
            return self.address, "token"

        def am_ca_file(self, app_id: str) -> None:
            return None

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{free.getsockname()[1]}"

    async def ask(address: str, path: str) -> object:
        hook = PrimusAsyncHook()
        monkeypatch.setattr(hook.client, "cluster_for", lambda app_id: StubCluster(address))
        try:
            answer = await hook._api("primus-1", "GET", path)
            return json.loads(answer) if isinstance(answer, bytes) else answer  # its bytes, as the AM sent them
        except AMRejected as exc:
            return exc
        finally:
            await hook.aclose()

    def sync(path: str) -> object:
        try:
            return AMClient(stub_am, "token").get("/api/v1" + path, timeout=5)
        except AMUnavailable:
            return None  # what ClusterClient.am_request makes of it, as the async hook does
        except AMRejected as exc:
            return exc

    for path in ("/ok", "/busy", "/ending", "/token"):
        got, expected = asyncio.run(ask(stub_am, path)), sync(path)
        assert type(got) is type(expected) and str(got) == str(expected), path
    assert asyncio.run(ask(closed, "/ok")) is None  # nobody listens: no AM answers


class FlakyStore:
    """The job store's reads fail ``failures`` times (a NameNode or API server restarting)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, failures: int) -> None:
        self.failures, self.calls = failures, 0
        original = LocalClusterClient.final_status

        def final_status(cluster: LocalClusterClient, app_id: str) -> object:
            self.calls += 1
            if self.calls <= self.failures:
                raise ConnectionResetError(104, f"store read {self.calls} reset")
            return original(cluster, app_id)

        monkeypatch.setattr(LocalClusterClient, "final_status", final_status)


def finished_job(client) -> str:
    app_id = PrimusHook().submit(make_spec(QUICK))
    wait_for(lambda: client.status(app_id).job.state == "succeeded" and client.cluster("local").am_endpoint(app_id) is None,
             60, "the job done and its AM gone")
    return app_id


def test_a_transient_read_error_is_retried_and_each_retry_logged_once_with_its_cause(
        primus_home, client, monkeypatch, quick_backoff, capsys):
    app_id = finished_job(client)
    store = FlakyStore(monkeypatch, failures=2)
    assert PrimusHook().status(app_id).job.state == "succeeded"
    retried = [line for line in capsys.readouterr().out.splitlines() if f"status of Primus job {app_id} failed" in line]
    assert len(retried) == 2 and store.calls == 3, retried
    assert "ConnectionResetError" in retried[0] and "store read 1 reset" in retried[0] and "attempt 2 of 5" in retried[0]


def test_the_async_hook_retries_as_well_and_the_trigger_fires_error_once_retries_run_out(
        primus_home, client, monkeypatch, quick_backoff):
    app_id = finished_job(client)
    FlakyStore(monkeypatch, failures=1)
    assert first_event(PrimusJobTrigger(app_id, poll_interval=0.1))["status"] == "success"
    store = FlakyStore(monkeypatch, failures=99)
    event = first_event(PrimusJobTrigger(app_id, poll_interval=0.1))
    assert event["status"] == "error" and store.calls == retries.ATTEMPTS
    assert "ConnectionResetError" in event["reason"] and "reset" in event["reason"]


def test_a_refusal_of_the_am_fails_at_once_with_its_message(primus_home, client, capsys):
    hook = PrimusHook()
    app_id = hook.submit(make_spec(SLEEPY))
    wait_for(lambda: client.status(app_id).job.state == "running", 60, "the job running")
    client.cluster("local").job(app_id).token.write_text("not-the-token\n")  # every request is now refused: 401
    with pytest.raises(AMRejected, match="HTTP 401"):
        hook.status(app_id)
    event = first_event(PrimusJobTrigger(app_id, poll_interval=0.1))
    assert event["status"] == "error" and "AMRejected: HTTP 401" in event["reason"], event
    assert "failed (" not in capsys.readouterr().out  # no retry was logged
    client.cluster("local").force_kill(app_id)
