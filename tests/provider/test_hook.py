"""PrimusHook against real local jobs (a private PRIMUS_HOME per test)."""

from __future__ import annotations

import json

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException

from airflow_provider_primus.hooks.primus import PrimusHook
from conftest import make_spec, wait_for
from primus_runtime.backends.local.jobs import processes_of_job
from primus_runtime.spec import JobSpec, SpecError

QUICK = [{"name": "worker", "replicas": 2, "ports": 0,
          "command": "for i in 1 2 3 4 5; do echo line-$i; done; echo oops >&2"}]
SLEEPY = [{"name": "worker", "replicas": 1, "ports": 0, "command": "sleep 60"}]


def test_without_a_connection_the_default_id_falls_back_to_the_local_default_home(primus_home):
    hook = PrimusHook()
    assert hook.settings["backend"] == "local" and hook.settings["home"] is None
    assert hook.client.cluster("local").home == primus_home  # $PRIMUS_HOME, read when the client is made
    assert hook.work_preserve_root() == str(primus_home / "work-preserve")


def test_the_local_fallback_is_said_once_per_process_naming_the_home_it_uses(primus_home, capsys):
    for _poke in range(3):  # a sensor makes a hook per poke
        assert PrimusHook().client.cluster("local").home == primus_home
    said = [line for line in capsys.readouterr().out.splitlines() if "No connection 'primus_default'" in line]
    assert len(said) == 1, said
    assert f"Primus home {primus_home} ($PRIMUS_HOME)" in said[0]


def test_an_explicit_connection_id_must_exist():
    with pytest.raises(AirflowNotFoundException):
        PrimusHook("no_such_primus").client  # noqa: B018


@pytest.mark.parametrize(("conn_id", "fields"), [
    ("primus_yarn", ["backend (yarn)", "hadoop_conf_dir (Hadoop configuration)", "yarn_queue"]),
    ("primus_kubernetes", ["backend (kubernetes)", "kubernetes_conn_id (Kubernetes connection)", "namespace",
                           "image"]),
])
def test_a_missing_backend_connection_says_which_to_create_and_its_fields(conn_id, fields):
    with pytest.raises(AirflowNotFoundException) as info:
        PrimusHook(conn_id).client  # noqa: B018
    message = str(info.value)
    assert f"Airflow connection {conn_id!r} does not exist" in message
    assert "connection type 'primus'" in message and f"airflow connections add {conn_id} --conn-type primus" in message
    assert all(field in message for field in fields), message


def test_connection_fields_choose_backend_and_home(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_PRIMUS_LOCAL", json.dumps(
        {"conn_type": "primus", "extra": {"backend": "local", "home": str(tmp_path / "h"),
                                          "work_preserve_root": str(tmp_path / "wp")}}))
    assert PrimusHook("primus_local").client.cluster("local").home == tmp_path / "h"
    assert PrimusHook("primus_local").work_preserve_root() == str(tmp_path / "wp")

    monkeypatch.setenv("AIRFLOW_CONN_PRIMUS_YARN", json.dumps(
        {"conn_type": "primus", "extra": {"backend": "yarn", "hadoop_conf_dir": str(tmp_path / "conf")}}))
    yarn = PrimusHook("primus_yarn")
    assert yarn.work_preserve_root().startswith("hdfs:///user/")  # the AM runs on any node: HDFS
    assert yarn.client.hadoop_conf_dir == str(tmp_path / "conf")

    monkeypatch.setenv("AIRFLOW_CONN_PRIMUS_BAD", json.dumps({"conn_type": "primus", "extra": {"backend": "mesos"}}))
    with pytest.raises(AirflowException, match="backend must be one of"):
        PrimusHook("primus_bad").client  # noqa: B018


def test_submit_status_find_and_logs_of_a_real_job(primus_home, client):
    spec = JobSpec.from_dict(make_spec(QUICK, tags={"team": "ml", "dag_id": "from-spec"}))
    hook = PrimusHook()
    app_id = hook.submit(spec, tags={"dag_id": "d", "map_index": -1})
    assert spec.tags == {"team": "ml", "dag_id": "from-spec"}  # the caller's model is left alone

    status = wait_for(lambda: (s := hook.status(app_id)).job.state in ("succeeded", "failed") and s,
                      what="job end")
    assert status.job.state == "succeeded", status.job
    assert status.job.tags == {"team": "ml", "dag_id": "d", "map_index": "-1"}  # ours win, as strings

    other = hook.submit(make_spec(QUICK), tags={"dag_id": "other"})
    assert [j.app_id for j in hook.find_jobs({"dag_id": "d"})] == [app_id]
    assert {j.app_id for j in hook.find_jobs()} == {app_id, other}
    assert hook.find_jobs({"dag_id": "d", "team": "nope"}) == []

    assert hook.tail_logs(app_id, "worker", 1, lines=2) == "line-4\nline-5"
    assert hook.tail_logs(app_id, "worker", 0, stream="stderr") == "oops"
    assert app_id in hook.tail_logs(app_id)  # the AM log


def test_kill_stops_a_running_job_and_leaves_no_process(primus_home, client):
    hook = PrimusHook()
    app_id = hook.submit(make_spec(SLEEPY))
    wait_for(lambda: hook.status(app_id).job.state == "running", what="job running")
    final = hook.kill(app_id, reason="test says stop")
    assert final is not None and final.job.state == "killed"
    assert "test says stop" in final.job.reason
    assert processes_of_job(app_id) == []


def test_invalid_spec_is_a_spec_error_and_starts_nothing(primus_home, client):
    hook = PrimusHook()
    with pytest.raises(SpecError, match=r"roles\[0\].replicas"):
        hook.submit(make_spec([{**SLEEPY[0], "replicas": -1}]))
    with pytest.raises(SpecError, match="cannot read"):
        hook.submit(str(primus_home / "missing.yaml"))
    assert hook.find_jobs() == []


def test_a_spec_without_backend_takes_the_connections(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_CONN_PRIMUS_YARN", json.dumps(
        {"conn_type": "primus", "extra": {"backend": "yarn", "yarn_queue": "ml"}}))
    hook = PrimusHook("primus_yarn")
    submitted = []
    monkeypatch.setattr(type(hook.client), "submit", lambda self, job: submitted.append(job) or "application_1_1")
    # relative files (resolved against the DAG folder) must not make the default backend look chosen
    spec = {"name": "t", "roles": [{"name": "w", "command": "x", "files": ["trainer.py"]}]}
    assert hook.submit(spec, base_dir=tmp_path) == "application_1_1"
    assert submitted[0].backend.type == "yarn" and submitted[0].backend.queue == "ml"
    # The AM's attempts are the backend's default where the job runs: YARN restarts no AM unasked
    # (a default resolved for the local backend at parse time restarted the killed job's AM on YARN).
    assert submitted[0].am.max_attempts is None and submitted[0].am_attempts == 1
    assert submitted[0].executor_patience == submitted[0].am.heartbeat_timeout
    with pytest.raises(SpecError, match="connection 'primus_yarn' uses the yarn backend, got 'local'"):
        hook.submit({**spec, "backend": {"type": "local"}})
    # A spec naming the backend keeps what it sets; the connection fills what it leaves out.
    hook.submit({**spec, "backend": {"type": "yarn", "am_vcores": 2}})
    assert submitted[1].backend.queue == "ml" and submitted[1].backend.am_vcores == 2
    hook.submit({**spec, "backend": {"type": "yarn", "queue": "prod"}})
    assert submitted[2].backend.queue == "prod"


def test_the_connections_image_and_namespace_fill_a_kubernetes_section_that_leaves_them_out(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_PRIMUS_K8S", json.dumps(
        {"conn_type": "primus", "extra": {"backend": "kubernetes", "namespace": "ml", "image": "trainer:1"}}))
    hook = PrimusHook("primus_k8s")
    spec = {"name": "t", "roles": [{"name": "w", "command": "x"}]}
    named = hook.with_connection_defaults(JobSpec.from_dict({**spec, "backend": {"type": "kubernetes", "am_cpu": 2}}))
    assert (named.backend.image, named.backend.namespace, named.backend.am_cpu) == ("trainer:1", "ml", 2)
    unnamed = hook.with_connection_defaults(JobSpec.from_dict(spec))
    assert (unnamed.backend.type, unnamed.backend.image) == ("kubernetes", "trainer:1")
    own = hook.with_connection_defaults(JobSpec.from_dict({**spec, "backend": {"type": "kubernetes", "image": "mine:2"}}))
    assert own.backend.image == "mine:2" and own.backend.submit_problems() == []

