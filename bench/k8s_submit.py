"""Kubernetes: submit -> every executor's trainer running, for a Primus job of 1 AM + N executors,
against creating the same N pods directly with the kubernetes client; and an executor pod
deleted -> its replacement's trainer running, against a plain pod create -> running.

Both sides run on the same test cluster (scripts/k8s-cluster.sh: a real API server, controller
manager and etcd, and the node agent that stands in for the kubelet and runs each container as a
local process), and "running" means the same thing on both: the trainer command has started (it
touches a marker file named after its pod first). The Primus side adds what a Primus job needs:
the spec is validated, the AM's ServiceAccount, Role, ConfigMaps and Secret are created, the AM
pod starts (Python), creates each executor pod, executors register and are told to start their
trainers.

Uses the cluster of PRIMUS_K8S_CLUSTER_DIR when it names a running one; else re-runs itself in a
private network namespace (scripts/in-netns.sh, root) and starts and stops its own. RUNS rounds
(default 3) after a warm-up, each a Primus run then a direct run; the last line is the ratio of
the medians, Primus / direct (goal: at most 1.5).

    python bench/k8s_submit.py            # EXECUTORS=8 RUNS=3 REPLACEMENTS=5 AM_ATTEMPTS (spec default)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import clear, median_ms  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "k8s-cluster.sh"
EXECUTORS = int(os.environ.get("EXECUTORS", 8))
RUNS = int(os.environ.get("RUNS", 3))
REPLACEMENTS = int(os.environ.get("REPLACEMENTS", 5))
TIMEOUT = 180.0


def marker_command(marker_dir: Path) -> list[str]:
    """Touch a marker named after the pod (the node agent sets HOSTNAME to it), then idle."""
    code = ("import os, time\n"
            "name = os.environ.get('PRIMUS_INCARNATION') or os.environ['HOSTNAME']\n"
            f"open(os.path.join({str(marker_dir)!r}, name), 'w').close()\n"
            "time.sleep(600)\n")
    return ["python3", "-c", code]


def wait_markers(marker_dir: Path, count: int, start: float) -> float:
    """Seconds from ``start`` until ``marker_dir`` holds ``count`` markers."""
    deadline = time.monotonic() + TIMEOUT
    while len(os.listdir(marker_dir)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(os.listdir(marker_dir))} of {count} trainers ran")
        time.sleep(0.005)
    return time.monotonic() - start


def wait_gone(core, namespace: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while core.list_namespaced_pod(namespace).items:
        if time.monotonic() > deadline:
            raise TimeoutError(f"pods of {namespace} still there")
        time.sleep(0.1)


def primus_spec(marker_dir: Path, namespace: str) -> dict:
    return {
        "name": "bench-submit",
        "roles": [{"name": "worker", "replicas": EXECUTORS, "ports": 0, "command": marker_command(marker_dir),
                   "resources": {"cpu": 0.1, "memory": "64Mi"}, "failover": {"restart": "on_failure",
                                                                            "max_failures_per_index": 100}}],
        "backend": {"type": "kubernetes", "namespace": namespace, "image": "primus-runtime:bench"},
        # AM_ATTEMPTS=1: a bare AM pod, not restarted (the default, 3, runs the AM as a Job's pod)
        **({"am": {"max_attempts": int(os.environ["AM_ATTEMPTS"])}} if os.environ.get("AM_ATTEMPTS") else {}),
    }


def primus_run(client, core, marker_dir: Path, namespace: str, replacements: list[float] | None) -> float:
    clear(marker_dir)
    start = time.monotonic()
    app_id = client.submit(primus_spec(marker_dir, namespace))
    took = wait_markers(marker_dir, EXECUTORS, start)
    if replacements is not None:
        replacements.extend(replace_executors(core, marker_dir, namespace))
    client.cluster_for(app_id).force_kill(app_id)
    wait_gone(core, namespace)
    return took


def replace_executors(core, marker_dir: Path, namespace: str) -> list[float]:
    """Delete one executor pod at a time; seconds until its replacement's trainer runs."""
    times = []
    for _ in range(REPLACEMENTS):
        pods = core.list_namespaced_pod(namespace, label_selector="primus.io/component=executor").items
        victim = sorted(p.metadata.name for p in pods if p.status.phase == "Running")[0]
        before = len(os.listdir(marker_dir))
        start = time.monotonic()
        core.delete_namespaced_pod(victim, namespace, grace_period_seconds=0)
        times.append(wait_markers(marker_dir, before + 1, start))
    return times


def direct_pod(name: str, marker_dir: Path) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"bench": "direct"}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "primus-runtime:bench", "command": marker_command(marker_dir),
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


def direct_run(core, marker_dir: Path, namespace: str, count: int) -> float:
    clear(marker_dir)
    start = time.monotonic()
    for _ in range(count):
        core.create_namespaced_pod(namespace, direct_pod(f"direct-{uuid.uuid4().hex[:8]}", marker_dir))
    took = wait_markers(marker_dir, count, start)
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    wait_gone(core, namespace)
    return took


def bench(cluster_dir: Path) -> None:
    from kubernetes import client as k8s
    from kubernetes import config

    from primus_runtime.backends.base import ClientOptions
    from primus_runtime.client import PrimusClient

    kubeconfig = str(cluster_dir / "admin.kubeconfig")
    core = k8s.CoreV1Api(config.new_client_from_config(kubeconfig))
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    deadline = time.monotonic() + 60
    while not core.list_namespaced_service_account(namespace, field_selector="metadata.name=default").items:
        if time.monotonic() > deadline:
            raise TimeoutError("no default ServiceAccount")
        time.sleep(0.1)
    primus = PrimusClient(options=ClientOptions(kube_config=kubeconfig, namespace=namespace))
    marker_dir = Path(tempfile.mkdtemp(prefix="primus-bench-k8s-"))
    try:
        primus_run(primus, core, marker_dir, namespace, None)  # warm-up: page cache, API server caches
        direct_run(core, marker_dir, namespace, EXECUTORS)
        ours, theirs, replaced = [], [], []
        for round_ in range(RUNS):
            ours.append(primus_run(primus, core, marker_dir, namespace, replaced if round_ == 0 else None))
            theirs.append(direct_run(core, marker_dir, namespace, EXECUTORS))
            print(f"round {round_ + 1}: primus {ours[-1]:.2f} s, direct pods {theirs[-1]:.2f} s", flush=True)
        singles = [direct_run(core, marker_dir, namespace, 1) for _ in range(REPLACEMENTS)]
    finally:
        core.delete_namespace(namespace)
    print(f"executor pod deleted -> replacement trainer running: median {median_ms(replaced)} "
          f"(max {max(replaced) * 1000:.0f} ms); a plain pod create -> running: median {median_ms(singles)}; "
          f"ratio {statistics.median(replaced) / statistics.median(singles):.2f}x")
    print(f"submit -> {EXECUTORS} trainers running: primus median {statistics.median(ours):.2f} s, "
          f"{EXECUTORS} pods created directly median {statistics.median(theirs):.2f} s")
    print(f"primus submit->running against direct pods: {statistics.median(ours) / statistics.median(theirs):.2f}x")


def in_private_netns() -> bool:
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout.splitlines()
    return all(": lo:" in line for line in links)


def main() -> None:
    given = os.environ.get("PRIMUS_K8S_CLUSTER_DIR")
    if given:
        bench(Path(given))
        return
    if not in_private_netns():
        os.execv(str(REPO / "scripts" / "in-netns.sh"), [str(REPO / "scripts" / "in-netns.sh"), sys.executable,
                                                          *sys.argv])
    directory = Path(tempfile.mkdtemp(prefix="primus-bench-k8s-cluster-"))
    subprocess.run([str(SCRIPT), "start", str(directory)], check=True, stdout=subprocess.DEVNULL)
    try:
        bench(directory)
    finally:
        subprocess.run([str(SCRIPT), "stop", str(directory)], check=False)


if __name__ == "__main__":
    main()
