"""PrimusJobTrigger against real local jobs, and the operator's deferrable path."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from importlib import import_module

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator
from airflow_provider_primus.triggers.primus import PrimusJobTrigger
from conftest import make_spec, wait_for
from primus_runtime.backends.local import processes_of_job

from .conftest import make_context

QUICK = [{"name": "worker", "command": "sleep 0.3"}]
FAILING = [{"name": "worker", "command": "exit 7", "failover": {"restart": "never"}}]
SLEEPY = [{"name": "worker", "command": "sleep 300"}]


def first_event(trigger: PrimusJobTrigger, timeout: float = 60) -> dict:
    async def take() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(asyncio.wait_for(take(), timeout))


def test_serialize_round_trips_every_argument():
    trigger = PrimusJobTrigger("primus-1", "my_conn", poll_interval=2.5, deadline=123.0, on_kill_action="keep")
    path, kwargs = trigger.serialize()
    module, _, name = path.rpartition(".")
    again = getattr(import_module(module), name)(**kwargs)
    assert again.serialize() == (path, kwargs)
    assert kwargs == {"app_id": "primus-1", "primus_conn_id": "my_conn", "poll_interval": 2.5,
                      "deadline": 123.0, "on_kill_action": "keep"}


def test_fires_success_when_the_job_succeeds(primus_home):
    app_id = PrimusHook().submit(make_spec(QUICK))
    event = first_event(PrimusJobTrigger(app_id, poll_interval=0.2))
    assert event["status"] == "success" and event["app_id"] == app_id and event["state"] == "succeeded"


def test_fires_failed_with_the_runtime_reason(primus_home):
    app_id = PrimusHook().submit(make_spec(FAILING))
    event = first_event(PrimusJobTrigger(app_id, poll_interval=0.2))
    assert event["status"] == "failed" and event["state"] == "failed"
    assert "exit 7" in event["reason"]


def test_fires_timeout_once_the_deadline_passed_and_leaves_the_job(primus_home, client):
    app_id = PrimusHook().submit(make_spec(SLEEPY))
    event = first_event(PrimusJobTrigger(app_id, poll_interval=0.2, deadline=time.time() - 1))
    assert event["status"] == "timeout"
    assert client.status(app_id)["job"]["state"] in ("pending", "starting", "running")
    client.kill(app_id)


def test_fires_error_for_an_unknown_job(primus_home):
    event = first_event(PrimusJobTrigger("primus-nope", poll_interval=0.2))
    assert event["status"] == "error" and "does not exist" in event["reason"]


def test_on_kill_stops_the_job_and_cleanup_does_not(primus_home, client):
    app_id = PrimusHook().submit(make_spec(SLEEPY))
    wait_for(lambda: client.status(app_id)["job"]["state"] == "running", what="job running")
    trigger = PrimusJobTrigger(app_id, poll_interval=0.2)
    asyncio.run(trigger.cleanup())  # a triggerer restart: the job must go on
    assert client.status(app_id)["job"]["state"] == "running"
    asyncio.run(trigger.on_kill())
    wait_for(lambda: client.status(app_id)["job"]["state"] == "killed", what="job killed")
    wait_for(lambda: processes_of_job(app_id) == [], what="no process left")


def test_deferrable_operator_defers_with_the_job_and_an_absolute_deadline(primus_home, client):
    op = PrimusSubmitJobOperator(task_id="train", spec=make_spec(SLEEPY), deferrable=True, poll_interval=0.5,
                                 execution_timeout=timedelta(minutes=10))
    context = make_context()
    before = time.time()
    with pytest.raises(TaskDeferred) as info:
        op.execute(context)
    trigger = info.value.trigger
    assert isinstance(trigger, PrimusJobTrigger) and info.value.method_name == "execute_complete"
    assert trigger.app_id == context["ti"].xcoms["app_id"]
    assert before + 600 <= trigger.deadline <= time.time() + 600
    client.kill(trigger.app_id)


def test_execute_complete_maps_events_to_outcomes(primus_home, client):
    op = PrimusSubmitJobOperator(task_id="train", spec={}, deferrable=True)
    assert op.execute_complete({}, {"status": "success", "app_id": "a1", "state": "succeeded"}) == "a1"
    failed = PrimusHook().submit(make_spec(FAILING))
    wait_for(lambda: client.status(failed)["job"]["state"] == "failed", what="job failed")
    with pytest.raises(AirflowException, match="exit 7"):
        op.execute_complete({}, {"status": "failed", "app_id": failed, "state": "failed",
                                 "reason": client.status(failed)["job"]["reason"]})
    slow = PrimusHook().submit(make_spec(SLEEPY))
    with pytest.raises(AirflowException, match="execution_timeout"):
        op.execute_complete({}, {"status": "timeout", "app_id": slow, "state": "running"})
    wait_for(lambda: client.status(slow)["job"]["state"] == "killed", what="timed-out job killed")
