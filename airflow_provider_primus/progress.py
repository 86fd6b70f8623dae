"""The job's progress as Airflow shows it: ``primus_progress``, a small JSON document, at most a few
seconds old while the task waits, whichever way it waits.

``job_progress`` builds the document from one status of the job; a ``ProgressPublisher`` writes it,
throttled: when the job's state changes, at least every ``interval`` seconds while statuses come,
and a last time with the task's outcome. It writes to two places:

- the task instance's XCom ``primus_progress`` (every Airflow the provider supports), written by the
  task on a worker and, while the task is deferred, by its trigger: Airflow's triggerer relays a
  trigger's XCom writes (the Task SDK's ``XCom.set``, called in a thread), so the document stays
  fresh while no worker runs the task. The UI's XCom tab of the task instance, and
  ``GET /api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/primus_progress``.
  A new try of the task starts it afresh (Airflow clears a try's XComs).
- the task state store (Airflow >= 3.3), which survives the task's retries: the UI's "Task State
  Store" tab, and ``.../taskInstances/{task_id}/state-store/primus_progress``. Only a task on a
  worker can write it: Airflow 3.3's triggerer relays no task state store call (apache/airflow#73135
  proposes it), so while the task is deferred the store has what its last stop on a worker wrote
  (right after the submit, at each log hand-off, at the end).

Every end of the task on a worker writes its outcome: the job's end, and a kill (marked failed or
success, cleared: Airflow's SIGTERM, ``on_kill``), the task's ``execution_timeout`` or an error
ending the wait in a worker slot. A task killed while deferred cannot: only the triggerer runs then
(``on_kill`` of the trigger), and it writes no outcome; the document stays as the trigger last wrote it.

The document holds counts, states and the runtime's own reasons, never the job's spec.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol, TypedDict

from airflow_provider_primus.events import PrimusTriggerEvent
from airflow_provider_primus.version_compat import task_state_store
from primus_runtime.client import progress_line
from primus_runtime.models import DataStatus, KafkaStatus, RoleView, StatusSummary
from primus_runtime.states import JOB_FINISHED, JobState

#: The task state store key holding the progress document.
PROGRESS_KEY = "primus_progress"
#: Reasons are the runtime's sentences; a bound keeps the document small whatever they say.
MAX_REASON_CHARS = 500


class DataProgress(TypedDict):
    state: str  # the data plane's: scanning, running, exhausted, succeeded, failed, ...
    done: int  # tasks read
    discovered: int  # tasks listed so far (every task once the scan is complete)
    scan_complete: bool
    progress: float | None  # 0..1 of the bytes; 1.0 only once every task was read; null: not known
    watermark: str | None
    eta_seconds: float | None


class KafkaProgress(TypedDict):
    lag: int | None  # records; null until every partition's end is known
    records_per_s: float
    watermark: str | None
    eta_seconds: float | None
    reachable: bool


class Outcome(TypedDict):
    status: str  # as the trigger's events say it: success, failed, timeout, error; or killed (the task was)
    reason: str


class JobProgress(TypedDict):
    app_id: str
    state: str  # the job's
    roles: dict[str, str]  # role -> "1/2 running, 1/2 succeeded"
    roles_ready: str  # trainers past their role's readiness probe, of all replicas: "3/4"
    data: DataProgress | None  # null: the job has no input
    kafka: KafkaProgress | None
    summary: str  # one line: the same words the task log uses
    outcome: Outcome | None  # null while the task waits
    updated_at: str  # ISO 8601, UTC


def job_progress(app_id: str, status: StatusSummary, now: datetime | None = None) -> JobProgress:
    """The progress document of one status of ``app_id`` (the AM's status document, or its summary)."""
    job = status.job
    roles = status.roles
    data = status.data
    share = truthful_share(data) if data is not None else None
    # The summary reads the same capped share as the document, so neither ever says 100% early.
    summary_status = status if data is None else \
        status.model_copy(update={"data": data.model_copy(update={"progress": share})})
    return JobProgress(
        app_id=app_id,
        state=str(job.state),
        roles={role.name: _role_states(role) for role in roles},
        roles_ready=f"{sum(r.ready for r in roles)}/{sum(r.replicas for r in roles)}",
        data=_data(data, share) if data is not None else None,
        kafka=_kafka(data.kafka) if data is not None and data.kafka is not None else None,
        summary=f"{job.state}: {progress_line(summary_status)}",
        outcome=None,
        updated_at=_iso(now),
    )


def truthful_share(data: DataStatus) -> float | None:
    """The input's share read, 0..1, truncated to a thousandth: exactly 1.0 only once every task was
    read (the byte count may reach the total a little before the last task is marked done, and a
    quarantined task was never read); None while it is not known (partitions still awaited, or a
    Kafka input, counted in offsets: see ``kafka``)."""
    share = data.progress
    if share is None:
        return None
    total = data.tasks.get("total", 0)
    if data.scan_complete and total > 0 and data.tasks.get("done", 0) == total:
        return 1.0
    return min(math.floor(float(share) * 1000) / 1000, 0.999)


def with_outcome(document: JobProgress, status: str, reason: str, now: datetime | None = None) -> JobProgress:
    """``document`` as the last one of the task: its outcome added."""
    return {**document, "outcome": Outcome(status=status, reason=reason[:MAX_REASON_CHARS]),
            "updated_at": _iso(now)}


def unknown_progress(app_id: str, state: str, reason: str, now: datetime | None = None) -> JobProgress:
    """A document for when no status could be read (the job is gone, the AM does not answer)."""
    return JobProgress(app_id=app_id, state=state, roles={}, roles_ready="0/0", data=None, kafka=None,
                       summary=f"{state}: {reason[:MAX_REASON_CHARS]}", outcome=None, updated_at=_iso(now))


def _role_states(role: RoleView) -> str:
    replicas = role.replicas
    counts = [f"{n}/{replicas} {state}" for state, n in role.states.items() if n]
    return ", ".join(counts) or f"0/{replicas} started"


def _data(data: DataStatus, share: float | None) -> DataProgress:
    kafka = data.kafka
    eta = data.eta_seconds if data.eta_seconds is not None else kafka.eta_seconds if kafka is not None else None
    watermark = data.watermark or (kafka.watermark if kafka is not None else None)
    return DataProgress(state=str(data.state), done=data.tasks.get("done", 0), discovered=data.tasks.get("total", 0),
                        scan_complete=data.scan_complete, progress=share, watermark=watermark, eta_seconds=eta)


def _kafka(kafka: KafkaStatus) -> KafkaProgress:
    # Not its consumer_config (masked, but no business of a progress line) nor its brokers.
    return KafkaProgress(lag=kafka.lag, records_per_s=float(kafka.records_per_s), watermark=kafka.watermark,
                         eta_seconds=kafka.eta_seconds, reachable=kafka.reachable)


def _iso(now: datetime | None) -> str:
    return (now or datetime.now(timezone.utc)).isoformat(timespec="milliseconds")


class StateStore(Protocol):
    """Where a document is written: Airflow 3.3's ``TaskStateStoreAccessor``
    (``context["task_state_store"]``), or ``TaskXCom``."""

    def set(self, key: str, value: Any) -> None: ...


class TaskXCom:
    """One task instance's XCom (``set(key, value)``), the way its process can write it.

    On a worker: ``ti.xcom_push``. In a trigger: the Task SDK's ``XCom.set`` with the task
    instance's identity, called in a thread: the triggerer relays a trigger's XCom writes, and
    ``XCom.set`` sends on the triggerer's event loop and waits for the answer, so it must not run
    on the loop itself.
    """

    def __init__(self, write: Callable[[str, Any], None], name: str) -> None:
        self._write, self._name = write, name

    @classmethod
    def on_worker(cls, ti: Any) -> TaskXCom:
        return cls(lambda key, value: ti.xcom_push(key=key, value=value), "the task's XCom")

    @classmethod
    def in_trigger(cls, ti: Any) -> TaskXCom:
        """``ti``: the trigger's ``task_instance`` (anything with the task instance's identity)."""
        map_index = -1 if ti.map_index is None else ti.map_index

        def write(key: str, value: Any) -> None:
            from airflow.sdk.execution_time.xcom import XCom  # the configured XCom backend

            XCom.set(key, value, dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id, map_index=map_index)
        return cls(write, "the task's XCom")

    def set(self, key: str, value: Any) -> None:
        self._write(key, value)

    def __repr__(self) -> str:
        return self._name


def _sink_name(sink: StateStore) -> str:
    return repr(sink) if isinstance(sink, TaskXCom) else "the task state store"


class Log(Protocol):
    """What is logged to: a ``logging.Logger`` or the task's structlog logger (``self.log``)."""

    def info(self, msg: str, /, *args: Any) -> Any: ...

    def warning(self, msg: str, /, *args: Any) -> Any: ...


#: Seconds between two writes while the job's state stays the same: with the default poll interval
#: (5 s) a reader never sees a document more than 10 s old.
DEFAULT_PROGRESS_INTERVAL = 5.0


class ProgressPublisher:
    """Writes a job's progress document to its sinks (the task's XCom, its task state store), throttled.

    A status is written when it is the first, when the job's state changed since the last write, or
    when ``interval`` seconds passed since it; ``publish`` and ``finish`` write at once. A failed
    write is logged once per sink and never fails the task: the progress is a courtesy, the job is
    what matters.

    :param sinks: where to write (none: nothing is written).
    :param interval: at most one throttled write per this many seconds.
    :param clock: monotonic seconds (tests inject their own).
    """

    def __init__(self, sinks: Sequence[StateStore] = (), interval: float = DEFAULT_PROGRESS_INTERVAL,
                 clock: Callable[[], float] = time.monotonic, log: Log | None = None) -> None:
        self.sinks = list(sinks)
        self.interval = interval
        self.clock = clock
        self.log: Log = log or logging.getLogger(__name__)
        self.last: JobProgress | None = None
        self._written_at: float | None = None
        self._warned: set[int] = set()  # the sinks whose failure was logged

    @classmethod
    def for_task(cls, context: Mapping[str, Any], interval: float, log: Log,
                 announce: bool = False) -> ProgressPublisher:
        """The publisher of a task on a worker: its XCom, and its task state store (Airflow >= 3.3);
        with ``announce``, says once when Airflow has no store."""
        store = task_state_store(context)
        if store is None and announce:
            log.info("This Airflow has no task state store (3.3+): the job's progress is published as the "
                     "XCom %r only", PROGRESS_KEY)
        ti = context.get("ti")  # always there in Airflow; a bare context (a unit test's) has none
        sinks = [sink for sink in (TaskXCom.on_worker(ti) if ti is not None else None, store) if sink is not None]
        return cls(sinks, interval, log=log)

    @classmethod
    def for_trigger(cls, ti: Any, interval: float, log: Log) -> ProgressPublisher:
        """The publisher of a deferred task's trigger (``ti``: its ``task_instance``): the XCom only."""
        return cls([TaskXCom.in_trigger(ti)], interval, log=log)

    @property
    def published(self) -> bool:
        return self.last is not None

    @property
    def finished(self) -> bool:
        """Whether the last document written carries the task's outcome."""
        return self.last is not None and self.last["outcome"] is not None

    def due(self, status: StatusSummary) -> bool:
        """Whether ``status`` is to be written now (see the class)."""
        if not self.sinks:
            return False
        if self.last is None or self._written_at is None or self.last["state"] != str(status.job.state):
            return True
        return self.clock() - self._written_at >= self.interval

    def update(self, app_id: str, status: StatusSummary) -> bool:
        """Write the progress of ``status`` if it is due; whether it was written."""
        return self.publish(job_progress(app_id, status)) if self.due(status) else False

    def observe(self, app_id: str, status: StatusSummary) -> bool:
        """A status the task read while it waits: ``finish`` once the job ended, else ``update``."""
        job = status.job
        if job.state not in JOB_FINISHED:
            return self.update(app_id, status)
        outcome = "success" if job.state == JobState.SUCCEEDED else "failed"
        return self.finish(app_id, status, outcome, job.reason or "")

    def update_from(self, app_id: str, read_status: Callable[[], StatusSummary]) -> bool:
        """``update`` with a status read now, unless one was published already (a deferred task's first
        stop on a worker publishes, its later ones published from their trigger's event)."""
        if not self.sinks or self.published:
            return False
        status = self.read_status(app_id, read_status)
        return self.update(app_id, status) if status is not None else False

    def read_status(self, app_id: str, read_status: Callable[[], StatusSummary]) -> StatusSummary | None:
        """``read_status()`` for a document, or None without a store or when it cannot be read (said in
        the log: the progress is a courtesy, the task goes on)."""
        if not self.sinks:
            return None
        try:
            return read_status()
        except Exception as exc:  # noqa: BLE001 - the progress is a courtesy; the wait reads the status again
            self.log.info("No progress published for Primus job %s now: %s", app_id, exc)
            return None

    def finish(self, app_id: str, status: StatusSummary | None, outcome: str, reason: str) -> bool:
        """The last write: the progress of ``status`` (None: the last one published, or what
        ``reason`` says) with the task's ``outcome`` (success, failed, timeout, error, killed)."""
        if status is not None:
            document = job_progress(app_id, status)
        else:
            document = self.last or unknown_progress(app_id, "unknown", reason)
        return self.publish(with_outcome(document, outcome, reason))

    def from_event(self, event: PrimusTriggerEvent, status: StatusSummary | None) -> bool:
        """Publish the progress of ``status`` (the job's, read by the task resumed from ``event``; None:
        not readable): as is for a ``running`` hand-off, with the event's outcome otherwise."""
        app_id = str(event.app_id)
        document = job_progress(app_id, status) if status is not None else None
        if event.status == "running":
            return self.publish(document) if document is not None else False
        if document is None:
            document = unknown_progress(app_id, event.state or "unknown", event.reason or "no reason")
        return self.publish(with_outcome(document, event.status, event.reason))

    def publish(self, document: JobProgress) -> bool:
        """Write ``document`` now to every sink; whether one took it."""
        written = False
        for sink in self.sinks:
            try:
                sink.set(PROGRESS_KEY, dict(document))
            except Exception as exc:  # noqa: BLE001 - see the class: never fail the task over its progress
                if id(sink) not in self._warned:
                    self.log.warning("Cannot publish the progress of Primus job %s to %s: %s",
                                     document["app_id"], _sink_name(sink), exc)
                    self._warned.add(id(sink))
                continue
            written = True
        if written:
            self.last, self._written_at = document, self.clock()
        return written
