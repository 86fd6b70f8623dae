"""The Kubernetes backend end to end, on the test cluster (tests/k8s/conftest.py): a real API server,
controller manager (garbage collection, Endpoints) and the node agent running pods as processes."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from conftest import wait_for
from primus_runtime.backends.base import ClientOptions
from primus_runtime.backends.kubernetes import manifests as m
from primus_runtime.cli import main as cli_main
from primus_runtime.client import PrimusClient

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ps_worker"


@pytest.fixture
def primus(k8s_cluster, k8s_namespace) -> PrimusClient:
    return PrimusClient(options=ClientOptions(kube_config=str(k8s_cluster.kubeconfig), namespace=k8s_namespace))


def ps_worker(tmp_path: Path, namespace: str, **changes) -> Path:
    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    spec["backend"] = {"type": "kubernetes", "image": "primus-runtime:test", "namespace": namespace}
    spec["tags"] = {"dag_id": "nightly_train", "run_id": "manual__2026-12-03T10:00:00+00:00"}
    for role in spec["roles"]:
        role.update(changes.get(role["name"], {}))
    shutil.copy(EXAMPLE / "trainer.py", tmp_path / "trainer.py")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def pods_of(core: client.CoreV1Api, namespace: str, app: str, component: str = "executor") -> list[client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=f"{m.LABEL_APP}={app},{m.LABEL_COMPONENT}={component}").items


def test_ps_worker_succeeds_with_owned_labelled_pods(primus, k8s_core, k8s_namespace, tmp_path):
    app_id = primus.submit(ps_worker(tmp_path, k8s_namespace))
    namespace, app = m.parse_app_id(app_id)
    assert namespace == k8s_namespace
    # Looked at while they run: once the workers are done the AM stops the ps and deletes their pods.
    pods = wait_for(lambda: len(found := pods_of(k8s_core, namespace, app)) == 4 and found, timeout=120,
                    what="the job's four executor pods")
    # By default the AM is restarted (am.max_attempts 3): it runs as a batch Job's pod, and that Job owns
    # the job's objects (tests/k8s/test_am_recovery_k8s.py: with one attempt, a bare AM pod owns them).
    # AM deaths count within am.attempt_failures_validity_interval (1h by default), which the AM's next
    # attempt enforces: the Job's own limit only stops a crash loop it cannot count.
    am = client.BatchV1Api(k8s_core.api_client).read_namespaced_job(app, namespace)
    assert am.spec.backoff_limit == m.WINDOWED_BACKOFF_LIMIT
    assert sorted((p.metadata.labels[m.LABEL_ROLE], p.metadata.labels[m.LABEL_INDEX]) for p in pods) == [
        ("ps", "0"), ("ps", "1"), ("worker", "0"), ("worker", "1")]
    for pod in pods:
        owner = pod.metadata.owner_references[0]
        assert (owner.kind, owner.name, owner.uid) == ("Job", app, am.metadata.uid)
        assert pod.metadata.labels["tags.primus.io/run_id"] == "manual__2026-12-03T10-00-00-00-00"
    status = primus.wait(app_id, timeout=180)
    assert status.job.state == "succeeded", status.job
    for kind in ("config_map", "secret", "service_account", "service"):
        names = [o.metadata.name for o in getattr(k8s_core, f"list_namespaced_{kind}")(namespace).items
                 if (o.metadata.owner_references or [None])[0] and o.metadata.owner_references[0].uid == am.metadata.uid]
        assert names, kind
    listed = primus.list({"run_id": "manual__2026-12-03T10:00:00+00:00"}, backend="kubernetes")
    assert [(j.app_id, j.state) for j in listed] == [(app_id, "succeeded")]
    assert primus.list({"run_id": "manual__2026-12-03T10-00-00-00-00"}, backend="kubernetes") == []
    worker_log = b"".join(primus.follow_log(app_id, primus.log_path(app_id, "worker", 0)))
    assert b"step" in worker_log  # the trainer's output is in the container log


def test_a_deleted_executor_pod_is_replaced_and_the_job_succeeds(primus, k8s_core, k8s_namespace, tmp_path):
    app_id = primus.submit(ps_worker(tmp_path, k8s_namespace, worker={"env": {"STEPS": 2000, "LOG_EVERY": 200}}))
    _, app = m.parse_app_id(app_id)
    victim = wait_for(lambda: next((p for p in pods_of(k8s_core, k8s_namespace, app)
                                    if p.metadata.labels[m.LABEL_ROLE] == "worker" and p.status.phase == "Running"),
                                   None), timeout=120, what="a running worker pod")
    k8s_core.delete_namespaced_pod(victim.metadata.name, k8s_namespace, grace_period_seconds=0)
    status = primus.wait(app_id, timeout=240)
    assert status.job.state == "succeeded", status.job
    index = victim.metadata.labels[m.LABEL_INDEX]
    history = primus._api(app_id, "GET", "/executors?history=true") or {}
    reasons = [e.reason for e in status.events if e.subject == f"worker-{index}"]
    assert any("pod deleted" in r for r in reasons), (reasons, history)


def test_an_evicted_pod_is_not_charged(primus, k8s_core, k8s_namespace, tmp_path):
    app_id = primus.submit(ps_worker(tmp_path, k8s_namespace, worker={
        "env": {"STEPS": 2000, "LOG_EVERY": 200}, "failover": {"max_failures_per_index": 0}}))
    _, app = m.parse_app_id(app_id)
    victim = wait_for(lambda: next((p for p in pods_of(k8s_core, k8s_namespace, app)
                                    if p.metadata.labels[m.LABEL_ROLE] == "worker" and p.status.phase == "Running"),
                                   None), timeout=120, what="a running worker pod")
    k8s_core.patch_namespaced_pod(victim.metadata.name, k8s_namespace,
                                  {"metadata": {"annotations": {"primus.test/evict": "The node was low on memory."}}})
    status = primus.wait(app_id, timeout=240)
    assert status.job.state == "succeeded", status.job
    assert any("evicted" in e.reason for e in status.events)


def test_a_ps_failure_fails_the_job_with_the_reason(primus, k8s_namespace, tmp_path):
    app_id = primus.submit(ps_worker(tmp_path, k8s_namespace, ps={"command": "echo no shard today >&2; exit 3"}))
    status = primus.wait(app_id, timeout=180)
    assert status.job.state == "failed"
    assert "ps-" in status.job.reason and "exit" in status.job.reason, status.job.reason


def test_node_local_input_is_read_once(primus, k8s_namespace, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for part in range(3):
        (data / f"part-{part}.txt").write_text("".join(f"r{part}-{i}\n" for i in range(50)))
    (data / "_SUCCESS").touch()
    out = tmp_path / "out"
    out.mkdir()
    spec = {"name": "read-once", "roles": [{"name": "reader", "replicas": 2, "consumes_input": True,
                                            "command": f"cat > {out}/$PRIMUS_INDEX-$PRIMUS_INCARNATION.txt"}],
            "input": {"sources": [{"name": "parts", "path": str(data), "format": "text", "node_local": True}]},
            "backend": {"type": "kubernetes", "image": "primus-runtime:test", "namespace": k8s_namespace}}
    app_id = primus.submit(spec)
    status = primus.wait(app_id, timeout=60)
    assert status.job.state == "succeeded", status.job
    records = sorted(line for f in out.iterdir() for line in f.read_text().splitlines())
    assert records == sorted(f"r{p}-{i}" for p in range(3) for i in range(50))


def test_the_am_service_account_can_do_nothing_in_another_namespace(primus, k8s_cluster, k8s_core, k8s_namespace,
                                                                    tmp_path):
    app_id = primus.submit(ps_worker(tmp_path, k8s_namespace))
    _, app = m.parse_app_id(app_id)
    token = k8s_core.create_namespaced_service_account_token(
        app, k8s_namespace, {"spec": {"audiences": [], "expirationSeconds": 600}}).status.token
    admin = k8s_cluster.api_client().configuration
    configuration = client.Configuration()
    configuration.host, configuration.ssl_ca_cert = admin.host, admin.ssl_ca_cert
    configuration.api_key = {"authorization": "Bearer " + token}
    as_am = client.CoreV1Api(client.ApiClient(configuration))
    assert as_am.list_namespaced_pod(k8s_namespace).items  # what it needs, in its namespace
    for call in (lambda: as_am.list_namespaced_pod("default"), lambda: as_am.list_namespaced_secret(k8s_namespace),
                 lambda: as_am.create_namespaced_config_map(k8s_namespace, {"metadata": {"name": "x"}})):
        with pytest.raises(ApiException) as err:
            call()
        assert err.value.status == 403
    primus.wait(app_id, timeout=180)


def test_cli_status_logs_and_kill(primus, k8s_cluster, k8s_core, k8s_namespace, tmp_path, capsys):
    app_id = primus.submit(ps_worker(tmp_path, k8s_namespace, worker={"env": {"STEPS": 100000, "LOG_EVERY": 100}}))
    _, app = m.parse_app_id(app_id)
    cli = ["--kubeconfig", str(k8s_cluster.kubeconfig)]
    wait_for(lambda: primus.status(app_id).job.state == "running", timeout=120, what="job running")
    assert cli_main([*cli, "status", app_id]) == 0
    assert "running" in capsys.readouterr().out
    assert cli_main([*cli, "logs", app_id]) == 0
    assert "AM API at" in capsys.readouterr().out
    assert cli_main([*cli, "kill", app_id]) == 0
    assert "killed" in capsys.readouterr().out
    assert primus.status(app_id).job.state == "killed"
    wait_for(lambda: all(p.status.phase in ("Succeeded", "Failed") for p in pods_of(k8s_core, k8s_namespace, app)),
             timeout=60, what="every executor pod ended")
    # Without the AM: deleting its pod takes everything it owns along (the garbage collector).
    left = k8s_core.list_namespaced_pod(k8s_namespace, label_selector=f"{m.LABEL_APP}={app}").items
    assert "am" in [p.metadata.labels[m.LABEL_COMPONENT] for p in left]  # the AM pod stays, with its log
    assert primus.cluster("kubernetes").force_kill(app_id) == len(left)
    wait_for(lambda: not k8s_core.list_namespaced_pod(k8s_namespace, label_selector=f"{m.LABEL_APP}={app}").items
             and not [c for c in k8s_core.list_namespaced_config_map(k8s_namespace).items
                      if c.metadata.name.startswith(app)], timeout=60, what="the job's objects gone")
    assert not primus.cluster("kubernetes").exists(app_id)


def test_pod_readiness_follows_the_trainers_readiness(primus, k8s_core, k8s_namespace, tmp_path):
    """A trainer that says it is ready (readiness probe `file`) makes its pod Ready; before, the pod
    runs but is not Ready, as Kubernetes users (Services, kubectl) expect."""
    go = tmp_path / "go"
    spec = {"name": "ready", "roles": [{"name": "worker", "replicas": 1, "ports": 0, "readiness": {"probe": "file"},
                                        "command": f"while [ ! -e {go} ]; do sleep 0.1; done; "
                                                   'touch "$PRIMUS_READY_FILE"; sleep 600'}],
            "backend": {"type": "kubernetes", "image": "primus-runtime:test", "namespace": k8s_namespace}}
    app_id = primus.submit(spec)
    _, app = m.parse_app_id(app_id)

    def pod_ready() -> bool | None:
        pods = [p for p in pods_of(k8s_core, k8s_namespace, app) if p.status.phase == "Running"]
        if not pods:
            return None
        return any(c.type == "Ready" and c.status == "True" for c in pods[0].status.conditions or [])

    wait_for(lambda: pod_ready() is not None, timeout=60, what="the worker's pod running")
    time.sleep(3)  # more than a probe period (2 s): a pod reported Ready now would be wrong
    assert pod_ready() is False
    assert primus.status(app_id).job.state == "starting"  # the job waits for its trainer too
    go.touch()
    wait_for(lambda: pod_ready() is True, timeout=30, what="the worker's pod Ready")
    wait_for(lambda: primus.status(app_id).job.state == "running", timeout=30, what="the job running")
    primus.cluster_for(app_id).force_kill(app_id)


def test_the_page_through_the_api_servers_proxy(primus, k8s_namespace, tmp_path):
    """What a browser behind `kubectl proxy` does: the one-time link, the session cookie the AM
    sets through the API server's pod proxy, then a signed-in action (the API server's own
    authentication is the kubeconfig's, as kubectl proxy adds it)."""
    app_id = primus.submit(ps_worker(tmp_path, k8s_namespace, worker={"env": {"STEPS": 100000}}))
    link = wait_for(lambda: primus.page_link(app_id, user="kira"), 120, "the AM's page")
    api = primus.cluster("kubernetes").api  # type: ignore[attr-defined]
    pool, auth = api.rest_client.pool_manager, {}
    api.update_params_for_auth(auth, [], ["BearerToken"])

    redeemed = pool.request("GET", link, headers=auth, redirect=False)
    assert redeemed.status == 303, redeemed.data[:300]
    cookie = redeemed.headers["Set-Cookie"].split(";", 1)[0]
    base = link.split("/ui/")[0]
    whoami = pool.request("GET", base + "/api/v1/whoami", headers={**auth, "Cookie": cookie})
    assert json.loads(whoami.data) == {"user": "kira", "live": True, "app_id": app_id}
    scaled = pool.request("POST", base + "/api/v1/roles/worker/scale", body=b'{"replicas": 1}',
                          headers={**auth, "Cookie": cookie, "X-Primus-Action": "1",
                                   "Content-Type": "application/json"})
    assert scaled.status == 200, scaled.data[:300]
    events = primus.status(app_id).events
    assert [e.actor for e in events if e.subject == "role/worker"] == ["kira"]
    primus.kill(app_id)
