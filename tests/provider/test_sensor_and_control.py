"""PrimusRoleSensor, PrimusScaleRoleOperator and PrimusKillJobOperator against real local jobs."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.operators.primus import PrimusKillJobOperator, PrimusScaleRoleOperator
from airflow_provider_primus.sensors.primus import PrimusRoleSensor
from conftest import make_spec, wait_for
from primus_runtime.backends.local import processes_of_job

from .conftest import make_context

SLEEPY = [{"name": "worker", "replicas": 2, "command": "sleep 300"}]


def sensor(app_id: str, **kwargs) -> PrimusRoleSensor:
    return PrimusRoleSensor(task_id="wait", app_id=app_id, role="worker", **kwargs)


def test_role_sensor_is_true_once_every_replica_runs(primus_home, client):
    app_id = PrimusHook().submit(make_spec(SLEEPY))
    assert sensor(app_id).poke(make_context()) is False  # just submitted: nothing runs yet
    wait_for(lambda: sensor(app_id).poke(make_context()), what="the sensor to see 2 running")
    assert client.status(app_id)["roles"][0]["states"]["running"] == 2
    client.kill(app_id)


def test_role_sensor_counts_succeeded_executors(primus_home, client):
    spec = make_spec([{"name": "worker", "replicas": 2, "command": "sleep 300"},
                      {"name": "evaluator", "command": "true", "success_percent": 0}])
    app_id = PrimusHook().submit(spec)
    evaluator = PrimusRoleSensor(task_id="eval", app_id=app_id, role="evaluator", state="succeeded", count=1)
    wait_for(lambda: evaluator.poke(make_context()), what="the evaluator to succeed")
    client.kill(app_id)


def test_role_sensor_fails_fast_when_the_job_fails(primus_home, client):
    app_id = PrimusHook().submit(make_spec([{"name": "worker", "command": "exit 3",
                                             "failover": {"restart": "never"}}]))
    wait_for(lambda: client.status(app_id)["job"]["state"] == "failed", what="job failed")
    with pytest.raises(AirflowException, match="failed with role worker at 0 of 1 running"):
        sensor(app_id).poke(make_context())


def test_role_sensor_refuses_unknown_states():
    with pytest.raises(ValueError, match="state must be one of"):
        sensor("a", state="sleeping")


def test_scale_then_kill_operators(primus_home, client):
    app_id = PrimusHook().submit(make_spec(SLEEPY))
    wait_for(lambda: client.status(app_id)["job"]["state"] == "running", what="job running")
    scaled = PrimusScaleRoleOperator(task_id="scale", app_id=app_id, role="worker", replicas="3")
    assert scaled.execute(make_context()) == 3
    wait_for(lambda: client.status(app_id)["roles"][0]["states"]["running"] == 3, what="3 workers running")
    assert PrimusKillJobOperator(task_id="kill", app_id=app_id).execute(make_context()) == "killed"
    assert "killed by Airflow task kill" in client.status(app_id)["job"]["reason"]
    assert processes_of_job(app_id) == []
