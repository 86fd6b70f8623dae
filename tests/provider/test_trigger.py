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

from airflow_provider_primus.events import LogCursor
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
from primus_runtime.models import StatusDocument

from .conftest import (
    LOOP_STEP_TIMER,
    FakeStateStore,
    airflow_env,
    executor_row,
    favoured,
    make_context,
    run_airflow,
    status_document,
)

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
    PrimusJobTrigger("primus-1", "my_conn", poll_interval=2.5, deadline=123.0, on_kill_action="keep",
                     log_interval=30.0, summary_interval=9.0,
                     log_cursor={"executors": ["worker-0"], "offsets": {"worker-0/stdout@1": 42}}),
    PrimusRoleTrigger("primus-1", role="evaluator", state="succeeded", count=1, primus_conn_id="c",
                      poll_interval=1.0, deadline=5.0, log_interval=10.0),
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
    assert client.status(app_id).job.state in ("pending", "starting", "running")
    client.kill(app_id)


def test_fires_error_for_an_unknown_job(primus_home):
    event = first_event(PrimusJobTrigger("primus-nope", poll_interval=0.2))
    assert event["status"] == "error" and "does not exist" in event["reason"]


def test_on_kill_stops_the_job_and_cleanup_does_not(primus_home, client):
    app_id = PrimusHook().submit(make_spec(SLEEPY))
    wait_for(lambda: client.status(app_id).job.state == "running", what="job running")
    trigger = PrimusJobTrigger(app_id, poll_interval=0.2)
    asyncio.run(trigger.cleanup())  # a triggerer restart: the job must go on
    assert client.status(app_id).job.state == "running"
    asyncio.run(trigger.on_kill())
    wait_for(lambda: client.status(app_id).job.state == "killed", what="job killed")
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
    assert op.execute_complete({}, {"status": "success", "app_id": "a1", "state": "succeeded",
                                  "reason": "success policy met"}) == "a1"
    failed = PrimusHook().submit(make_spec(FAILING))
    wait_for(lambda: client.status(failed).job.state == "failed", what="job failed")
    with pytest.raises(AirflowException, match="exit 7"):
        op.execute_complete({}, {"status": "failed", "app_id": failed, "state": "failed",
                                 "reason": client.status(failed).job.reason})
    slow = PrimusHook().submit(make_spec(SLEEPY))
    with pytest.raises(AirflowException, match="execution_timeout"):
        op.execute_complete({}, {"status": "timeout", "app_id": slow, "state": "running",
                                 "reason": "the deadline (the task's timeout) passed"})
    wait_for(lambda: client.status(slow).job.state == "killed", what="timed-out job killed")


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
    """The trainer lines copied into the task log (Airflow logs to stdout: ``<message>  [<logger>] ...``)."""
    return re.findall(r"\[worker-0 stdout\] (.*?)\s+\[airflow", output)


def test_a_deferred_task_copies_every_line_once_across_hand_offs(primus_home, client, capsys):
    """Issue 27: the triggerer opens a trigger's log file afresh for each trigger of a try, so lines a
    trigger copied were gone after the next hand-off. The task copies them, on the worker, from the
    cursor its deferral carries; the trigger only hands off."""
    spec = make_spec([{"name": "worker", "command": "for i in $(seq 1 40); do echo step-$i; sleep 0.1; done"}])
    op = PrimusSubmitJobOperator(task_id="train", spec=spec, deferrable=True, log_interval=0.5, poll_interval=0.1,
                                 follow_logs=["worker-0"], log_lines_per_minute=1000)
    context = make_context(store=FakeStateStore())
    with pytest.raises(TaskDeferred) as info:
        op.execute(context)
    deferred: TaskDeferred | None = info.value
    hand_offs, out = 0, capsys.readouterr().out
    while deferred is not None:
        assert deferred.trigger.log_interval == 0.5 and deferred.trigger.log_cursor["executors"] == ["worker-0"]
        event = first_event(deferred.trigger)
        assert copied_lines(capsys.readouterr().out) == []  # the trigger copies none
        assert LogCursor.model_validate(event["log_cursor"]) == LogCursor.model_validate(
            deferred.trigger.log_cursor)  # it brings the cursor back
        try:
            getattr(op, deferred.method_name)(context, event)  # as Airflow resumes the task
            deferred = None
        except TaskDeferred as again:
            hand_offs, deferred = hand_offs + 1, again
        out += capsys.readouterr().out
    assert hand_offs >= 2, out[-3000:]
    assert copied_lines(out) == [f"step-{i}" for i in range(1, 41)]  # each once, in order


class FakeLogs:
    """A hook whose one executor's stdout is a file (``LogFollower``'s unit tests)."""

    def __init__(self, path):
        self.path, self.log = path, None
        self.client = self

    def cluster_for(self, app_id):
        return self

    def read_log(self, app_id, path, offset):
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read()

    def status(self) -> StatusDocument:
        return status_document(executors=[executor_row("worker-0", incarnation="1", logs={"stdout": str(self.path)})])


def chatty_copies(tmp_path, copy_every: float, minutes: int = 10, lines_per_second: int = 20) -> list[list[str]]:
    """What a follower copies of a trainer writing ``lines_per_second`` when it copies every
    ``copy_every`` seconds (a worker slot's poll, or a deferred task's hand-off), on a fake clock."""
    from airflow_provider_primus.hooks.primus import LogFollower

    log = tmp_path / f"stdout-{copy_every}"
    log.write_text("")
    hook, now, written = FakeLogs(log), [0.0], 0
    follower = LogFollower(["worker-0"], streams=("stdout",), lines_per_minute=60, clock=lambda: now[0])
    copies = []
    while now[0] < minutes * 60:
        now[0] += copy_every
        with log.open("a") as f:
            for _ in range(int(lines_per_second * copy_every)):
                written += 1
                f.write(f"line-{written}\n")
        follower = LogFollower.from_cursor(follower.cursor(), 60, clock=lambda: now[0])  # as across hand-offs
        copies.append(follower.new_lines(hook, "primus-1", hook.status()))
    return copies


def test_one_line_cap_for_both_ways_of_waiting(tmp_path):
    """Issue 27: the worker slot copied up to 200 lines at every poll, the deferred task 20 at each
    hand-off. One rule now: at most lines_per_minute of a log a minute, plus one minute's worth saved."""
    for copy_every in (5, 300):  # polls in a worker slot; hand-offs of a deferred task
        copies = chatty_copies(tmp_path, copy_every)
        trainer_lines = [line for copy in copies for line in copy if "lines skipped" not in line]
        assert 600 <= len(trainer_lines) <= 660, (copy_every, len(trainer_lines))  # 10 minutes at 60 a minute
        numbers = [int(line.rpartition("-")[2]) for line in trainer_lines]
        assert numbers == sorted(set(numbers))  # none twice, in order
        notices = [line for copy in copies for line in copy if "lines skipped" in line]
        assert notices[0].startswith("[worker-0 stdout] ... ") and "(over 60 a minute)" in notices[0]
        skipped = sum(int(re.search(r"\.\.\. (\d+) lines skipped", line).group(1)) for line in notices)
        assert skipped + len(trainer_lines) == 20 * 600  # every line copied or counted


def test_a_quiet_trainers_lines_all_arrive_and_a_burst_within_a_minutes_worth_too(tmp_path):
    from airflow_provider_primus.hooks.primus import LogFollower

    log = tmp_path / "stdout"
    log.write_text("".join(f"banner-{i}\n" for i in range(50)))  # a trainer's start: a burst
    hook, now = FakeLogs(log), [0.0]
    follower = LogFollower(["worker-0"], streams=("stdout",), lines_per_minute=60, clock=lambda: now[0])
    now[0] = 5
    assert len(follower.new_lines(hook, "primus-1", hook.status())) == 50
    copied = []
    for second in range(10, 600, 5):  # then a line every 5 s
        now[0] = second
        with log.open("a") as f:
            f.write(f"step-{second}\n")
        copied += follower.new_lines(hook, "primus-1", hook.status())
    assert copied == [f"[worker-0 stdout] step-{second}" for second in range(10, 600, 5)]


def test_the_last_copy_says_what_was_skipped_since_the_last_line_copied(tmp_path):
    from airflow_provider_primus.hooks.primus import LogFollower

    log = tmp_path / "stdout"
    log.write_text("".join(f"line-{i}\n" for i in range(100)))
    hook, now = FakeLogs(log), [0.0]
    follower = LogFollower(["worker-0"], streams=("stdout",), lines_per_minute=60, clock=lambda: now[0])
    assert len(follower.new_lines(hook, "primus-1", hook.status())) == 61  # a notice and a minute's worth
    with log.open("a") as f:
        f.write("".join(f"more-{i}\n" for i in range(10)))
    now[0] = 0.5  # too soon for a line: the skip waits for the next copy
    assert follower.new_lines(hook, "primus-1", hook.status()) == []
    last = follower.new_lines(hook, "primus-1", hook.status(), final=True)
    assert len(last) == 1 and last[0].startswith("[worker-0 stdout] ... 10 lines skipped (over 60 a minute), "
                                                 "the newest 0 follow (all: primus logs primus-1 --role worker")


def test_the_last_copy_reads_a_last_line_without_newline_and_tries_a_failed_read_again(tmp_path, monkeypatch):
    """The CI run of 2026-12-07 lost an evaluator's last line on YARN: a read failing at the last
    copy was taken as an empty log, silently, and a last line without a newline was never copied."""
    import logging

    from airflow_provider_primus.hooks import primus as hook_module
    from airflow_provider_primus.hooks.primus import LogFollower

    log = tmp_path / "stdout"
    log.write_text("step-1\n")
    hook = FakeLogs(log)
    hook.log = logging.getLogger("test.follower")
    follower = LogFollower(["worker-0"], streams=("stdout",))
    assert follower.new_lines(hook, "primus-1", hook.status()) == ["[worker-0 stdout] step-1"]
    with log.open("a") as f:
        f.write("step-2\nevaluation loss 0.1")  # the trainer's last words, no newline
    assert follower.new_lines(hook, "primus-1", hook.status()) == ["[worker-0 stdout] step-2"]

    reads, read = [], FakeLogs.read_log
    def flaky(self, app_id, path, offset):  # the NodeManager slow once
        reads.append(offset)
        if len(reads) == 1:
            raise TimeoutError("timed out")
        return read(self, app_id, path, offset)
    monkeypatch.setattr(FakeLogs, "read_log", flaky)
    monkeypatch.setattr(hook_module.time, "sleep", lambda seconds: None)
    warnings = []
    monkeypatch.setattr(hook.log, "warning", lambda message, *args: warnings.append(message % args))
    assert follower.new_lines(hook, "primus-1", hook.status(), final=True) == \
        ["[worker-0 stdout] evaluation loss 0.1"]
    assert warnings == ["Cannot read the log worker-0/stdout of Primus job primus-1 (trying again in a second): "
                        "timed out"]


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
    cursor = {"executors": ["worker-0"], "offsets": {"worker-0/stdout@9": 12}, "allowance": {},
              "copied_at": time.time()}
    with pytest.raises(TaskDeferred) as info:
        op.execute_complete(make_context(store=FakeStateStore()),
                            {"status": "running", "app_id": app_id, "state": "running", "reason": "log hand-off",
                             "deadline": 123.0, "log_cursor": cursor})
    trigger = info.value.trigger
    assert (trigger.app_id, trigger.deadline, trigger.log_interval) == (app_id, 123.0, 60)
    assert trigger.log_cursor["offsets"]["worker-0/stdout@9"] == 12  # carried on
    assert "No connection" not in capsys.readouterr().out  # the try's start said it, not each resume
    client.kill(app_id)


# A line every 0.4 s, copied by the task at each hand-off (every 2 s) and at the end.
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
# import is part of what may not block it. LOOP_STEP_TIMER lists the steps (a task's step, a callback)
# whose own time reached 0.1 s, as asyncio's debug mode describes them.
BLOCKING_PROBE = LOOP_STEP_TIMER + """
import json, sys

import threading
from types import SimpleNamespace

import airflow.jobs.triggerer_job_runner  # what the triggerer imported before it runs any trigger
from airflow._shared.module_loading import import_string
from airflow.sdk.execution_time import task_runner


class Comms:  # the trigger runner's SUPERVISOR_COMMS, as the Task SDK's XCom.set uses it (the progress)
    xcoms_set = 0

    def send(self, msg):
        assert threading.current_thread() is not threading.main_thread(), "sent on the event loop"
        Comms.xcoms_set += type(msg).__name__ == "SetXCom"


task_runner.SUPERVISOR_COMMS = Comms()


async def first_event(classpath, kwargs):
    trigger = import_string(classpath)(**kwargs)  # the first one imports the trigger's module
    # What the triggerer gives a deferred task's trigger: it publishes the progress as the task's XCom.
    trigger.task_instance = SimpleNamespace(dag_id="dag", task_id="train", run_id="manual__1", map_index=-1)
    # The triggerer creates a trigger in one step (create_triggers) and runs it in its own task:
    # each is measured on its own here too.
    await asyncio.sleep(0)
    async for event in trigger.run():
        return event.payload


async def main(app_id, gate):
    classpath = "airflow_provider_primus.triggers.primus.PrimusJobTrigger"
    kwargs = {"app_id": app_id, "poll_interval": 0.1, "log_interval": 0.5, "progress_interval": 0.2}
    events = [await first_event(classpath, kwargs)]  # a log hand-off while the job runs
    open(gate, "w").close()  # the trainer ends
    kwargs.update(log_interval=None)
    events.append(await first_event(classpath, kwargs))  # deferred again: the job's end
    print("PROBE " + json.dumps({"events": events, "slow": slow, "xcoms_set": Comms.xcoms_set}))  # Airflow logs to stdout too


loop = asyncio.new_event_loop()
loop.set_debug(True)
loop.slow_callback_duration = 3600  # LOOP_STEP_TIMER judges the steps
loop.run_until_complete(main(*sys.argv[1:]))
loop.close()
"""


@pytest.mark.parametrize("tls", [False, True], ids=["http", "tls"])
def test_the_trigger_never_blocks_the_event_loop(primus_home, client, tls, tmp_path):
    """Issue 27: the triggerer warned its loop was blocked (0.28-0.40 s) by Primus triggers. From
    the import of the trigger's module to its last event, across a hand-off, no step on the loop may
    take 0.1 s of its own (LOOP_STEP_TIMER; asyncio's debug mode says which one did)."""
    gate = tmp_path / "gate"  # the probe opens it after the hand-off: the job runs until then
    spec = make_spec([{"name": "worker", "command": f"i=0; while [ ! -e {gate} ]; do i=$((i+1)); echo step-$i; "
                                                    "sleep 0.1; done"}], am={"tls": tls})
    app_id = PrimusHook().submit(spec)
    wait_for(lambda: client.status(app_id).job.state == "running", what="job running")
    got = subprocess.run([sys.executable, "-c", BLOCKING_PROBE, app_id, str(gate)], preexec_fn=favoured,
                         capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, got.stderr[-3000:]
    (result,) = [json.loads(line.removeprefix("PROBE ")) for line in got.stdout.splitlines()
                 if line.startswith("PROBE ")]
    assert [event["status"] for event in result["events"]] == ["running", "success"], result["events"]
    assert result["slow"] == []
    assert result["xcoms_set"] >= 2  # the progress was published (in threads) along the way


def test_events_carry_only_what_the_task_needs_and_the_trigger_never_announces_the_fallback(primus_home, client,
                                                                                           capsys):
    """Issue 27: Airflow logs each event whole ("Trigger fired event"), and the task log had the
    "No connection 'primus_default'" line from the try's start and again from each trigger."""
    app_id = client.submit(make_spec(  # the runtime's client: says nothing of connections
        [{"name": "worker", "command": "for i in $(seq 1 30); do echo step-$i; sleep 0.1; done"}]))
    trigger = PrimusJobTrigger(app_id, poll_interval=0.1, log_interval=0.5, deadline=time.time() + 600)
    running = first_event(trigger)
    assert set(running) == {"status", "app_id", "state", "reason", "deadline"}, running
    assert running["status"] == "running" and running["deadline"] == trigger.deadline
    ended = first_event(PrimusJobTrigger(**{**trigger.serialize()[1], "log_interval": None}))
    assert ended == {"status": "success", "app_id": app_id, "state": "succeeded", "reason": ended["reason"]}
    failed = client.submit(make_spec(FAILING))
    event = first_event(PrimusJobTrigger(failed, poll_interval=0.1))
    assert set(event) == {"status", "app_id", "state", "reason"} and "exit 7" in event["reason"]
    assert "No connection" not in capsys.readouterr().out  # the task's start said it


def test_an_events_reason_is_cut_short_and_the_task_fails_with_the_jobs_whole_reason(primus_home, client):
    long_reason = "x" * 1000
    event = PrimusJobTrigger("primus-1")._event("failed", "failed", long_reason).payload
    assert len(event["reason"]) == 300 and event["reason"].endswith("…")
    failed = PrimusHook().submit(make_spec(
        [{"name": "worker", "command": f"echo {'y' * 400} >&2; exit 7", "failover": {"restart": "never"}}]))
    wait_for(lambda: client.status(failed).job.state == "failed", what="job failed")
    reason = client.status(failed).job.reason
    op = PrimusSubmitJobOperator(task_id="train", spec={}, deferrable=True)
    with pytest.raises(AirflowException) as raised:
        op.execute_complete({}, {"status": "failed", "app_id": failed, "state": "failed", "reason": reason[:50]})
    assert f"Primus job {failed} failed: {reason}" in str(raised.value)


def test_a_misspelt_or_unknown_event_field_fails_loudly_on_resume():
    """Issue 25: a trigger event crosses into the worker as a model dumped to JSON and validated back."""
    from pydantic import ValidationError

    from airflow_provider_primus.events import PrimusTriggerEvent

    event = PrimusTriggerEvent.build("failed", "x" * 1000, app_id="primus-1", state="failed")
    payload = event.payload()
    assert payload == {"status": "failed", "reason": "x" * 299 + "…", "app_id": "primus-1", "state": "failed"}
    assert PrimusTriggerEvent.of(payload) == event
    for wrong in ({**payload, "reasn": "typo"}, {**payload, "status": "succeeded"}, {"app_id": "primus-1"}):
        with pytest.raises(ValidationError):
            PrimusTriggerEvent.of(wrong)
    op = PrimusSubmitJobOperator(task_id="train", spec={})
    with pytest.raises(ValidationError, match="status"):
        op.execute_complete(make_context(), {**payload, "status": "done"})
