"""The provider on YARN: a `primus` connection with backend yarn submits there, and a kill from
Airflow (the operator's on_kill, the trigger's on_kill) leaves no YARN application running."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3

import pytest
from provider.conftest import execute_in_thread

from conftest import make_spec, wait_for

from .conftest import Minicluster, processes_of, put_day_on_hdfs, webhdfs_connection

pytestmark = pytest.mark.timeout(300)

SLEEPY = [{"name": "worker", "replicas": 1, "ports": 0, "command": "sleep 600",
           "resources": {"cpu": 1, "memory": "256Mi"}}]


@pytest.fixture
def yarn_conn(minicluster: Minicluster, monkeypatch: pytest.MonkeyPatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_CONN_PRIMUS_YARN", json.dumps(
        {"conn_type": "primus", "extra": {"backend": "yarn", "hadoop_conf_dir": str(minicluster.dir / "conf")}}))
    monkeypatch.setenv("PRIMUS_HOME", str(tmp_path / "home"))
    from airflow_provider_primus.hooks.primus import PrimusHook

    hook = PrimusHook("primus_yarn")
    yield hook
    for job in hook.find_jobs():
        if hook.client.cluster("yarn").am_alive(job.app_id):
            hook.client.cluster("yarn").force_kill(job.app_id)


def yarn_state(hook, app_id: str) -> str:
    return hook.client.cluster("yarn").rm.app(app_id)["state"]


def assert_nothing_left(hook, app_id: str) -> None:
    wait_for(lambda: yarn_state(hook, app_id) in ("FINISHED", "KILLED", "FAILED"), timeout=60,
             what=f"{app_id} no longer running in YARN", poll=0.5)
    wait_for(lambda: not processes_of(app_id), timeout=60, what=f"no process of {app_id} left", poll=0.5)


def test_a_spec_without_backend_runs_on_the_connections_yarn_and_on_kill_stops_it(yarn_conn):
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator

    op = PrimusSubmitJobOperator(task_id="train", spec=make_spec(SLEEPY), primus_conn_id="primus_yarn",
                                 poll_interval=0.5)
    thread, outcome = execute_in_thread(op)
    wait_for(lambda: op.app_id and yarn_conn.status(op.app_id).job.state == "running", timeout=180,
             what="the job running on YARN", poll=0.5)
    assert op.app_id.startswith("application_")
    job = yarn_conn.find_jobs({"dag_id": "dag", "task_id": "train"})[0]
    assert job.app_id == op.app_id and job.tags["run_id"] == "manual__1"  # exact case, from spec.json
    op.on_kill()
    thread.join(60)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), AirflowException), outcome
    wait_for(lambda: yarn_conn.status(op.app_id).job.state == "killed", timeout=60, what="job killed",
             poll=0.5)
    assert_nothing_left(yarn_conn, op.app_id)


def test_the_triggers_on_kill_stops_the_yarn_application(yarn_conn):
    from airflow_provider_primus.triggers.primus import PrimusJobTrigger

    app_id = yarn_conn.submit(make_spec(SLEEPY))
    wait_for(lambda: yarn_conn.status(app_id).job.state == "running", timeout=180,
             what="the job running on YARN", poll=0.5)
    trigger = PrimusJobTrigger(app_id, primus_conn_id="primus_yarn", poll_interval=0.5)
    asyncio.run(trigger.cleanup())  # a triggerer restart: the job must go on
    assert yarn_state(yarn_conn, app_id) == "RUNNING"
    asyncio.run(trigger.on_kill())
    wait_for(lambda: yarn_conn.status(app_id).job.state == "killed", timeout=60, what="job killed", poll=0.5)
    assert_nothing_left(yarn_conn, app_id)


@pytest.mark.timeout(900)
def test_daily_retraining_dag_runs_on_yarn_with_its_data_on_hdfs(minicluster: Minicluster, tmp_path):
    """The scheduled-retraining example, unchanged, with the connection pointing at YARN and the
    partitions on HDFS: partition sensor (WebHDFSHook), train, data watermark, job, evaluation."""
    from provider.conftest import airflow_env, run_airflow

    airflow_home, primus_home = tmp_path / "airflow", tmp_path / "primus-home"
    env = airflow_env(airflow_home, primus_home)
    migrated = run_airflow("db", "migrate", env=env)
    assert migrated.returncode == 0, migrated.stderr[-3000:]

    base = put_day_on_hdfs(minicluster, tmp_path, "retrain")
    env["AIRFLOW_CONN_PRIMUS_DEFAULT"] = json.dumps(
        {"conn_type": "primus", "extra": {"backend": "yarn", "hadoop_conf_dir": str(minicluster.dir / "conf")}})
    env["AIRFLOW_CONN_WEBHDFS_DEFAULT"] = webhdfs_connection(minicluster)
    conf = {"data_root": f"hdfs://{base}", "model_root": str(tmp_path / "models")}
    got = run_airflow("dags", "test", "primus_daily_retraining", "2026-12-01", "-c", json.dumps(conf),
                      env=env, timeout=600)
    output = got.stdout + got.stderr
    assert got.returncode == 0, output[-5000:]
    run_id, state = sqlite3.connect(airflow_home / "airflow.db").execute(
        "SELECT run_id, state FROM dag_run WHERE dag_id = 'primus_daily_retraining' ORDER BY id DESC").fetchone()
    assert state == "success", output[-5000:]
    assert f"{base}/20261201/_SUCCESS on HDFS (connection webhdfs_default): ready" in output

    from primus_runtime.client import PrimusClient

    client = PrimusClient(primus_home)
    (train,) = client.list({"dag_id": "primus_daily_retraining", "task_id": "train", "run_id": run_id},
                           backend="yarn")
    assert train.app_id.startswith("application_")
    status = client.status(train.app_id)
    assert status.job.state == "succeeded"
    assert status.data.watermark == "2026-12-01" and status.data.records_done >= 3000
    assert client.spec(train.app_id).input.work_preserve_dir.startswith("hdfs:///user/")
    assert client.cluster("yarn").rm.app(train.app_id)["finalStatus"] == "SUCCEEDED"
    assert sorted(p.name for p in (tmp_path / "models" / "20261201").iterdir()) == ["ps-0.json", "ps-1.json"]
    (evaluate,) = client.list({"dag_id": "primus_daily_retraining", "task_id": "evaluate", "run_id": run_id},
                              backend="yarn")
    assert client.status(evaluate.app_id).job.state == "succeeded"
    evaluator_lines = [line for line in output.splitlines()
                       if "evaluator-0" in line or "Cannot read the log" in line or "Not following" in line]
    assert re.search(r"evaluation loss [\d.]+ on held-out data .*2 ps shards", output), evaluator_lines
