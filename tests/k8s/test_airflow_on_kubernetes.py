"""The provider on Kubernetes: a `primus` connection with backend kubernetes reaches the cluster
through a `kubernetes` connection (the cncf-kubernetes provider's KubernetesHook), the example
DAGs run unchanged under `airflow dags test`, the AM is read through the API server's proxy, and a
kill from Airflow leaves nothing of the job in the cluster."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest
from cluster.conftest import Minicluster, minicluster, put_day_on_hdfs, webhdfs_connection  # noqa: F401
from provider.conftest import airflow_env, execute_in_thread, run_airflow

from conftest import make_spec, wait_for
from primus_runtime.backends.kubernetes import manifests as m

pytestmark = pytest.mark.timeout(600)

SLEEPY = [{"name": "worker", "replicas": 2, "ports": 0, "command": "sleep 600",
           "resources": {"cpu": 0.1, "memory": "64Mi"}}]
IMAGE = "primus-runtime:test"  # the node agent runs every container with this machine's Python


def connections(env: dict[str, str], kubeconfig: str, namespace: str, **primus_extra: str) -> dict[str, str]:
    env["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig}})
    env["AIRFLOW_CONN_PRIMUS_DEFAULT"] = json.dumps(
        {"conn_type": "primus", "extra": {"backend": "kubernetes", "namespace": namespace, "image": IMAGE,
                                          **primus_extra}})
    return env


@pytest.fixture
def k8s_conn(k8s_cluster, k8s_namespace, monkeypatch, tmp_path):
    import os

    env = connections({}, str(k8s_cluster.kubeconfig), k8s_namespace)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PRIMUS_HOME", str(tmp_path / "home"))
    assert os.environ["AIRFLOW_CONN_PRIMUS_DEFAULT"]
    from airflow_provider_primus.hooks.primus import PrimusHook

    return PrimusHook()


def owned_by(core, namespace: str, app: str) -> list[str]:
    """Every object of the job left in the namespace: its pods (by label) and what they own."""
    left = [f"pod/{p.metadata.name}" for p in core.list_namespaced_pod(namespace, label_selector=f"{m.LABEL_APP}={app}").items]
    for kind in ("config_map", "secret", "service_account", "service"):
        left += [f"{kind}/{o.metadata.name}" for o in getattr(core, f"list_namespaced_{kind}")(namespace).items
                 if o.metadata.name.startswith(app)]
    return left


def test_quickstart_dag_runs_on_the_kubernetes_connection(k8s_cluster, k8s_core, k8s_namespace, tmp_path):
    airflow_home, primus_home = tmp_path / "airflow", tmp_path / "primus-home"
    env = connections(airflow_env(airflow_home, primus_home), str(k8s_cluster.kubeconfig), k8s_namespace)
    migrated = run_airflow("db", "migrate", env=env)
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    got = run_airflow("dags", "test", "primus_quickstart", env=env, timeout=420)
    output = got.stdout + got.stderr
    assert got.returncode == 0, output[-5000:]
    run_id, state = sqlite3.connect(airflow_home / "airflow.db").execute(
        "SELECT run_id, state FROM dag_run WHERE dag_id = 'primus_quickstart' ORDER BY id DESC").fetchone()
    assert state == "success", output[-5000:]
    (am,) = k8s_core.list_namespaced_pod(k8s_namespace, label_selector=f"{m.LABEL_COMPONENT}=am").items
    assert json.loads(am.metadata.annotations[m.ANNOTATION_TAGS])["run_id"] == run_id
    assert am.status.phase == "Succeeded"
    app_id = m.app_id(k8s_namespace, am.metadata.labels[m.LABEL_APP])  # a Job's pod by default: app-xxxxx
    assert f"Submitted Primus job {app_id}" in output
    assert "[worker-0 stdout]" in output  # the trainer's log, read through the API server
    # The status the task logged came through the API server's proxy to the AM (pod IPs are not
    # reachable from here otherwise) or, once the AM was gone, from the job's store ConfigMap.
    assert "worker x2: 2 succeeded" in output, output[-5000:]


def test_on_kill_deletes_the_am_pod_and_everything_it_owns(k8s_conn, k8s_core, k8s_namespace):
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator

    op = PrimusSubmitJobOperator(task_id="train", spec=make_spec(SLEEPY), poll_interval=0.5)
    thread, outcome = execute_in_thread(op)
    wait_for(lambda: op.app_id and k8s_conn.status(op.app_id).job.state == "running", timeout=120,
             what="the job running on Kubernetes", poll=0.5)
    _, app = m.parse_app_id(op.app_id)
    assert len(owned_by(k8s_core, k8s_namespace, app)) >= 3 + 3  # AM + 2 executor pods; ConfigMaps, Secret, ...
    op.on_kill()
    thread.join(60)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), AirflowException), outcome
    wait_for(lambda: not owned_by(k8s_core, k8s_namespace, app), timeout=90,
             what=f"nothing of {app} left in {k8s_namespace}", poll=0.5)


def test_the_triggers_on_kill_deletes_the_job(k8s_conn, k8s_core, k8s_namespace):
    from airflow_provider_primus.triggers.primus import PrimusJobTrigger

    app_id = k8s_conn.submit(make_spec(SLEEPY))
    wait_for(lambda: k8s_conn.status(app_id).job.state == "running", timeout=120,
             what="the job running on Kubernetes", poll=0.5)
    trigger = PrimusJobTrigger(app_id, poll_interval=0.5)
    asyncio.run(trigger.cleanup())  # a triggerer restart: the job must go on
    assert k8s_conn.status(app_id).job.state == "running"
    asyncio.run(trigger.on_kill())
    _, app = m.parse_app_id(app_id)
    wait_for(lambda: not owned_by(k8s_core, k8s_namespace, app), timeout=90,
             what=f"nothing of {app} left in {k8s_namespace}", poll=0.5)


@pytest.mark.timeout(900)
def test_daily_retraining_dag_runs_on_kubernetes_with_its_data_on_hdfs(k8s_cluster, k8s_core, k8s_namespace,
                                                                      minicluster: Minicluster,  # noqa: F811
                                                                      tmp_path):
    """The scheduled-retraining example, unchanged, with the connection pointing at Kubernetes and
    the day's partition on HDFS: the AM pod and the executors read it over WebHDFS (the client hands
    them the NameNode's address from its Hadoop configuration); the data checkpoint is on HDFS."""
    airflow_home, primus_home = tmp_path / "airflow", tmp_path / "primus-home"
    env = airflow_env(airflow_home, primus_home)
    migrated = run_airflow("db", "migrate", env=env)
    assert migrated.returncode == 0, migrated.stderr[-3000:]

    base = put_day_on_hdfs(minicluster, tmp_path, "retrain-k8s")
    connections(env, str(k8s_cluster.kubeconfig), k8s_namespace, hadoop_conf_dir=str(minicluster.dir / "conf"),
                work_preserve_root=f"hdfs://{base}/work-preserve")
    env["AIRFLOW_CONN_WEBHDFS_DEFAULT"] = webhdfs_connection(minicluster)
    conf = {"data_root": f"hdfs://{base}", "model_root": str(tmp_path / "models")}
    got = run_airflow("dags", "test", "primus_daily_retraining", "2026-12-01", "-c", json.dumps(conf),
                      env=env, timeout=780)
    output = got.stdout + got.stderr
    assert got.returncode == 0, output[-5000:]
    state = sqlite3.connect(airflow_home / "airflow.db").execute(
        "SELECT state FROM dag_run WHERE dag_id = 'primus_daily_retraining' ORDER BY id DESC").fetchone()[0]
    assert state == "success", output[-5000:]
    ams = k8s_core.list_namespaced_pod(k8s_namespace, label_selector=f"{m.LABEL_COMPONENT}=am").items
    names = sorted(json.loads(p.metadata.annotations[m.ANNOTATION_TAGS])["task_id"] for p in ams)
    assert names == ["evaluate", "train"] and all(p.status.phase == "Succeeded" for p in ams)
    # Every record of the day was read: the job's data status, from its store, says so.
    train = next(p for p in ams if json.loads(p.metadata.annotations[m.ANNOTATION_TAGS])["task_id"] == "train")
    from primus_runtime.backends.base import ClientOptions
    from primus_runtime.client import PrimusClient

    client = PrimusClient(options=ClientOptions(kube_config=str(k8s_cluster.kubeconfig), namespace=k8s_namespace))
    data = client.status(m.app_id(k8s_namespace, train.metadata.labels[m.LABEL_APP])).data  # a Job's pod
    assert data.state == "succeeded" and data.progress == 1.0 and data.records_done == 3000, data
