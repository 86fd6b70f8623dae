"""PrimusJobTrigger against real local jobs, and the operator's deferrable path."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import subprocess
import sys
import time
from datetime import timedelta
from importlib import import_module

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator
from airflow_provider_primus.triggers.primus import (
    PrimusDataProgressTrigger,
    PrimusJobTrigger,
    PrimusPartitionTrigger,
    PrimusRoleTrigger,
)
from conftest import make_spec, wait_for
from primus_runtime.backends.local.jobs import processes_of_job

from .conftest import FakeStateStore, airflow_env, make_context, run_airflow

QUICK = [{"name": "worker", "command": "sleep 0.3"}]
FAILING = [{"name": "worker", "command": "exit 7", "failover": {"restart": "never"}}]
SLEEPY = [{"name": "worker", "command": "sleep 300"}]


def first_event(trigger: PrimusJobTrigger, timeout: float = 60) -> dict:
    async def take() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(asyncio.wait_for(take(), timeout))


@pytest.mark.parametrize("trigger", [
    PrimusJobTrigger("primus-1", "my_conn", poll_interval=2.5, deadline=123.0, follow_logs=["worker-0"],
                     on_kill_action="keep", log_offsets={"/jobs/a/stdout": 42}, log_interval=30.0, max_log_lines=7,
                     summary_interval=9.0),
    PrimusRoleTrigger("primus-1", role="evaluator", state="succeeded", count=1, primus_conn_id="c",
                      poll_interval=1.0, deadline=5.0, follow_logs=["evaluator-0"]),
    PrimusDataProgressTrigger("primus-1", min_progress=0.5, partition="2026-12-01", primus_conn_id="c", max_lag=10,
                              watermark_after="2026-12-01T05:00:00.000+00:00"),
    PrimusPartitionTrigger("/data/20261201/_SUCCESS", webhdfs_conn_id="webhdfs_default", poll_interval=3.0,
                           deadline=9.0),
], ids=lambda t: type(t).__name__)
def test_serialize_carries_every_argument(trigger):
    path, kwargs = trigger.serialize()
    module, _, name = path.rpartition(".")
    again = getattr(import_module(module), name)(**kwargs)
    assert again.serialize() == (path, kwargs)
    # every constructor argument is in the serialized state, none is left to its default
    params = set(inspect.signature(type(trigger).__init__).parameters) - {"self"}
    assert set(kwargs) == params


def test_the_triggers_default_connection_is_the_hooks():
    # triggers/primus.py repeats the name rather than import the hook's module (see its imports)
    for trigger in (PrimusJobTrigger("a"), PrimusRoleTrigger("a", role="r"), PrimusDataProgressTrigger("a")):
        assert trigger.primus_conn_id == PrimusHook.default_conn_name


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


def test_role_trigger_fires_once_the_role_runs_and_fails_when_the_job_ends_first(primus_home, client):
    app_id = PrimusHook().submit(make_spec([{"name": "worker", "replicas": 2, "command": "sleep 300"}]))
    event = first_event(PrimusRoleTrigger(app_id, role="worker", state="running", poll_interval=0.2))
    assert event["status"] == "success" and "2 of 2 running" in event["reason"]
    client.kill(app_id)
    event = first_event(PrimusRoleTrigger(app_id, role="worker", state="succeeded", poll_interval=0.2))
    assert event["status"] == "failed" and event["state"] == "killed"
    assert "role worker stopped at 0 of 2 succeeded" in event["reason"]


def test_data_trigger_fails_for_a_job_without_input(primus_home, client):
    app_id = PrimusHook().submit(make_spec(QUICK))
    event = first_event(PrimusDataProgressTrigger(app_id, min_progress=0.5, poll_interval=0.2))
    assert event["status"] == "failed" and "has no input section" in event["reason"]


def test_job_trigger_copies_new_log_lines_of_followed_executors(primus_home, client, capsys):
    spec = make_spec([{"name": "worker", "command": "for i in 1 2 3; do echo step-$i; sleep 0.2; done"}])
    app_id = PrimusHook().submit(spec)
    event = first_event(PrimusJobTrigger(app_id, poll_interval=0.1, follow_logs=["worker-0"]))
    assert event["status"] == "success"
    copied = re.findall(r"\[worker-0 stdout\] (\S+)", capsys.readouterr().out)  # Airflow logs to stdout
    assert copied == ["step-1", "step-2", "step-3"]  # each line once, in order


def test_partition_trigger_fires_when_the_marker_appears(tmp_path):
    marker = tmp_path / "20261201" / "_SUCCESS"

    async def scenario() -> dict:
        trigger = PrimusPartitionTrigger(str(marker), poll_interval=0.1)
        waiting = asyncio.ensure_future(trigger.run().__anext__())
        await asyncio.sleep(0.5)
        assert not waiting.done()  # no marker, no event
        marker.parent.mkdir()
        marker.touch()
        return (await asyncio.wait_for(waiting, 10)).payload

    assert asyncio.run(scenario())["status"] == "success"
    late = PrimusPartitionTrigger(str(tmp_path / "nope"), poll_interval=0.1, deadline=time.time() - 1)
    assert first_event(late)["status"] == "timeout"  # type: ignore[arg-type]


def copied_lines(output: str) -> list[str]:
    """The trainer lines the trigger logged (Airflow logs to stdout: ``<message>  [<logger>] loc=...``)."""
    return re.findall(r"\[worker-0 stdout\] (.*?)\s+\[airflow_provider_primus", output)


def test_job_trigger_copies_only_the_newest_lines_and_counts_the_others(primus_home, client, capsys):
    app_id = PrimusHook().submit(make_spec([{"name": "worker", "command": "seq 1 500"}]))
    event = first_event(PrimusJobTrigger(app_id, poll_interval=0.1, follow_logs=["worker-0"], max_log_lines=5))
    assert event["status"] == "success"
    copied = copied_lines(capsys.readouterr().out)
    assert copied[0].startswith("... 495 lines skipped, the newest 5 follow (all: primus logs ")
    assert copied[1:] == ["496", "497", "498", "499", "500"]
    assert "log_offsets" not in event  # the job ended: no trigger follows on from there


def test_a_trigger_recreated_from_its_kwargs_never_copies_a_line_twice(primus_home, client, capsys):
    app_id = PrimusHook().submit(make_spec([{"name": "worker",
                                             "command": "for i in $(seq 1 40); do echo step-$i; sleep 0.1; done"}]))
    wait_for(lambda: client.status(app_id)["job"]["state"] == "running", what="job running")
    first = PrimusJobTrigger(app_id, poll_interval=0.1, follow_logs=["worker-0"], log_interval=0.3, max_log_lines=1000)
    handed_off = first_event(first)
    assert handed_off["status"] == "running" and handed_off["log_offsets"]  # a hand-off while the job runs
    # The operator defers again from the event's offsets ...
    path, kwargs = first.serialize()
    kwargs |= {"log_offsets": handed_off["log_offsets"], "log_interval": None}
    second = PrimusJobTrigger(**kwargs)

    async def interrupted() -> None:  # ... and the triggerer dies before that trigger fires
        await asyncio.wait_for(second.run().__anext__(), 0.2)

    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(interrupted())
    restarted = PrimusJobTrigger(**second.serialize()[1])  # re-created from its kwargs in the DB
    assert first_event(restarted)["status"] == "success"
    assert copied_lines(capsys.readouterr().out) == [f"step-{i}" for i in range(1, 41)]  # each once, in order


def test_trigger_logs_a_periodic_one_line_summary(primus_home, client, capsys):
    app_id = PrimusHook().submit(make_spec([{"name": "worker", "replicas": 2, "command": "sleep 1.5"}]))
    event = first_event(PrimusJobTrigger(app_id, poll_interval=0.1, summary_interval=0.3))
    assert event["status"] == "success"
    summaries = [line for line in capsys.readouterr().out.splitlines() if "roles ready" in line]
    assert summaries and all(f"Primus job {app_id} " in line and "roles ready " in line for line in summaries)
    assert any("(worker 2/2)" in line for line in summaries)


def test_deferred_operator_defers_again_from_a_log_hand_off(primus_home, client, capsys):
    app_id = client.submit(make_spec(SLEEPY))
    op = PrimusSubmitJobOperator(task_id="train", spec={}, deferrable=True, log_interval=60, follow_logs=["worker-0"])
    offsets = {"/some/stdout": 12}
    with pytest.raises(TaskDeferred) as info:
        op.execute_complete(make_context(store=FakeStateStore()),
                            {"status": "running", "app_id": app_id, "state": "running", "reason": "log hand-off",
                             "deadline": 123.0, "log_offsets": offsets})
    trigger = info.value.trigger
    assert (trigger.app_id, trigger.deadline, trigger.log_offsets, trigger.log_interval) == (app_id, 123.0, offsets, 60)
    assert "No connection" not in capsys.readouterr().out  # the try's start said it, not each resume
    client.kill(app_id)


# A line every 0.4 s: the trigger copies at most 20 lines per check (the newest), so a hand-off
# (event, resume, defer again) must take under 8 s for no line to be skipped; Airflow 3.2's
# `dags test` resumes slower than 3.3's (with 0.2 s it skipped lines there, never repeated one).
HAND_OFF_DAG = """
from datetime import datetime
from airflow.sdk import DAG
from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator

with DAG(dag_id="primus_log_hand_off", schedule=None, start_date=datetime(2026, 1, 1)):
    PrimusSubmitJobOperator(
        task_id="train", deferrable=True, poll_interval=0.5, log_interval=2,
        spec={"name": "chatty", "am": {"heartbeat_interval": "500ms"},
              "roles": [{"name": "worker", "command": "for i in $(seq 1 40); do echo tick-$i; sleep 0.4; done"}]},
    )
"""


def test_deferred_task_hands_off_its_log_through_airflow_without_repeating_a_line(migrated_airflow_home, tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "hand_off.py").write_text(HAND_OFF_DAG)
    env = airflow_env(migrated_airflow_home, tmp_path / "primus-home") | {"AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    got = run_airflow("dags", "test", "primus_log_hand_off", env=env, timeout=240)
    output = got.stdout + got.stderr
    assert got.returncode == 0, output[-5000:]
    assert output.count("Pausing task as DEFERRED") >= 2  # deferred again after a hand-off
    assert copied_lines(output) == [
        f"tick-{i}" for i in range(1, 41)]  # every line once, in order, across the hand-offs


# Runs in a fresh interpreter, as the triggerer does: its own modules loaded, the trigger's not yet.
# The triggerer imports a trigger's class on its event loop (TriggerRunner.create_triggers), so the
# import is part of what may not block it. asyncio's debug mode logs every callback (a task's step)
# slower than slow_callback_duration: "Executing <Task ...> took 0.123 seconds".
BLOCKING_PROBE = """
import asyncio, json, logging, sys

import airflow.jobs.triggerer_job_runner  # what the triggerer imported before it runs any trigger
from airflow._shared.module_loading import import_string

slow = []


class Slow(logging.Handler):
    def emit(self, record):
        message = record.getMessage()
        if message.startswith("Executing ") and " took " in message:
            slow.append(message)


logging.getLogger("asyncio").addHandler(Slow())
logging.getLogger("asyncio").setLevel(logging.WARNING)


async def first_event(classpath, kwargs):
    trigger = import_string(classpath)(**kwargs)  # the first one imports the trigger's module
    async for event in trigger.run():
        return event.payload


async def main(app_id, gate):
    classpath = "airflow_provider_primus.triggers.primus.PrimusJobTrigger"
    kwargs = {"app_id": app_id, "poll_interval": 0.1, "follow_logs": ["worker-0"], "log_interval": 0.5,
              "max_log_lines": 5}
    events = [await first_event(classpath, kwargs)]  # a log hand-off while the job runs
    open(gate, "w").close()  # the trainer ends
    kwargs.update(log_offsets=events[0].get("log_offsets") or {}, log_interval=None)
    events.append(await first_event(classpath, kwargs))  # deferred again: the job's end
    print("PROBE " + json.dumps({"events": events, "slow": slow}))  # Airflow logs to stdout too


loop = asyncio.new_event_loop()
loop.set_debug(True)
loop.slow_callback_duration = 0.1
loop.run_until_complete(main(*sys.argv[1:]))
loop.close()
"""


@pytest.mark.parametrize("tls", [False, True], ids=["http", "tls"])
def test_the_trigger_never_blocks_the_event_loop(primus_home, client, tls, tmp_path):
    """Issue 27: the triggerer warned its loop was blocked (0.28-0.40 s) by Primus triggers. From
    the import of the trigger's module to its last event, with log following and a hand-off, no step
    on the loop may take 0.1 s (asyncio's debug mode says which one did)."""
    gate = tmp_path / "gate"  # the probe opens it after the hand-off: the job runs until then
    spec = make_spec([{"name": "worker", "command": f"i=0; while [ ! -e {gate} ]; do i=$((i+1)); echo step-$i; "
                                                    "sleep 0.1; done"}], am={"tls": tls})
    app_id = PrimusHook().submit(spec)
    wait_for(lambda: client.status(app_id)["job"]["state"] == "running", what="job running")
    got = subprocess.run([sys.executable, "-c", BLOCKING_PROBE, app_id, str(gate)], capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, got.stderr[-3000:]
    (result,) = [json.loads(line.removeprefix("PROBE ")) for line in got.stdout.splitlines()
                 if line.startswith("PROBE ")]
    assert [event["status"] for event in result["events"]] == ["running", "success"], result["events"]
    assert result["slow"] == []


def test_events_carry_only_what_the_task_needs_and_the_trigger_never_announces_the_fallback(primus_home, client,
                                                                                           capsys):
    """Issue 27: Airflow logs each event whole ("Trigger fired event"), and the task log had the
    "No connection 'primus_default'" line from the try's start and again from each trigger."""
    app_id = client.submit(make_spec(  # the runtime's client: says nothing of connections
        [{"name": "worker", "command": "for i in $(seq 1 30); do echo step-$i; sleep 0.1; done"}]))
    trigger = PrimusJobTrigger(app_id, poll_interval=0.1, follow_logs=["worker-0"], log_interval=0.5,
                               deadline=time.time() + 600)
    running = first_event(trigger)
    assert set(running) == {"status", "app_id", "state", "reason", "deadline", "log_offsets"}, running
    assert running["status"] == "running" and running["deadline"] == trigger.deadline
    incarnation = client.executors(app_id, ids=["worker-0"])["executors"][0]["incarnation"]
    assert set(running["log_offsets"]) == {f"worker-0/stdout@{incarnation}", f"worker-0/stderr@{incarnation}"}
    ended = first_event(PrimusJobTrigger(**{**trigger.serialize()[1], "log_offsets": running["log_offsets"],
                                           "log_interval": None}))
    assert ended == {"status": "success", "app_id": app_id, "state": "succeeded", "reason": ended["reason"]}
    failed = client.submit(make_spec(FAILING))
    event = first_event(PrimusJobTrigger(failed, poll_interval=0.1, follow_logs=["worker-0"]))
    assert set(event) == {"status", "app_id", "state", "reason"} and "exit 7" in event["reason"]
    assert "No connection" not in capsys.readouterr().out  # the task's start said it


def test_an_events_reason_is_cut_short_and_the_task_fails_with_the_jobs_whole_reason(primus_home, client):
    long_reason = "x" * 1000
    event = PrimusJobTrigger("primus-1")._event("failed", "failed", long_reason).payload
    assert len(event["reason"]) == 300 and event["reason"].endswith("…")
    failed = PrimusHook().submit(make_spec(
        [{"name": "worker", "command": f"echo {'y' * 400} >&2; exit 7", "failover": {"restart": "never"}}]))
    wait_for(lambda: client.status(failed)["job"]["state"] == "failed", what="job failed")
    reason = client.status(failed)["job"]["reason"]
    op = PrimusSubmitJobOperator(task_id="train", spec={}, deferrable=True)
    with pytest.raises(AirflowException) as raised:
        op.execute_complete({}, {"status": "failed", "app_id": failed, "state": "failed", "reason": reason[:50]})
    assert f"Primus job {failed} failed: {reason}" in str(raised.value)
