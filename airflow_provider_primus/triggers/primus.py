"""Triggers that wait in the triggerer: for a job to end, a role to reach a state, data progress.

They share one polling loop (``PrimusStatusTrigger.run``): read the job's status over async HTTP,
log progress when it changes and a one-line summary now and then, and fire once the condition
holds, the job ended without meeting it, the deadline passed, or the status stayed unreadable
(transient errors are retried, ``retries.py``), or, with a ``log_interval``, for a hand-off to the
task, which copies the trainers' new lines (see ``PrimusStatusTrigger``). ``serialize()`` carries every
argument, so a trigger moved to another triggerer resumes unchanged; ``cleanup()`` (every exit, a triggerer
restart too) never touches the job.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

# Light imports only (see ``triggers/__init__.py``): what the triggers run on is imported off the
# event loop by ``import_off_loop(*RUNS_ON)`` on their first run, then imported where used (a lookup).
from airflow_provider_primus.triggers import import_off_loop
from primus_runtime.states import ExecutorState, JobState

if TYPE_CHECKING:
    from airflow_provider_primus.conditions import Check
    from airflow_provider_primus.events import EventStatus
    from airflow_provider_primus.hooks.primus import PrimusAsyncHook
    from airflow_provider_primus.progress import ProgressPublisher
    from primus_runtime.models import StatusSummary

#: The modules the triggers of this module need once they run.
RUNS_ON = ("airflow_provider_primus.conditions", "airflow_provider_primus.events", "airflow_provider_primus.hooks.primus",
           "airflow_provider_primus.partitions", "airflow_provider_primus.progress", "airflow_provider_primus.retries",
           "primus_runtime.client")
#: ``PrimusHook.default_conn_name`` (not imported from the hook's module: see above).
DEFAULT_CONN_ID = "primus_default"


class PrimusStatusTrigger(BaseTrigger):
    """The polling loop; subclasses say what they wait for (``check``) and what they carry.

    Event payload: a ``PrimusTriggerEvent`` (``events.py``): status (``success``, ``failed``,
    ``timeout``, ``error``, or ``running`` for a hand-off), app id, the job's state, a reason naming
    the job. Nothing else: Airflow logs every event whole on one line ("Trigger fired event"), so
    what the task needs besides (the job's progress, the trainers' new log lines, the failed
    executors' logs) it reads again on the worker.

    With ``log_interval`` the trigger hands off every ``log_interval`` seconds with a ``running``
    event, which the submit operator answers by copying the trainers' new lines into the task log
    and deferring again (as the Kubernetes pod operator's ``logging_interval``). The trigger copies
    no trainer line itself: Airflow's triggerer writes each trigger's log to one file per triggerer
    and task try, opened afresh for every trigger, so the lines a trigger logged are gone once the
    task defers again; what the worker logs is appended to the try's log. Meanwhile the trigger logs
    a one-line summary (roles ready, data, watermark, ETA) every ``summary_interval`` seconds, and
    the condition's line when it changes.

    :param app_id: the job to watch.
    :param primus_conn_id: the ``primus`` connection it was submitted through.
    :param poll_interval: seconds between status reads.
    :param deadline: absolute time (epoch seconds) after which a ``timeout`` event fires; Airflow
        does not apply ``execution_timeout`` to a deferred task, the operator passes it here.
    :param log_interval: seconds between hand-offs while the job runs; None: only when it fires.
    :param summary_interval: seconds between summary lines.
    """

    #: Returned in every event: see ``PrimusJobTrigger``.
    log_cursor: dict[str, Any] | None = None

    def __init__(self, app_id: str, primus_conn_id: str = DEFAULT_CONN_ID,
                 poll_interval: float = 5.0, deadline: float | None = None, log_interval: float | None = None,
                 summary_interval: float = 30.0) -> None:
        super().__init__()
        self.app_id = app_id
        self.primus_conn_id = primus_conn_id
        self.poll_interval = poll_interval
        self.deadline = deadline
        self.log_interval = log_interval
        self.summary_interval = summary_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            "app_id": self.app_id,
            "primus_conn_id": self.primus_conn_id,
            "poll_interval": self.poll_interval,
            "deadline": self.deadline,
            "log_interval": self.log_interval,
            "summary_interval": self.summary_interval,
            **self._condition(),
        }

    def _condition(self) -> dict[str, Any]:
        """The subclass's own arguments, for ``serialize``."""
        return {}

    @abc.abstractmethod
    def check(self, status: StatusSummary) -> Check:
        """The condition judged on a summary status."""

    def success_event(self, status: StatusSummary, check: Check) -> TriggerEvent:
        return self._event("success", status.job.state.value, check.line)

    async def observed(self, status: StatusSummary) -> None:
        """Each status read, before the condition is judged (``PrimusJobTrigger`` publishes it)."""

    async def run(self) -> AsyncIterator[TriggerEvent]:
        await import_off_loop(*RUNS_ON)
        from airflow_provider_primus.hooks.primus import PrimusAsyncHook

        hook = PrimusAsyncHook(primus_conn_id=self.primus_conn_id)
        try:
            event = await self._first_event(hook)
        finally:  # before yielding: the triggerer may drop the generator right after the event
            await hook.aclose()
        yield event

    async def _first_event(self, hook: PrimusAsyncHook) -> TriggerEvent:
        from airflow_provider_primus.retries import READ_ERRORS
        from primus_runtime.client import JobNotFound

        summary = ProgressSummary(self.app_id)
        started = time.monotonic()
        last_line = None
        while True:
            if self.deadline is not None and time.time() > self.deadline:
                return self._event("timeout", "unknown", "the deadline (the task's timeout) passed")
            try:
                # Transient errors are retried there. A summary: conditions and progress read no executor rows.
                status = await hook.astatus(self.app_id, summary=True)
            except JobNotFound:
                return self._event("error", "gone", f"Primus job {self.app_id} does not exist (any more)")
            except READ_ERRORS as exc:  # the AM refused, or the retries ran out
                return self._event("error", "unknown", f"cannot read the status of Primus job {self.app_id}: "
                                                       f"{type(exc).__name__}: {exc}")
            await self.observed(status)
            check = self.check(status)
            if check.line != last_line:
                self.log.info("Primus job %s %s", self.app_id, check.line)
                last_line = check.line
            if check.met:
                return self.success_event(status, check)
            if check.impossible:
                return self._event("failed", status.job.state.value, check.impossible,
                                   input_at_fault=check.input_at_fault)
            if summary.due(self.summary_interval):
                self.log.info("%s", summary.line(status))
            if self.log_interval is not None and time.monotonic() - started >= self.log_interval:
                return self._event("running", status.job.state.value, "log hand-off", deadline=self.deadline)
            await asyncio.sleep(self.poll_interval)

    def _event(self, status: EventStatus, state: str, reason: str, input_at_fault: bool = False,
               deadline: float | None = None) -> TriggerEvent:
        from airflow_provider_primus.events import LogCursor, PrimusTriggerEvent

        cursor = LogCursor.model_validate(self.log_cursor) if self.log_cursor is not None else None
        return TriggerEvent(PrimusTriggerEvent.build(
            status, reason, app_id=self.app_id, state=state, input_at_fault=input_at_fault, deadline=deadline,
            log_cursor=cursor).payload())


class ProgressSummary:
    """The trigger's periodic one-line summary: roles ready, data done, watermark, ETA."""

    def __init__(self, app_id: str) -> None:
        self.app_id = app_id
        self._last = time.monotonic()  # not at the start: the condition's line just said it all

    def due(self, interval: float) -> bool:
        """True at most once per ``interval`` seconds."""
        now = time.monotonic()
        if now - self._last < interval:
            return False
        self._last = now
        return True

    def line(self, status: StatusSummary) -> str:
        from primus_runtime.client import data_progress

        roles = status.roles
        ready = sum(role.ready for role in roles)
        wanted = sum(role.replicas for role in roles)
        parts = [f"roles ready {ready}/{wanted} (" + ", ".join(
            f"{role.name} {role.ready}/{role.replicas}" for role in roles) + ")"]
        data = status.data
        if data is not None:
            parts.append(data_progress(data))
            kafka = data.kafka
            eta = data.eta_seconds if data.eta_seconds is not None else kafka.eta_seconds if kafka is not None else None
            parts.append(f"ETA ~{_duration(eta)}" if eta is not None else "ETA unknown yet")
        job = status.job
        since = job.started_at or job.created_at  # the job's clock: true across hand-offs
        elapsed = f" for {_duration(time.time() - since)}" if since else ""
        return f"Primus job {self.app_id} {job.state}{elapsed}: " + " | ".join(parts)


def _duration(seconds: float) -> str:
    """``1h02m``, ``3m05s``, ``42s``."""
    whole = int(seconds)
    if whole >= 3600:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"


class PrimusJobTrigger(PrimusStatusTrigger):
    """Fires once the job ends: ``success`` if it succeeded, else ``failed`` with the runtime's reason.

    :param on_kill_action: ``"kill"`` stops the job when a user marks the deferred task failed or
        success, or clears it (Airflow >= 3.3 calls ``on_kill``); ``"keep"`` leaves it.
    :param log_cursor: where the submit operator's copy of the trainers' logs stands
        (``LogFollower.cursor``), carried for the task and returned in every event. (A task instance's
        ``next_kwargs`` would be the natural place, but ``airflow dags test`` drops them on resume.)
    :param progress_interval: publish the job's progress (``progress.py``: the task's XCom
        ``primus_progress``) on every change of its state and at least this often while the task
        is deferred; None: not at all.
    """

    def __init__(self, app_id: str, primus_conn_id: str = DEFAULT_CONN_ID,
                 poll_interval: float = 5.0, deadline: float | None = None, on_kill_action: str = "kill",
                 log_interval: float | None = None, summary_interval: float = 30.0,
                 log_cursor: dict[str, Any] | None = None, progress_interval: float | None = None) -> None:
        super().__init__(app_id, primus_conn_id, poll_interval, deadline, log_interval, summary_interval)
        self.on_kill_action = on_kill_action
        self.log_cursor = log_cursor
        self.progress_interval = progress_interval
        self._publisher: ProgressPublisher | None = None

    def _condition(self) -> dict[str, Any]:
        return {"on_kill_action": self.on_kill_action, "log_cursor": self.log_cursor,
                "progress_interval": self.progress_interval}

    #: Seconds a progress write may take before the trigger goes on without it (a triggerer that does
    #: not answer must not hold up the wait; the write's thread finishes or stays blocked on its own).
    publish_timeout: float = 10.0

    async def observed(self, status: StatusSummary) -> None:
        """Publish the job's progress when due: judged on the loop, written in a thread (``TaskXCom``)."""
        publisher = self._progress_publisher()
        if publisher is None or not publisher.due(status):
            return
        from airflow_provider_primus.progress import job_progress

        try:
            await asyncio.wait_for(asyncio.to_thread(publisher.publish, job_progress(self.app_id, status)),
                                   self.publish_timeout)
        except asyncio.TimeoutError:
            self.log.warning("Publishing the progress of Primus job %s took over %g s: going on without it",
                             self.app_id, self.publish_timeout)

    def _progress_publisher(self) -> ProgressPublisher | None:
        """The publisher to the deferred task's XCom; None without a ``progress_interval`` or without
        the task instance the triggerer gives a task's trigger."""
        if self._publisher is None and self.progress_interval is not None:
            ti = getattr(self, "task_instance", None)
            if ti is not None:
                from airflow_provider_primus.progress import ProgressPublisher

                self._publisher = ProgressPublisher.for_trigger(ti, self.progress_interval, self.log)
        return self._publisher

    def check(self, status: StatusSummary) -> Check:
        from airflow_provider_primus.conditions import job_succeeded

        return job_succeeded(status)

    def success_event(self, status: StatusSummary, check: Check) -> TriggerEvent:
        return self._event("success", JobState.SUCCEEDED.value, status.job.reason or "")

    async def on_kill(self) -> None:
        # Only on a user's action on the deferred task (Airflow >= 3.3); cleanup() deliberately
        # leaves the job alone.
        if self.on_kill_action != "kill":
            return
        self.log.info("Deferred task killed: stopping Primus job %s", self.app_id)
        await import_off_loop(*RUNS_ON)  # a trigger that never ran (a triggerer restart) has not yet
        from airflow_provider_primus.hooks.primus import PrimusAsyncHook

        hook = PrimusAsyncHook(primus_conn_id=self.primus_conn_id)
        try:
            await hook.akill(self.app_id, "the deferred Airflow task was killed")
        finally:
            await hook.aclose()


class PrimusRoleTrigger(PrimusStatusTrigger):
    """Fires ``success`` once ``count`` executors of ``role`` are in ``state`` (default: all its
    replicas), ``failed`` if the job ends first."""

    def __init__(self, app_id: str, role: str, state: str = ExecutorState.RUNNING.value, count: int | None = None,
                 primus_conn_id: str = DEFAULT_CONN_ID, poll_interval: float = 5.0,
                 deadline: float | None = None, log_interval: float | None = None,
                 summary_interval: float = 30.0) -> None:
        super().__init__(app_id, primus_conn_id, poll_interval, deadline, log_interval, summary_interval)
        self.role, self.state, self.count = role, state, count

    def _condition(self) -> dict[str, Any]:
        return {"role": self.role, "state": self.state, "count": self.count}

    def check(self, status: StatusSummary) -> Check:
        from airflow_provider_primus.conditions import role_reached

        return role_reached(status, self.role, self.state, self.count)


class PrimusDataProgressTrigger(PrimusStatusTrigger):
    """Fires ``success`` once every condition given holds: the job's data progress reached
    ``min_progress`` (0..1), its watermark passed ``partition`` (``YYYY-MM-DD`` or ``YYYY-MM-DDTHH``),
    its Kafka lag is known and at most ``max_lag``, its watermark is at or past ``watermark_after``
    (ISO 8601 UTC, ``conditions.normalize_time``); ``failed`` if the job ends first."""

    def __init__(self, app_id: str, min_progress: float | None = None, partition: str | None = None,
                 primus_conn_id: str = DEFAULT_CONN_ID, poll_interval: float = 5.0,
                 deadline: float | None = None, max_lag: int | None = None, watermark_after: str | None = None,
                 log_interval: float | None = None, summary_interval: float = 30.0) -> None:
        super().__init__(app_id, primus_conn_id, poll_interval, deadline, log_interval, summary_interval)
        self.min_progress, self.partition = min_progress, partition
        self.max_lag, self.watermark_after = max_lag, watermark_after

    def _condition(self) -> dict[str, Any]:
        return {"min_progress": self.min_progress, "partition": self.partition, "max_lag": self.max_lag,
                "watermark_after": self.watermark_after}

    def check(self, status: StatusSummary) -> Check:
        from airflow_provider_primus.conditions import data_reached

        return data_reached(status, self.min_progress, self.partition, self.max_lag, self.watermark_after)


class PrimusPartitionTrigger(BaseTrigger):
    """Fires ``success`` once ``path`` exists (a partition's success marker), locally or, with
    ``webhdfs_conn_id``, on HDFS through ``WebHDFSHook``; ``timeout`` after ``deadline``.
    A failing check (NameNode unreachable) is retried with backoff, then reported as ``error``."""

    def __init__(self, path: str, webhdfs_conn_id: str | None = None, poll_interval: float = 60.0,
                 deadline: float | None = None) -> None:
        super().__init__()
        self.path, self.webhdfs_conn_id = path, webhdfs_conn_id
        self.poll_interval, self.deadline = poll_interval, deadline

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            "path": self.path, "webhdfs_conn_id": self.webhdfs_conn_id,
            "poll_interval": self.poll_interval, "deadline": self.deadline,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        await import_off_loop(*RUNS_ON)
        from airflow_provider_primus.events import PrimusTriggerEvent
        from airflow_provider_primus.partitions import path_exists
        from airflow_provider_primus.retries import READ_ERRORS, async_retrying

        while True:
            if self.deadline is not None and time.time() > self.deadline:
                yield TriggerEvent(PrimusTriggerEvent.build("timeout", f"{self.path} did not appear in time").payload())
                return
            try:  # a NameNode that does not answer is transient (partitions.path_exists): retried there
                found: bool = await async_retrying(f"Checking {self.path}", self.log)(
                    asyncio.to_thread, path_exists, self.path, self.webhdfs_conn_id)
            except READ_ERRORS as exc:
                yield TriggerEvent(PrimusTriggerEvent.build("error", f"cannot check {self.path}: {exc}").payload())
                return
            if found:
                yield TriggerEvent(PrimusTriggerEvent.build("success", f"{self.path} exists").payload())
                return
            self.log.info("Waiting for %s", self.path)
            await asyncio.sleep(self.poll_interval)
