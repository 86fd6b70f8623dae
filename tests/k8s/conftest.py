"""The Kubernetes test cluster (scripts/k8s-cluster.sh) for tests/k8s.

A real etcd + kube-apiserver + kube-controller-manager and one node run by the node agent, a
stand-in for the kubelet (scripts/k8s/node_agent.py): pods run as local processes of this machine,
with IPs from 10.244.0.0/24 on the loopback device of a private network namespace.

If PRIMUS_K8S_CLUSTER_DIR names a running cluster (scripts/test.sh starts one inside
scripts/in-netns.sh), the tests use it and leave it running. Otherwise, when the binaries are built,
we are root and inside a private network namespace, the session starts its own in a fresh directory
and stops it at the end (the directory is kept when a test failed). Else the tests are skipped, with
the reason; scripts/test.sh always provides the cluster, so CI never skips them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import wait_for

kubernetes = pytest.importorskip("kubernetes", reason="the kubernetes client (pip extra 'kubernetes') is missing")
from kubernetes import client, config  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "k8s-cluster.sh"


@dataclass(frozen=True)
class K8sCluster:
    dir: Path
    node: str = "primus-node-0"
    node_ip: str = "10.244.0.1"
    pod_cidr: str = "10.244.0.0/24"

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "admin.kubeconfig"

    def api_client(self) -> client.ApiClient:
        """A new client authenticated as the cluster admin (group system:masters)."""
        return config.new_client_from_config(str(self.kubeconfig))

    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client())

    def pod_dirs(self, namespace: str, pod: str) -> list[Path]:
        """The node agent's folders of this pod (logs/CONTAINER.log, volumes/, work/)."""
        return sorted((self.dir / "pods").glob(f"{namespace}_{pod}_*"))


def _running(directory: Path) -> bool:
    return subprocess.run([str(SCRIPT), "status", str(directory)], capture_output=True).returncode == 0


def _why_not_startable() -> str | None:
    built = subprocess.run([str(SCRIPT), "built"], capture_output=True, text=True)
    if built.returncode != 0:
        return f"the Kubernetes binaries are not built (run scripts/k8s-cluster.sh build): {built.stderr.strip()}"
    if os.geteuid() != 0:
        return "the node agent (kubelet stand-in) needs root: pod IPs on lo, a mount namespace per container"
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout.splitlines()
    if any(": lo:" not in line for line in links):
        return "not in a private network namespace: run pytest under scripts/in-netns.sh (or use scripts/test.sh)"
    return None


_failed: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if outcome.get_result().failed and "tests/k8s" in str(item.fspath).replace(os.sep, "/"):
        _failed.append(item.nodeid)


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[K8sCluster]:
    given = os.environ.get("PRIMUS_K8S_CLUSTER_DIR")
    if given:
        assert _running(Path(given)), f"PRIMUS_K8S_CLUSTER_DIR={given}: no running cluster there"
        yield K8sCluster(Path(given))
        return
    reason = _why_not_startable()
    if reason:
        pytest.skip(reason)
    directory = Path(tempfile.mkdtemp(prefix="primus-k8s-"))
    try:
        subprocess.run([str(SCRIPT), "start", str(directory)], check=True)
        yield K8sCluster(directory)
    finally:
        subprocess.run([str(SCRIPT), "stop", str(directory)], check=False)
        if _failed:
            print(f"\nk8s-cluster: kept {directory} (logs/, pods/*/logs/)")
        else:
            shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def k8s_core(k8s_cluster: K8sCluster) -> client.CoreV1Api:
    return k8s_cluster.core()


@pytest.fixture
def k8s_namespace(k8s_cluster: K8sCluster, k8s_core: client.CoreV1Api, request) -> Iterator[str]:
    """A fresh namespace, ready for pods (its `default` ServiceAccount exists); deleted after the test."""
    name = f"t-{request.node.name[:40].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:6]}"
    name = "".join(ch for ch in name if ch.isalnum() or ch == "-")
    k8s_core.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: k8s_core.list_namespaced_service_account(name, field_selector="metadata.name=default").items,
             timeout=30, what=f"the default ServiceAccount of namespace {name}")
    yield name
    k8s_core.delete_namespace(name)


def pod_manifest(name: str, command: list[str], **spec: object) -> dict:
    """A one-container pod (restartPolicy Never, grace 2 s); ``spec`` adds or overrides pod spec fields,
    ``container`` (a dict) container fields, ``labels``/``annotations`` metadata."""
    container = {"name": "main", "image": "ignored-by-the-node-agent", "command": command,
                 **spec.pop("container", {})}  # type: ignore[dict-item]
    metadata = {"name": name, "labels": spec.pop("labels", {"app": name}), "annotations": spec.pop("annotations", {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2, "containers": [container], **spec}}


@pytest.fixture
def run_pod(k8s_core: client.CoreV1Api, k8s_namespace: str) -> Callable[..., client.V1Pod]:
    """Create a pod (see pod_manifest) and wait until its phase is one of ``until``; returns it."""

    def run(name: str, command: list[str], until: tuple[str, ...] = ("Succeeded", "Failed"),
            timeout: float = 60, **spec: object) -> client.V1Pod:
        k8s_core.create_namespaced_pod(k8s_namespace, pod_manifest(name, command, **spec))
        return wait_for(lambda: _in_phase(k8s_core.read_namespaced_pod(name, k8s_namespace), until),
                        timeout=timeout, what=f"pod {name} in phase {until}")

    return run


def _in_phase(pod: client.V1Pod, phases: tuple[str, ...]) -> client.V1Pod | None:
    return pod if pod.status.phase in phases else None


def pod_log(core: client.CoreV1Api, namespace: str, name: str, **params: object) -> str:
    """The pod's log through the API server (which reads it from the node agent's kubelet API).
    Raw bytes, decoded here: kubernetes 36's read_namespaced_pod_log returns the repr of bytes
    (kubernetes-client/python#2596)."""
    reply = core.read_namespaced_pod_log(name, namespace, _preload_content=False, **params)
    return reply.data.decode()
