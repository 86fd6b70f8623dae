"""The sensors (poke and deferrable), PrimusScaleRoleOperator and PrimusKillJobOperator, on real local jobs."""

from __future__ import annotations

import time

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.operators.primus import (
    PrimusKillJobOperator,
    PrimusResumeDataOperator,
    PrimusScaleRoleOperator,
    PrimusSuspendDataOperator,
)
from airflow_provider_primus.sensors.primus import PrimusDataProgressSensor, PrimusPartitionSensor, PrimusRoleSensor
from airflow_provider_primus.triggers.primus import PrimusPartitionTrigger, PrimusRoleTrigger
from conftest import make_spec, wait_for
from primus_runtime.backends.local.jobs import processes_of_job
from primus_runtime.client import JobUnreachable

from .conftest import make_context

SLEEPY = [{"name": "worker", "replicas": 2, "command": "sleep 300"}]


def sensor(app_id: str, **kwargs) -> PrimusRoleSensor:
    return PrimusRoleSensor(task_id="wait", app_id=app_id, role="worker", **kwargs)


def test_role_sensor_is_true_once_every_replica_runs(primus_home, client):
    app_id = PrimusHook().submit(make_spec(SLEEPY))
    assert sensor(app_id).poke(make_context()) is False  # just submitted: nothing runs yet
    wait_for(lambda: sensor(app_id).poke(make_context()), what="the sensor to see 2 running")
    assert client.status(app_id).roles[0].states["running"] == 2
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
    wait_for(lambda: client.status(app_id).job.state == "failed", what="job failed")
    with pytest.raises(AirflowException, match="failed: .*; role worker stopped at 0 of 1 running"):
        sensor(app_id).poke(make_context())


def test_role_sensor_refuses_unknown_states():
    with pytest.raises(ValueError, match="state must be one of"):
        sensor("a", state="sleeping")


def test_scale_then_kill_operators(primus_home, client):
    app_id = PrimusHook().submit(make_spec(SLEEPY))
    wait_for(lambda: client.status(app_id).job.state == "running", what="job running")
    scaled = PrimusScaleRoleOperator(task_id="scale", app_id=app_id, role="worker", replicas="3")
    assert scaled.execute(make_context()) == 3
    wait_for(lambda: client.status(app_id).roles[0].states["running"] == 3, what="3 workers running")
    assert PrimusKillJobOperator(task_id="kill", app_id=app_id).execute(make_context()) == "killed"
    assert "killed by Airflow task kill" in client.status(app_id).job.reason
    assert processes_of_job(app_id) == []


def test_deferrable_role_sensor_defers_only_while_the_condition_is_unmet(primus_home, client):
    app_id = PrimusHook().submit(make_spec(SLEEPY))
    waiting = sensor(app_id, deferrable=True, poke_interval=0.5, timeout=600)
    before = time.time()
    with pytest.raises(TaskDeferred) as info:
        waiting.execute(make_context())
    trigger = info.value.trigger
    assert isinstance(trigger, PrimusRoleTrigger) and info.value.method_name == "execute_complete"
    assert (trigger.app_id, trigger.role, trigger.state, trigger.poll_interval) == (app_id, "worker", "running", 0.5)
    assert before + 600 <= trigger.deadline <= time.time() + 600
    wait_for(lambda: sensor(app_id).poke(make_context()), what="2 running")
    assert sensor(app_id, deferrable=True).execute(make_context()) is None  # met: no deferral
    with pytest.raises(AirflowException, match="role worker stopped"):
        waiting.execute_complete(make_context(), {"status": "failed", "reason": "role worker stopped at 0"})
    client.kill(app_id)


def test_data_progress_sensor_arguments_and_jobs_without_input(primus_home, client):
    with pytest.raises(ValueError, match="give min_progress"):
        PrimusDataProgressSensor(task_id="d", app_id="a")
    with pytest.raises(ValueError, match="between 0 and 1, got 50"):
        PrimusDataProgressSensor(task_id="d", app_id="a", min_progress=50)
    with pytest.raises(ValueError, match="max_lag must be a whole number of records >= 0, got -1"):
        PrimusDataProgressSensor(task_id="d", app_id="a", max_lag=-1)
    app_id = PrimusHook().submit(make_spec(SLEEPY))
    wait_for(lambda: client.status(app_id).job.state == "running", what="job running")
    data_sensor = PrimusDataProgressSensor(task_id="d", app_id=app_id, partition="20261201", deferrable=True)
    with pytest.raises(AirflowException, match="has no input section"):
        data_sensor.execute(make_context())
    client.kill(app_id)


def test_partition_sensor_renders_both_template_kinds_and_waits_for_the_marker(tmp_path):
    partition_sensor = PrimusPartitionSensor(task_id="p", path=str(tmp_path) + "/{{YYYY}}{{MM}}{{DD}}",
                                             partition="{{ ds }}", deferrable=True, poke_interval=2)
    partition_sensor.render_template_fields({"ds": "2026-12-01"})
    assert partition_sensor.path == str(tmp_path) + "/{{YYYY}}{{MM}}{{DD}}"
    with pytest.raises(TaskDeferred) as info:
        partition_sensor.execute(make_context())
    trigger = info.value.trigger
    assert isinstance(trigger, PrimusPartitionTrigger)
    assert (trigger.path, trigger.webhdfs_conn_id) == (str(tmp_path / "20261201" / "_SUCCESS"), None)
    (tmp_path / "20261201").mkdir()
    assert partition_sensor.poke(make_context()) is False  # the directory alone is not enough
    (tmp_path / "20261201" / "_SUCCESS").touch()
    assert partition_sensor.poke(make_context()) is True


def test_partition_sensor_asks_webhdfs_for_hdfs_paths(monkeypatch):
    # the [hdfs] extra: installed by scripts/test.sh, not in scripts/test-oldest-airflow.sh's venv
    webhdfs = pytest.importorskip("airflow.providers.apache.hdfs.hooks.webhdfs")

    asked = []
    monkeypatch.setattr(webhdfs.WebHDFSHook, "check_for_path",
                        lambda self, path: asked.append((self.webhdfs_conn_id, path)) or True)
    hdfs_sensor = PrimusPartitionSensor(task_id="p", path="hdfs://nn:8020/logs/{{YYYY}}/{{MM}}/{{DD}}",
                                        partition="2026-12-01")
    assert hdfs_sensor.poke(make_context()) is True
    assert asked == [("webhdfs_default", "/logs/2026/12/01/_SUCCESS")]


def test_suspend_and_resume_the_input_of_a_running_job(primus_home, client, tmp_path):
    day = tmp_path / "20261201"
    day.mkdir()
    (day / "part-0.txt").write_text("".join(f"line-{n}\n" for n in range(2000)))
    spec = make_spec([{"name": "worker", "ports": 0, "consumes_input": True,
                       "command": "while read line; do sleep 0.001; done"}],
                     input={"sources": [{"name": "lines", "path": str(tmp_path / "{{YYYY}}{{MM}}{{DD}}"),
                                         "format": "text", "success_marker": None}],
                            "time_range": {"start": "2026-12-01", "end": "2026-12-01"}, "task_size": "1Ki"})
    app_id = PrimusHook().submit(spec)
    wait_for(lambda: (data := client.status(app_id).data) is not None and data.state == "running",
             what="data running")
    assert PrimusSuspendDataOperator(task_id="pause", app_id=app_id).execute(make_context()) == "suspended"
    assert client.status(app_id).data.state == "suspended"
    assert PrimusResumeDataOperator(task_id="go", app_id=app_id).execute(make_context()) == "running"
    wait_for(lambda: client.status(app_id).job.state == "succeeded", timeout=60, what="job succeeded")
    wait_for(lambda: client.cluster("local").am_pid(app_id) is None, timeout=60, what="the AM to exit")
    with pytest.raises(JobUnreachable, match=rf"^job {app_id} has ended \(succeeded\): its input cannot be suspended$"):
        PrimusSuspendDataOperator(task_id="pause", app_id=app_id).execute(make_context())
