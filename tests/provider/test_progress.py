"""The progress document (progress.py) and its publisher, then the operator publishing it for real jobs."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowTaskTimeout, TaskDeferred
from airflow.sdk.execution_time.timeout import timeout

from airflow_provider_primus.events import PrimusTriggerEvent
from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator
from airflow_provider_primus.progress import PROGRESS_KEY, ProgressPublisher, job_progress, truthful_share
from conftest import make_spec, wait_for
from primus_runtime.api_client import AMRejected
from primus_runtime.models import StatusDocument, StatusSummary

from .conftest import FakeStateStore, execute_in_thread, make_context, requires_airflow_3_3, status_document


def a_status(state: str = "running", data: dict[str, Any] | None = None, reason: str = "") -> StatusDocument:
    """A status document as the AM serves it (models.StatusDocument), with the parts the progress reads."""
    return status_document(
        {"app_id": "primus-1", "state": state, "reason": reason, "started_at": 1.0, "created_at": 1.0},
        [{"name": "ps", "replicas": 1, "ready": 1, "states": {"running": 1}, "restarts": 0},
         {"name": "worker", "replicas": 2, "ready": 1, "states": {"running": 1, "succeeded": 1}, "restarts": 1}],
        data)


def files_data(done: int, total: int, progress: float | None, scan_complete: bool = True,
               state: str = "running", quarantined: int = 0) -> dict[str, Any]:
    return {"state": state, "tasks": {"total": total, "done": done, "quarantined": quarantined},
            "bytes": {"done": 0, "total": 0}, "progress": progress,
            "progress_of_discovered": progress if progress is not None else 0.5, "scan_complete": scan_complete,
            "eta_seconds": 12.5, "watermark": "2026-12-01", "waiting_for": None, "quarantined": [],
            "failure": None}


def test_the_document_says_roles_data_and_the_task_logs_summary():
    doc = job_progress("primus-1", a_status(data=files_data(done=4, total=10, progress=0.4)))
    assert doc["app_id"] == "primus-1" and doc["state"] == "running" and doc["outcome"] is None
    assert doc["roles"] == {"ps": "1/1 running", "worker": "1/2 running, 1/2 succeeded"}
    assert doc["roles_ready"] == "2/3"
    assert doc["data"] == {"state": "running", "done": 4, "discovered": 10, "scan_complete": True, "progress": 0.4,
                           "watermark": "2026-12-01", "eta_seconds": 12.5}
    assert doc["kafka"] is None
    assert doc["summary"] == ("running: ps x1: 1 running | worker x2: 1 running, 1 succeeded (1 restart) | "
                              "data 40% (4/10 tasks), watermark 2026-12-01")
    assert doc["updated_at"].endswith("+00:00")
    json.dumps(doc)  # the task state store holds JSON
    assert job_progress("primus-1", a_status())["data"] is None  # no input


@pytest.mark.parametrize(("done", "total", "progress", "scan_complete", "quarantined", "expected"), [
    (9, 10, 1.0, True, 0, 0.999),  # every byte counted, the last task not marked done yet
    (9, 10, 0.99999, True, 0, 0.999),  # would round to 100%
    (9, 10, 0.9, True, 1, 0.9),  # a quarantined task was never read
    (9, 10, 0.12345, True, 0, 0.123),  # truncated, never rounded up
    (10, 10, 0.99999, True, 0, 1.0),  # all read
    (3, 3, None, False, 0, None),  # partitions still awaited: the total is not known
    (0, 0, 0.0, True, 0, 0.0),
])
def test_the_share_is_100_percent_only_once_every_task_was_read(done, total, progress, scan_complete,
                                                                  quarantined, expected):
    data = files_data(done, total, progress, scan_complete, quarantined=quarantined)
    status = a_status(data=data)
    assert status.data is not None and truthful_share(status.data) == expected
    doc = job_progress("primus-1", status)
    assert doc["data"] is not None and doc["data"]["progress"] == expected
    assert ("data 100%" in doc["summary"]) == (expected == 1.0)  # the summary line agrees


def test_kafka_input_has_no_share_but_its_lag_and_none_of_its_config():
    data = files_data(done=0, total=2, progress=None) | {"kafka": {
        "source": "clicks", "bootstrap_servers": "broker:9092", "topics": ["clicks"], "group": "g",
        "consumer_config": {"sasl.username": "trainer", "sasl.password": "***"}, "reachable": True,
        "lag": 1200, "records_per_s": 300.0, "eta_seconds": 4.0, "watermark": "2026-12-01T00:00:00.000+00:00",
        "progress": None, "partitions": []}}
    data.update(eta_seconds=None, watermark=None)  # a Kafka-only input: the files part knows neither
    doc = job_progress("primus-1", a_status(data=data))
    assert doc["data"] is not None and doc["data"]["progress"] is None
    assert doc["data"]["eta_seconds"] == 4.0 and doc["data"]["watermark"] == "2026-12-01T00:00:00.000+00:00"
    assert doc["kafka"] == {"lag": 1200, "records_per_s": 300.0, "watermark": "2026-12-01T00:00:00.000+00:00",
                            "eta_seconds": 4.0, "reachable": True}
    text = json.dumps(doc)
    assert "sasl" not in text and "broker:9092" not in text and "consumer_config" not in text


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_writes_are_throttled_except_on_a_state_change_and_at_the_end():
    store, clock = WritesStore(), Clock()
    publisher = ProgressPublisher([store], interval=30, clock=clock)
    running = a_status(data=files_data(done=1, total=10, progress=0.1))
    assert publisher.update("primus-1", running)  # the first
    for clock.now in (1.0, 15.0, 29.9):
        assert not publisher.update("primus-1", running)
    clock.now = 30.0
    assert publisher.update("primus-1", running)
    clock.now = 31.0
    assert publisher.update("primus-1", a_status("succeeded"))  # a new state: at once
    clock.now = 32.0
    assert publisher.finish("primus-1", a_status("succeeded"), "success", "every role succeeded")
    assert [(w["state"], w["outcome"]) for w in store.writes] == [
        ("running", None), ("running", None), ("succeeded", None),
        ("succeeded", {"status": "success", "reason": "every role succeeded"})]


def test_a_status_of_an_ended_job_is_written_at_once_with_its_outcome():
    store, clock = WritesStore(), Clock()
    publisher = ProgressPublisher([store], interval=30, clock=clock)
    assert publisher.observe("primus-1", a_status())
    failed = a_status("failed", reason="worker-0 failed (exit 3)")
    clock.now = 1.0
    assert publisher.observe("primus-1", failed)
    assert store.writes[-1]["outcome"] == {"status": "failed", "reason": "worker-0 failed (exit 3)"}


class WritesStore(FakeStateStore):
    """Keeps every value written to ``primus_progress``, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[dict[str, Any]] = []

    def set(self, key: str, value: Any, *, retention: Any = None) -> None:
        if key == PROGRESS_KEY:
            json.dumps(value)
            self.writes.append(value)
        super().set(key, value)


def test_without_a_task_state_store_the_xcom_alone_is_published_and_the_log_says_so_once(caplog):
    log = logging.getLogger("test-progress")
    context = make_context()
    with caplog.at_level(logging.INFO, logger="test-progress"):
        publisher = ProgressPublisher.for_task(context, 30, log, announce=True)
        ProgressPublisher.for_task(context, 30, log)  # execute_complete: said already
    assert publisher.update("primus-1", a_status()) and publisher.published
    assert context["ti"].xcoms[PROGRESS_KEY]["state"] == "running"
    assert publisher.finish("primus-1", None, "error", "gone")
    assert context["ti"].xcoms[PROGRESS_KEY]["outcome"] == {"status": "error", "reason": "gone"}
    assert [r.getMessage() for r in caplog.records] == [
        "This Airflow has no task state store (3.3+): the job's progress is published as the XCom "
        "'primus_progress' only"]


@requires_airflow_3_3("the task state store")
def test_a_task_with_a_store_publishes_the_same_document_to_its_xcom_and_its_store():
    store = WritesStore()
    context = make_context(store=store)
    publisher = ProgressPublisher.for_task(context, 30, logging.getLogger("test-progress"))
    assert publisher.update("primus-1", a_status())
    assert store.writes == [context["ti"].xcoms[PROGRESS_KEY]]


def test_a_failing_sink_never_fails_the_task_is_reported_once_and_the_others_still_get_it(caplog):
    class Broken:
        def set(self, key: str, value: Any) -> None:
            raise RuntimeError("API server unreachable")

    store = WritesStore()
    publisher = ProgressPublisher([Broken(), store], interval=0)
    with caplog.at_level(logging.WARNING):
        assert publisher.update("primus-1", a_status())
        assert publisher.update("primus-1", a_status())
    assert len(store.writes) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "Cannot publish the progress of Primus job primus-1 to the task state store: API server unreachable"]
    assert not ProgressPublisher([Broken()], interval=0).update("primus-1", a_status())


def test_a_trigger_event_is_published_with_the_status_read_on_resume_and_its_outcome():
    store = WritesStore()
    publisher = ProgressPublisher([store])
    status = a_status(data=files_data(done=3, total=10, progress=0.3))
    assert publisher.from_event(fired("running", "running", "log hand-off"), status)
    assert publisher.from_event(fired("failed", "failed", "Primus job primus-1 failed: worker-0 exit 3"), status)
    assert publisher.from_event(fired("error", "gone", "Primus job primus-1 does not exist (any more)"), None)
    assert store.writes[0] == {**job_progress("primus-1", status), "updated_at": store.writes[0]["updated_at"]}
    assert store.writes[1]["outcome"] == {"status": "failed", "reason": "Primus job primus-1 failed: worker-0 exit 3"}
    assert store.writes[1]["data"] == store.writes[0]["data"]
    assert (store.writes[2]["state"], store.writes[2]["outcome"]["status"]) == ("gone", "error")  # type: ignore[index]
    assert not publisher.from_event(fired("running", "running", "log hand-off"), None)  # no status: nothing to write


def fired(status: str, state: str, reason: str) -> PrimusTriggerEvent:
    """An event as the resumed task validates it."""
    return PrimusTriggerEvent.of({"status": status, "app_id": "primus-1", "state": state, "reason": reason})


# --- the operator, real local jobs ---------------------------------------------------------------

READER = "import sys\nfor line in sys.stdin: pass\n"


def input_job(data: Path, files: int = 3) -> dict[str, Any]:
    data.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        (data / f"part-{f}.txt").write_text("".join(f"f{f}-{i:05d}\n" for i in range(200)))
    return make_spec([{"name": "worker", "consumes_input": True, "command": [sys.executable, "-c", READER]}],
                     input={"sources": [{"name": "lines", "path": str(data), "pattern": "*.txt",
                                         "success_marker": None}],
                            "task_size": "1Ki", "prefetch": 0, "poll_interval": 0.2})


@requires_airflow_3_3("the task state store")
def test_waiting_in_a_worker_slot_publishes_truthful_progress_and_the_outcome(primus_home, client, tmp_path):
    store = WritesStore()
    op = PrimusSubmitJobOperator(task_id="train", spec=input_job(tmp_path / "data"), poll_interval=0.2,
                                 progress_interval=0)
    app_id = op.execute(make_context(store=store))
    assert store.writes, "nothing published"
    final = store[PROGRESS_KEY]
    assert final["app_id"] == app_id and final["state"] == "succeeded"
    assert final["outcome"] == {"status": "success", "reason": client.status(app_id).job.reason}
    assert final["data"]["done"] == final["data"]["discovered"] > 3 and final["data"]["progress"] == 1.0
    assert final["roles"] == {"worker": "1/1 succeeded"}
    for doc in store.writes:  # never 100% before every task was read
        data = doc["data"]
        if data is not None and data["progress"] == 1.0:
            assert data["done"] == data["discovered"], doc
    assert all(w["outcome"] is None for w in store.writes[:-1])


@requires_airflow_3_3("the task state store")
def test_deferred_it_publishes_after_submit_and_from_the_triggers_events(primus_home, client, tmp_path):
    store = WritesStore()
    op = PrimusSubmitJobOperator(task_id="train", spec=input_job(tmp_path / "data"), deferrable=True,
                                 poll_interval=0.2)
    context = make_context(store=store)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    app_id = context["ti"].xcoms["app_id"]
    assert [w["app_id"] for w in store.writes] == [app_id]  # right after the submit
    assert store.writes[0]["outcome"] is None

    async def first_event() -> dict[str, Any]:
        async for event in deferred.value.trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    event = asyncio.run(asyncio.wait_for(first_event(), 120))
    assert event["status"] == "success" and "progress" not in event  # read again on the worker
    assert op.execute_complete(context, event) == app_id
    final = store.writes[-1]
    assert len(store.writes) == 2 and final["outcome"]["status"] == "success"
    assert final["data"]["done"] == final["data"]["discovered"] and final["data"]["progress"] == 1.0


SLEEPY = [{"name": "worker", "command": "sleep 300"}]


def published_running(store: WritesStore) -> bool:
    return bool(store.writes) and store.writes[-1]["state"] == "running"


@requires_airflow_3_3("the task state store")
def test_a_killed_wait_publishes_the_kill_as_its_outcome(primus_home, client):
    """Issue 27: a task marked failed while it waited in a worker slot left its progress at "running"."""
    store = WritesStore()
    op = PrimusSubmitJobOperator(task_id="train", spec=make_spec(SLEEPY), poll_interval=0.2, progress_interval=0)
    thread, outcome = execute_in_thread(op, make_context(store=store))
    wait_for(lambda: published_running(store), what="the running job's progress")
    op.on_kill()  # what Airflow's SIGTERM handler calls
    thread.join(30)
    assert isinstance(outcome.get("error"), AirflowException), outcome
    final = store.writes[-1]
    assert final["app_id"] == op.app_id
    assert final["outcome"] == {"status": "killed", "reason": f"task was killed while waiting for Primus job "
                                                              f"{op.app_id}; the job was killed"}


@requires_airflow_3_3("the task state store")
def test_a_wait_ended_by_the_tasks_timeout_or_an_error_publishes_that_outcome(primus_home, client, monkeypatch):
    store = WritesStore()
    op = PrimusSubmitJobOperator(task_id="train", spec=make_spec(SLEEPY), poll_interval=0.2, progress_interval=0)
    with pytest.raises(AirflowTaskTimeout), timeout(3):  # how Airflow's task runner applies execution_timeout
        op.execute(make_context(store=store))
    assert store.writes[-2]["outcome"] is None and store.writes[-2]["state"] in ("starting", "running")
    assert store.writes[-1]["outcome"] == {"status": "timeout", "reason": "the task's execution_timeout passed"}
    client.kill(op.app_id)

    store = WritesStore()
    op = PrimusSubmitJobOperator(task_id="train", spec=make_spec(SLEEPY), poll_interval=0.2, progress_interval=0)
    read = PrimusHook.status

    def refused_once_running(self: PrimusHook, app_id: str, summary: bool = False) -> StatusSummary:
        if published_running(store):
            raise AMRejected(403, "bad token")
        return read(self, app_id, summary)

    monkeypatch.setattr(PrimusHook, "status", refused_once_running)
    with pytest.raises(AMRejected):
        op.execute(make_context(store=store))
    assert store.writes[-1]["outcome"] == {"status": "error", "reason": "AMRejected: HTTP 403: bad token"}
    client.kill(op.app_id)


class RecordingComms:
    """The trigger runner's ``SUPERVISOR_COMMS`` as the Task SDK's ``XCom.set`` uses it: keeps each
    message sent, and the thread it was sent from."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, str]] = []

    def send(self, msg: Any) -> None:
        self.sent.append((msg, threading.current_thread().name))


def test_a_deferred_tasks_trigger_publishes_the_progress_as_its_xcom_off_the_event_loop(
        primus_home, client, tmp_path, monkeypatch):
    """Issue 26: deferred, the progress moved only at the task's stops on a worker (once a minute with
    follow_logs, never without). The trigger now writes it as the task's XCom through the Task SDK
    (which the triggerer relays), on each change of the job's state and every progress_interval."""
    from airflow.sdk.execution_time import task_runner

    comms = RecordingComms()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", comms, raising=False)
    op = PrimusSubmitJobOperator(task_id="train", spec=input_job(tmp_path / "data"), deferrable=True,
                                 poll_interval=0.2, progress_interval=0.5)
    context = make_context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    trigger = deferred.value.trigger
    assert trigger.serialize()[1]["progress_interval"] == 0.5  # a moved trigger publishes as often
    trigger.task_instance = SimpleNamespace(dag_id="dag", task_id="train", run_id="manual__1", map_index=-1)
    comms.sent.clear()  # the operator's own reads, on the worker

    async def first_event() -> tuple[dict[str, Any], str]:
        async for event in trigger.run():
            return event.payload, threading.current_thread().name
        raise AssertionError("the trigger ended without an event")

    event, loop_thread = asyncio.run(asyncio.wait_for(first_event(), 120))
    assert event["status"] == "success"
    writes = [msg for msg, _ in comms.sent if type(msg).__name__ == "SetXCom"]  # besides GetConnection
    assert writes
    assert {(m.key, m.dag_id, m.task_id, m.run_id, m.map_index) for m in writes} == {
        (PROGRESS_KEY, "dag", "train", "manual__1", -1)}
    assert all(thread != loop_thread for _, thread in comms.sent), f"sent on the event loop: {comms.sent}"
    documents = [m.value for m in writes]
    assert documents[-1]["state"] == "succeeded" and documents[-1]["outcome"] is None  # the task adds it
    assert documents[-1]["data"]["done"] == documents[-1]["data"]["discovered"]
    assert all(doc["app_id"] == context["ti"].xcoms["app_id"] for doc in documents)


class SilentComms:
    """A triggerer that never answers an XCom write."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def send(self, msg: Any) -> None:
        if type(msg).__name__ == "SetXCom":
            self.release.wait(120)


def test_a_progress_write_that_never_returns_does_not_hold_up_the_trigger(primus_home, client, monkeypatch, capsys):
    from airflow.sdk.execution_time import task_runner

    from airflow_provider_primus.triggers.primus import PrimusJobTrigger

    comms = SilentComms()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", comms, raising=False)
    app_id = client.submit(make_spec([{"name": "worker", "command": "sleep 1"}]))
    trigger = PrimusJobTrigger(app_id, poll_interval=0.2, progress_interval=0.5)
    trigger.publish_timeout = 0.3
    trigger.task_instance = SimpleNamespace(dag_id="dag", task_id="train", run_id="manual__1", map_index=-1)

    async def first_event() -> dict[str, Any]:
        try:
            async for event in trigger.run():
                return event.payload
            raise AssertionError("the trigger ended without an event")
        finally:  # before asyncio.run waits for the blocked write's thread
            comms.release.set()

    event = asyncio.run(asyncio.wait_for(first_event(), 30))  # before: it waited for the write
    assert event["status"] == "success"
    said = capsys.readouterr()
    assert f"Publishing the progress of Primus job {app_id} took over 0.3 s: going on without it" in said.out + said.err
