"""The AM's thin API client (backends/kubernetes/api.py) against the test cluster's real API server:
credentials, the watch resumed from its resourceVersion after a dropped connection, a version gone
(410) listed again, an unreachable server said at once; and container logs read from where the
last read ended (logs.py) by the AM and by the client. The cluster's API server watches ConfigMaps
from etcd (no watch cache): compacting etcd makes an old version gone."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import wait_for
from primus_runtime import protocol
from primus_runtime.backends.base import ClientOptions
from primus_runtime.backends.kubernetes import logs
from primus_runtime.backends.kubernetes import manifests as m
from primus_runtime.backends.kubernetes.api import (
    ApiError,
    ApiUnreachable,
    KubeApi,
    config_maps_path,
    from_kubeconfig,
    list_and_watch,
    pods_path,
)
from primus_runtime.backends.kubernetes.client import cluster_client
from primus_runtime.backends.kubernetes.executors import KubernetesExecutorBackend
from primus_runtime.spec import JobSpec

from .conftest import pod_manifest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from netfault import FaultProxy, free_port  # noqa: E402

LABEL = "test.primus.io/watched"
WAIT = 30.0  # seconds any one expected event may take; generous: the machine is shared


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def admin(k8s_cluster):
    return from_kubeconfig(str(k8s_cluster.kubeconfig))


def config_map(name: str, value: str = "1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {LABEL: "yes"}},
            "data": {"v": value}}


class Events:
    """``list_and_watch`` running in the background; its events by (kind, names) as they come."""

    def __init__(self, stream: AsyncIterator[tuple[str, list[dict[str, Any]]]]):
        self.queue: asyncio.Queue[tuple[str, list[str]]] = asyncio.Queue()
        self.task = asyncio.ensure_future(self._pump(stream))

    async def _pump(self, stream: AsyncIterator[tuple[str, list[dict[str, Any]]]]) -> None:
        async for kind, objects in stream:
            await self.queue.put((kind, sorted(o["metadata"]["name"] for o in objects)))

    async def next(self) -> tuple[str, list[str]]:
        return await asyncio.wait_for(self.queue.get(), WAIT)

    def close(self) -> None:
        self.task.cancel()


def test_kubeconfig_credentials_with_a_client_certificate_or_a_token(k8s_cluster, k8s_core, k8s_namespace, admin,
                                                                     tmp_path):
    async def as_admin() -> list[str]:
        api = KubeApi(admin)
        try:
            listing = await api.get(f"/api/v1/namespaces/{k8s_namespace}/serviceaccounts")
            return [item["metadata"]["name"] for item in listing["items"]]
        finally:
            await api.close()

    assert "default" in run(as_admin())
    # A token user (tokenFile, relative to the kubeconfig) of a service account without rights.
    token = k8s_core.create_namespaced_service_account_token(
        "default", k8s_namespace, {"spec": {"audiences": [], "expirationSeconds": 600}}).status.token
    config = yaml.safe_load(k8s_cluster.kubeconfig.read_text())
    config["users"][0]["user"] = {"tokenFile": "token"}
    (tmp_path / "token").write_text(token)
    (tmp_path / "config").write_text(yaml.safe_dump(config))

    async def as_default_account() -> ApiError:
        api = KubeApi(from_kubeconfig(str(tmp_path / "config")))
        try:
            with pytest.raises(ApiError) as refused:
                await api.get(pods_path(k8s_namespace))
            return refused.value
        finally:
            await api.close()

    refused = run(as_default_account())
    assert refused.status == 403 and "system:serviceaccount:" in refused.message  # known, and not allowed


def test_the_watch_resumes_from_its_resource_version_after_the_connection_drops(k8s_core, k8s_namespace, admin):
    """Changes made while the watch's connection is down arrive once it is back, as events, without
    listing again (no second SYNC) and without repeating what it saw."""
    path = config_maps_path(k8s_namespace)

    async def scenario() -> list[tuple[str, list[str]]]:
        with FaultProxy(("127.0.0.1", int(admin.server.rsplit(":", 1)[1]))) as proxy:
            api = KubeApi(dataclasses.replace(admin, server=f"https://{proxy.address}"))
            events = Events(list_and_watch(api, path, f"{LABEL}=yes"))
            seen = [await events.next()]
            await asyncio.to_thread(k8s_core.create_namespaced_config_map, k8s_namespace, config_map("a"))
            seen.append(await events.next())
            proxy.set("reset")  # the watch's connection is reset, and every new one while so
            await asyncio.to_thread(k8s_core.create_namespaced_config_map, k8s_namespace, config_map("b"))
            await asyncio.to_thread(k8s_core.patch_namespaced_config_map, "a", k8s_namespace, {"data": {"v": "2"}})
            await asyncio.sleep(0.5)  # the watcher tries (and fails) to reconnect meanwhile
            proxy.set("pass")
            seen += [await events.next(), await events.next()]
            events.close()
            await api.close()
            return seen

    assert run(scenario()) == [("SYNC", []), ("ADDED", ["a"]), ("ADDED", ["b"]), ("MODIFIED", ["a"])]


def etcd_compact(etcd: str) -> None:
    """Compact etcd at its current revision (its JSON gateway): every older version is gone."""
    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(etcd + path, json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as reply:
            answer: dict[str, Any] = json.loads(reply.read())
            return answer

    revision = post("/v3/kv/range", {"key": "eA=="})["header"]["revision"]
    post("/v3/kv/compaction", {"revision": revision, "physical": True})


async def drain(events: AsyncIterator[Any]) -> list[Any]:
    return [event async for event in events]


def test_a_watch_from_a_version_gone_lists_again(k8s_cluster, k8s_core, k8s_namespace, admin):
    """410 Gone (the version was compacted away) is answered by listing again: a SYNC with every
    object, then the watch goes on from the listing's version."""
    path = config_maps_path(k8s_namespace)
    created = k8s_core.create_namespaced_config_map(k8s_namespace, config_map("a"))
    old_version = created.metadata.resource_version
    k8s_core.create_namespaced_config_map(k8s_namespace, config_map("b"))
    # One more write: etcd keeps the revision it is compacted at, which must be past the first
    # change after old_version (b's).
    k8s_core.create_namespaced_config_map(k8s_namespace, {"metadata": {"name": "unwatched"}})
    etcd_compact(json.loads((k8s_cluster.dir / "ready.json").read_text())["etcd"])

    async def scenario() -> list[tuple[str, list[str]]]:
        api = KubeApi(admin)
        with pytest.raises(ApiError) as gone:  # what the server says to a watch from that version
            await asyncio.wait_for(drain(api.watch(path, old_version, 5, labelSelector=f"{LABEL}=yes")), WAIT)
        assert gone.value.status == 410, gone.value
        events = Events(list_and_watch(api, path, f"{LABEL}=yes", resource_version=old_version))
        seen = [await events.next()]
        await asyncio.to_thread(k8s_core.create_namespaced_config_map, k8s_namespace, config_map("c"))
        seen.append(await events.next())
        events.close()
        await api.close()
        return seen

    assert run(scenario()) == [("SYNC", ["a", "b"]), ("ADDED", ["c"])]


def test_an_unreachable_api_server_is_said_at_once_not_waited_for(k8s_namespace, admin):
    """Refused: after the few quick retries of a connection never made. A blackhole (connections
    accepted, nothing answered): after the connect timeout. Both name the server; the AM's first
    listing (its backend's start) raises the same instead of waiting for ever."""
    spec = JobSpec.from_dict({"name": "j", "roles": [{"name": "w", "replicas": 1, "command": "x"}],
                              "backend": {"type": "kubernetes", "image": "i", "namespace": k8s_namespace}})

    async def refused() -> None:
        address = f"127.0.0.1:{free_port()}"
        api = KubeApi(dataclasses.replace(admin, server=f"https://{address}"), connect_retries=(0.05,))
        with pytest.raises(ApiUnreachable, match=f"API server at https://{address} does not answer"):
            await api.get(pods_path(k8s_namespace))
        await api.close()

    async def blackhole() -> None:
        with FaultProxy(("127.0.0.1", int(admin.server.rsplit(":", 1)[1]))) as proxy:
            proxy.set("drop")
            api = KubeApi(dataclasses.replace(admin, server=f"https://{proxy.address}"), connect_timeout=1,
                          request_timeout=2)
            with pytest.raises(ApiUnreachable, match="does not answer"):
                await asyncio.wait_for(api.get(pods_path(k8s_namespace)), WAIT)
            backend = KubernetesExecutorBackend(api, spec, "primus-j-abc123", k8s_namespace, "uid-1")
            with pytest.raises(ApiUnreachable):
                await asyncio.wait_for(backend.start(events=None), WAIT)  # type: ignore[arg-type]
            backend._watcher.cancel()  # type: ignore[union-attr]
            await api.close()

    run(refused())
    run(blackhole())


def test_the_am_process_never_imports_the_kubernetes_package():
    """The AM's modules on Kubernetes (its bootstrap, backend, store, API server and web page) load
    without the ``kubernetes`` package: it stays off the AM's start-up."""
    code = ("import sys, primus_runtime.am.main, primus_runtime.backends.kubernetes.am, primus_runtime.am.server, "
            "aiohttp.web\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'urllib3', 'google')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_am_listens_at_its_address_before_importing_its_stack():
    """PRIMUS_AM_LISTEN (the AM pod's IP and port): am/__main__.py listens there first, so the
    executors started with the job connect into the backlog while the AM imports pydantic and
    aiohttp; serve() takes that socket over."""
    port = free_port()
    code = ("import socket, sys\n"
            "from primus_runtime.am import early\n"
            "early.listen()\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'aiohttp'))\n"
            f"client = socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
            f"taken = early.socket_for('127.0.0.1', {port})\n"
            "accepted, _ = taken.accept()\n"
            "print(heavy, taken.getsockname()[1], early.socket_for('127.0.0.1', 0) is not taken)\n")
    env = {"PATH": "/usr/bin:/bin", protocol.ENV_AM_LISTEN: f"127.0.0.1:{port}"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.strip() == f"[] {port} True", out.stderr


# --- logs ------------------------------------------------------------------------------------


def stamped(*lines: tuple[str, str]) -> bytes:
    return b"".join(f"{when} {text}".encode() for when, text in lines)


def test_a_log_cursor_reads_again_from_the_second_the_last_read_ended_in():
    first = stamped(("2026-12-05T07:00:00.5Z", "a\n"), ("2026-12-05T07:00:01.25Z", "bb\n"),
                    ("2026-12-05T07:00:01.75Z", "cc"))
    read = logs.plan(None, 0, None)
    assert (read.since, read.skip, read.limit_bytes) == (None, 0, None)
    chunk, cursor = logs.take(first, read, 0, None, None)
    assert chunk == b"a\nbb\ncc" and cursor == logs.LogCursor("2026-12-05T07:00:01Z", 2)
    # Next: from the second of "bb" (the API server keeps whole seconds), skipping what was read;
    # the unfinished "cc" was finished meanwhile.
    read = logs.plan(cursor, 7, 100)
    assert (read.since, read.skip) == ("2026-12-05T07:00:01Z", 5)
    again = stamped(("2026-12-05T07:00:01.25Z", "bb\n"), ("2026-12-05T07:00:01.75Z", "ccc\n"),
                    ("2026-12-05T07:00:02.1Z", "d\n"))
    chunk, cursor = logs.take(again, read, 7, 100, cursor)
    assert chunk == b"c\nd\n"
    assert cursor == logs.LogCursor("2026-12-05T07:00:02Z", 9, kept_start=7, kept=b"c\nd\n")  # "a\nbb\nccc\n" before d
    # A page within what that read decoded is not asked for again.
    assert logs.plan(cursor, 8, 2).kept == b"\nd"
    assert logs.plan(cursor, 8, 100).kept == b"\nd\n"  # as far as it goes...
    assert logs.plan(cursor, 11, 100).kept is None  # ...past it the log may have grown: asked
    # A line cut inside its timestamp (limitBytes) is left for the next read.
    chunk, _ = logs.take(stamped(("2026-12-05T07:00:02.1Z", "d\n")) + b"2026-12-05T07:0",
                         logs.plan(cursor, 11, 100), 11, 100, cursor)
    assert chunk == b""
    # An offset before the cursor's window reads from the start.
    assert logs.plan(cursor, 3, None).since is None


BURST, TRICKLE = 3000, 40  # lines at once, then lines one every 50 ms


def chatty_pod(name: str, app: str) -> dict[str, Any]:
    """A pod of job ``app`` that prints BURST numbered lines at once, then TRICKLE more over two
    seconds, then idles."""
    code = (f"import time\nfor i in range({BURST + TRICKLE}):\n    print(f'line {{i:05d}} ' + 'x' * 60, flush=True)\n"
            f"    if i >= {BURST}: time.sleep(0.05)\ntime.sleep(600)\n")
    manifest = pod_manifest(name, ["python3", "-c", code], labels={m.LABEL_APP: app})
    manifest["spec"]["terminationGracePeriodSeconds"] = 0
    return manifest


def expected(lines: int = BURST + TRICKLE) -> bytes:
    return b"".join(f"line {i:05d} {'x' * 60}\n".encode() for i in range(lines))


def test_a_followed_log_is_read_from_where_the_last_read_ended(k8s_cluster, k8s_core, k8s_namespace):
    """The client (primus logs -f, Airflow) and the AM (the job page) follow a growing log; after the
    first read each asks only for the log since the second its last read ended in, not all of it."""
    app = "primus-logs-abc123"
    k8s_core.create_namespaced_pod(k8s_namespace, chatty_pod("chatty", app))
    path, whole = "pods/chatty/main", len(expected())
    client = cluster_client(ClientOptions(kube_config=str(k8s_cluster.kubeconfig), namespace=k8s_namespace))
    fetched: list[int] = []
    fetch = client._pod_log
    client._pod_log = lambda *a: fetched.append(len(data := fetch(*a))) or data  # type: ignore[method-assign]
    app_id = m.app_id(k8s_namespace, app)
    read = bytearray()

    def follow() -> bool:
        read.extend(client.read_log(app_id, path, len(read)))
        return len(read) >= whole

    wait_for(lambda: len(client.read_log(app_id, path, 0)) > whole // 2, timeout=60, what="the burst in the log")
    fetched.clear()
    wait_for(follow, timeout=60, what="the whole log, read as it grows", poll=0.2)
    assert bytes(read) == expected()
    # The first read is the whole log (with timestamps); the last ones the trickle's latest second.
    assert len(fetched) >= 3 and fetched[0] > whole and max(fetched[-2:]) < whole // 4, fetched

    async def the_am_follows() -> tuple[bytes, bytes, list[int]]:
        spec = JobSpec.from_dict({"name": "j", "roles": [{"name": "w", "replicas": 1, "command": "x"}],
                                  "backend": {"type": "kubernetes", "image": "i", "namespace": k8s_namespace}})
        api = KubeApi(from_kubeconfig(str(k8s_cluster.kubeconfig)))
        backend = KubernetesExecutorBackend(api, spec, app, k8s_namespace, "uid-1")
        sizes: list[int] = []
        original = api.read_log

        async def counted(*args: Any, **kwargs: Any) -> bytes:
            data = await original(*args, **kwargs)
            sizes.append(len(data))
            return data

        api.read_log = counted  # type: ignore[method-assign]
        tail, size = await backend.read_log(path, -1000, 1000)  # the page opens at the end
        assert size == whole
        paged = b""
        while chunk := (await backend.read_log(path, len(paged), 4096))[0]:  # then reads on, page by page
            paged += chunk
        await api.close()
        return tail, paged, sizes

    tail, paged, sizes = run(the_am_follows())
    assert tail == expected()[-1000:] and paged == expected()
    assert len(sizes) <= 3, sizes  # the pages come from what the reads kept, not one read each


def test_a_missing_namespace_is_refused_and_nothing_is_created(k8s_cluster, k8s_core):
    client = cluster_client(ClientOptions(kube_config=str(k8s_cluster.kubeconfig)))
    spec = JobSpec.from_dict({"name": "nowhere", "roles": [{"name": "w", "replicas": 2, "command": "x"}],
                              "backend": {"type": "kubernetes", "image": "i", "namespace": "no-such-namespace"}})
    with pytest.raises(Exception, match="backend.namespace: no namespace 'no-such-namespace'"):
        client.submit(spec)
