"""PrimusSubmitJobOperator: run a Primus job as an Airflow task, reattaching on retries."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import ResumableJobMixin
from airflow.sdk import BaseOperator
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowTaskTimeout, TaskDeferred

from airflow_provider_primus.conditions import job_succeeded
from airflow_provider_primus.events import PrimusTriggerEvent
from airflow_provider_primus.hooks.primus import ACTIVE, FINISHED, LogFollower, PrimusHook, SpecLike
from airflow_provider_primus.identity import SUBMIT_TAG, TI_TAGS, JobIdentity, TaskInstanceRef
from airflow_provider_primus.links.primus import CONN_ID_KEY, PrimusJobLink, task_job_page_url
from airflow_provider_primus.progress import DEFAULT_PROGRESS_INTERVAL, ProgressPublisher
from airflow_provider_primus.templating import PartitionPlaceholdersMixin
from airflow_provider_primus.triggers.primus import PrimusJobTrigger
from airflow_provider_primus.version_compat import task_state_store
from primus_runtime.client import JobNotFound, progress_line
from primus_runtime.models import StatusDocument, StatusSummary
from primus_runtime.spec import JobSpec, SpecError
from primus_runtime.states import JobState

if TYPE_CHECKING:
    from airflow.sdk import Context

#: task_state_store key (Airflow >= 3.3) holding the job's ``JobIdentity`` across tries. Renaming it
#: breaks reattaching for tries already in flight.
STATE_KEY = "primus_app_id"


class PrimusSubmitJobOperator(ResumableJobMixin, PartitionPlaceholdersMixin, BaseOperator):
    """Submit a Primus job and (by default) wait for it to end.

    Every job is tagged with the task instance's ``dag_id``, ``task_id``, ``run_id``, ``map_index``,
    ``try_number`` and a ``submit_id`` (see ``airflow_provider_primus.identity``). A retry never
    submits a second job while a job of this task instance's DAG run still runs: it reattaches to it.
    On Airflow >= 3.3 this is Airflow's own ``ResumableJobMixin``: the job's identity is kept in the
    task state store and checked against the job's tags before reattaching (an app id that names
    another job now is refused, saying why). Found through the tags instead when the store knows no
    running job (Airflow < 3.3, ``durable=False``, or a try that died between submit and store):
    only a job of this DAG run qualifies, never a stale one of an earlier run with the same run id.
    A job whose success the task already returned is not reused (a cleared task trains again);
    one that succeeded while no try was watching is (its result is returned, nothing runs twice).

    :param spec: the job: a dict, a path to a YAML/JSON spec, or a ``JobSpec``. Templated: strings
        anywhere inside a dict spec (and the path itself) are rendered, e.g. ``"{{ ds }}"`` or
        ``"{{ params.replicas }}"``; input path placeholders (``{{YYYY}}{{MM}}{{DD}}{{HH}}``) are left
        for the runtime. A relative path, and the relative ``files`` of a dict spec, are taken from
        the DAG file's folder.
    :param primus_conn_id: the ``primus`` connection (see ``PrimusHook``).
    :param wait_for_completion: wait for the job to end; otherwise return once it is submitted.
    :param deferrable: wait in the triggerer (``PrimusJobTrigger``) instead of a worker slot;
        default ``[operators] default_deferrable``. ``execution_timeout`` still holds: its
        absolute deadline travels with the trigger.
    :param poll_interval: seconds between status checks while waiting.
    :param on_kill_action: when the task is killed (marked failed, timed out, worker stopped):
        ``"kill"`` stops the job, ``"keep"`` leaves it running so the next try reattaches.
    :param kill_timeout: at most this many seconds of ``on_kill`` are spent stopping the job; the
        kill request is sent at once and the job's AM finishes the stop on its own.
    :param follow_logs: executors (e.g. ``["worker-0"]``) whose new stdout/stderr lines are copied
        into the task log while it waits, deferred or not, never a line twice. Default: executor 0 of
        the first role the job waits for; ``[]`` copies none. In a worker slot they are copied at
        every poll; deferred, at each hand-off (see ``log_interval``) and at the end, by the task on
        a worker (a trigger's own log is replaced each time the task defers again), with a progress
        line; the trigger logs a one-line summary meanwhile.
    :param log_interval: deferred only: every this many seconds the trigger hands the task back to a
        worker, which copies the followed logs' new lines and defers again (a short stop on a worker,
        as the Kubernetes pod operator's ``logging_interval``); None: lines are copied when the job ends.
    :param log_lines_per_minute: at most this many lines of each followed log reach the task log a
        minute, the newest, either way of waiting; the others are counted in one line that says how
        to read them all (``LogFollower``).
    :param durable: (``ResumableJobMixin``, Airflow >= 3.3) keep the job's identity in the task state
        store for a retry to reattach through; False: only the tag search finds a running job.
    :param progress_interval: seconds between writes of the job's progress while its state stays the
        same (see below); a change of the job's state is written at once.

    Progress: a short summary of the job (state, roles, data done of discovered, watermark, ETA, Kafka
    lag, and at the end the outcome) is published as ``primus_progress``, at least every
    ``progress_interval`` seconds while the status is read (every ``poll_interval``), so it is never
    more than their sum old (10 s with the defaults), whichever way the task waits:

    - the XCom ``primus_progress`` (the UI's XCom tab of the task instance, and
      ``GET /api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/primus_progress``),
      written by the task in a worker slot and by its trigger while it is deferred;
    - the task state store (Airflow >= 3.3: the "Task State Store" tab, ``.../state-store/primus_progress``),
      which survives retries; a trigger cannot write it (Airflow 3.3's triggerer relays no task state
      store call), so while deferred it is written at the task's stops on a worker: right after the
      submit, at each log hand-off (every ``log_interval``, with ``follow_logs``) and at the end.

    Data checkpoints: a job with an ``input`` section and no ``input.work_preserve_dir`` gets one
    per task instance (under the connection's ``work_preserve_root``), so a retry after a failed
    try resumes the data where that job stopped instead of reading it again. After a try whose
    job succeeded (a cleared task), the next job starts the data afresh in a new directory.

    Returns (and pushes as XCom ``app_id`` as soon as it is known) the job's application id. The
    "Primus job" link (the job's page: live while it runs, its outcome after) is pushed as soon as the job is submitted.
    """

    template_fields: Sequence[str] = ("spec", "primus_conn_id")
    template_fields_renderers = {"spec": "json"}
    operator_extra_links = (PrimusJobLink(),)
    ui_color = "#e8f0fe"
    external_id_key = STATE_KEY
    #: Replaced per task by execute()/execute_complete(); this one publishes nothing.
    _progress = ProgressPublisher()

    def __init__(
        self,
        *,
        spec: SpecLike,
        primus_conn_id: str = PrimusHook.default_conn_name,
        wait_for_completion: bool = True,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 5.0,
        on_kill_action: str = "kill",
        kill_timeout: float = 3.0,
        follow_logs: Sequence[str] | None = None,
        log_interval: float | None = 300.0,
        log_lines_per_minute: int = 60,
        progress_interval: float = DEFAULT_PROGRESS_INTERVAL,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if on_kill_action not in ("kill", "keep"):
            raise ValueError(f"on_kill_action must be 'kill' or 'keep', got {on_kill_action!r}")
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be > 0, got {poll_interval!r}")
        if log_lines_per_minute < 1:
            raise ValueError(f"log_lines_per_minute must be >= 1, got {log_lines_per_minute!r}")
        self.spec = os.fspath(spec) if isinstance(spec, os.PathLike) else spec
        self.primus_conn_id = primus_conn_id
        self.wait_for_completion = wait_for_completion
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.on_kill_action = on_kill_action
        self.kill_timeout = kill_timeout
        self.follow_logs = None if follow_logs is None else list(follow_logs)
        self.log_interval = log_interval
        self.log_lines_per_minute = log_lines_per_minute
        self.progress_interval = progress_interval
        self.app_id: str | None = None

    #: Set on a try resumed from its trigger: its start said which connection it uses already.
    _resumed = False

    @cached_property
    def hook(self) -> PrimusHook:
        return PrimusHook(primus_conn_id=self.primus_conn_id, announce_fallback=not self._resumed)

    # --- execute: Airflow's ResumableJobMixin decides between reattaching and submitting ----------

    def execute(self, context: Context) -> str:
        # Created here, not in __init__: operators are deep-copied, events are not copyable.
        self._stopping = threading.Event()
        self._reattached: str | None = None
        self._progress = ProgressPublisher.for_task(context, self.progress_interval, self.log, announce=True)
        return str(self.execute_resumable(context))

    def get_job_status(self, external_id: Any, context: Context) -> str:
        """The state of the job the task state store names, or why it is not this task's job to reuse."""
        identity = JobIdentity.from_stored(external_id)
        if identity.delivered:
            return "delivered"  # a previous try returned its success: the task was cleared to run again
        try:
            job = self.hook.status(identity.app_id, summary=True).job
        except JobNotFound:
            return "gone"
        problem = TaskInstanceRef.from_context(context).mismatch(job.tags, identity.submit_id)
        if problem is not None:
            self.log.error("Refusing to reattach to Primus job %s, which the task state store names: %s",
                           identity.app_id, problem)
            return "not this task's job"
        if job.state in ACTIVE:
            self._reattached = identity.app_id
        return str(job.state)

    def is_job_active(self, status: str) -> bool:
        return status in ACTIVE

    def is_job_succeeded(self, status: str) -> bool:
        return status == JobState.SUCCEEDED

    def submit_job(self, context: Context) -> dict[str, Any]:
        """Submit this try's job, unless a job of this DAG run's task instance still runs (found by
        its tags: the store knew none, or the try that submitted it died before storing it)."""
        ti = TaskInstanceRef.from_context(context)
        running = self._find_running_job(ti)
        if running is not None:
            self._reattached = running.app_id
            return running.stored()
        submit_id = ti.new_submit_id()
        app_id = self._submit(ti, submit_id)
        return JobIdentity(app_id=app_id, submit_id=submit_id).stored()

    # Returns the app id, not None as the mixin declares: on a reattach the mixin returns this method's
    # value as the task's result (``return self.poll_until_complete(reconnect_to, context)``).
    def poll_until_complete(self, external_id: Any, context: Context) -> str:  # type: ignore[override]
        app_id = JobIdentity.from_stored(external_id).app_id
        if self._reattached == app_id:
            self.log.info("Reattaching to Primus job %s of a previous try (no new job submitted)", app_id)
        self.app_id = app_id
        try:
            self._watch(app_id, context, external_id)
        except TaskDeferred:
            raise  # not an end: the trigger waits on
        except BaseException as exc:
            # Every end publishes its outcome, a kill, a timeout and an error too: else the document
            # says "running" long after the task is gone. (An ended job's outcome is written already.)
            if not self._progress.finished:
                self._progress.finish(app_id, None, *self._outcome_of(exc, app_id))
            raise
        return app_id

    def _outcome_of(self, exc: BaseException, app_id: str) -> tuple[str, str]:
        """(outcome, reason) of the progress document for a wait that ended with ``exc``."""
        if self._stopping.is_set():
            return "killed", self._killed_reason(app_id)
        if isinstance(exc, AirflowTaskTimeout):
            return "timeout", "the task's execution_timeout passed"
        return "error", f"{type(exc).__name__}: {exc}"

    def _watch(self, app_id: str, context: Context, external_id: Any) -> None:
        ti = context["ti"]
        self._push_job(ti, app_id)
        if self._stopping.is_set():  # killed while submitting: on_kill() had no app id to act on
            self.on_kill()
            self._raise_killed(app_id)
        url = self.hook.job_url(app_id)
        if url is not None:
            self.log.info("Primus job %s: live in this task instance's Primus tab (the \"Primus job\" link); "
                          "its AM's own page: %s (sign in with the job token, or open the one-time link "
                          "`primus ui %s` prints)", app_id, url, app_id)
        if self.wait_for_completion and self.deferrable:
            self._defer_wait(app_id, self._deadline(ti), self._log_follower(app_id))
        if self.wait_for_completion:
            self._wait(app_id)
            self._mark_delivered(context, external_id)

    def get_job_result(self, external_id: Any, context: Context) -> str:
        """Reached directly when the stored job succeeded while no try watched it."""
        app_id = JobIdentity.from_stored(external_id).app_id
        if self.app_id is None:  # not polled by this try
            self.app_id = app_id
            self.log.info("Primus job %s of a previous try already succeeded: returning it, nothing runs again",
                          app_id)
            self._push_job(context["ti"], app_id)
            self._mark_delivered(context, external_id)
        return app_id

    def _push_job(self, ti: Any, app_id: str) -> None:
        """XComs: the app id, and the "Primus job" link (its page finds the job by the task
        instance's app id and connection)."""
        ti.xcom_push(key="app_id", value=app_id)
        ti.xcom_push(key=CONN_ID_KEY, value=self.primus_conn_id)
        ti.xcom_push(key=PrimusJobLink.xcom_key, value=task_job_page_url(ti))

    def _mark_delivered(self, context: Context, external_id: Any) -> None:
        """Record that this job's success reached the task, so that a cleared task trains again."""
        store = task_state_store(context)
        if store is not None and self.durable:
            store.set(STATE_KEY, JobIdentity.from_stored(external_id).model_copy(update={"delivered": True}).stored())

    def _defer_wait(self, app_id: str, deadline: float | None, follower: LogFollower) -> None:
        """Wait in the triggerer, which carries the log follower's cursor back to the resumed task."""
        # The first stop only: see the docstring.
        self._progress.update_from(app_id, lambda: self.hook.status(app_id, summary=True))
        following = bool(follower.executors)
        self.defer(
            trigger=PrimusJobTrigger(app_id, self.primus_conn_id, self.poll_interval, deadline=deadline,
                                     on_kill_action=self.on_kill_action,
                                     log_interval=self.log_interval if following else None,
                                     progress_interval=self.progress_interval,
                                     log_cursor=follower.cursor().model_dump(mode="json") if following else None),
            method_name="execute_complete",
        )

    def _deadline(self, ti: Any) -> float | None:
        """execution_timeout as an absolute time, counted from the task's start."""
        if self.execution_timeout is None:
            return None
        started = getattr(ti, "start_date", None)
        start = started.timestamp() if started is not None else time.time()
        return start + self.execution_timeout.total_seconds()

    def execute_complete(self, context: Context, event: dict[str, Any]) -> str:
        """Back from the trigger: the app id on success, else the runtime's reason as the error. The
        followed logs' new lines are copied from the event's ``log_cursor`` on (``LogFollower``)."""
        fired = PrimusTriggerEvent.of(event)
        app_id, status, reason = str(fired.app_id), fired.status, fired.reason or "no reason"
        self.app_id = app_id
        self._resumed = True
        self._progress = ProgressPublisher.for_task(context, self.progress_interval, self.log)
        # The event is kept small (see PrimusStatusTrigger): the progress is read here, now.
        job_status = self._progress.read_status(app_id, lambda: self.hook.status(app_id, summary=True))
        self._progress.from_event(fired, job_status)
        follower = LogFollower.from_cursor(fired.log_cursor, self.log_lines_per_minute) if fired.log_cursor \
            else LogFollower([], lines_per_minute=self.log_lines_per_minute)
        if status == "running":  # a log hand-off: copy the new lines, then wait on
            if job_status is not None:
                self._copy_log_lines(follower, app_id, job_status)
                self.log.info("Primus job %s %s: %s", app_id, job_status.job.state, progress_line(job_status))
            self._defer_wait(app_id, fired.deadline, follower)
        self._copy_final_log_lines(follower, app_id)
        if status == "success":
            self.log.info("Primus job %s succeeded: %s", app_id, reason)
            store = task_state_store(context)
            stored = store.get(STATE_KEY) if store is not None else None
            if stored and JobIdentity.from_stored(stored).app_id == app_id:
                self._mark_delivered(context, stored)
            return app_id
        if status == "timeout":
            if self.on_kill_action == "kill":
                self.hook.kill(app_id, reason="the Airflow task's execution_timeout passed", wait=False)
            raise AirflowException(f"Primus job {app_id} did not end within the task's execution_timeout"
                                   f" (job {'killed' if self.on_kill_action == 'kill' else 'left running'})")
        if status == "failed":
            full = self.hook.status(app_id)  # in full: the failed executors' tails
            # The event's reason may be cut short; the job's own is whole.
            self._raise_failed(app_id, full, job_succeeded(full).impossible or reason)
        raise AirflowException(reason)

    def _raise_failed(self, app_id: str, status: StatusDocument, reason: str) -> None:
        """Log what the failed executors said, then fail the try: without retry when the input
        itself is at fault (missing, empty, or corrupt with ``on_bad_data: fail``), since the next
        try would read the same input."""
        self._log_failed_executors(app_id, status)
        data_failure = status.data.failure if status.data is not None else None
        if data_failure:
            raise AirflowFailException(f"{reason} (the input is at fault: {data_failure}; not retried, the "
                                       "next try would read the same input)")
        raise AirflowException(reason)

    def _submit(self, ti: TaskInstanceRef, submit_id: str) -> str:
        base_dir = self.dag.folder if self.has_dag() else None
        try:
            job = self.hook.load_spec(self.spec, base_dir)
            if job.input is not None and job.input.work_preserve_dir is None:
                preserve = self._work_preserve_dir(ti)
                job = job.model_copy(update={"input": job.input.model_copy(update={"work_preserve_dir": preserve})})
            return self.hook.submit(job, tags=ti.job_tags(submit_id))
        except SpecError as exc:  # retrying cannot fix the spec
            raise AirflowFailException(f"Primus job spec is invalid: {exc}") from None

    def _work_preserve_dir(self, ti: TaskInstanceRef) -> str:
        """The data checkpoint directory of this task instance's job.

        The previous try's directory while its job (of this DAG run) did not succeed (the new job
        resumes its data); a fresh one after a success, so that clearing a finished task trains on
        the data again."""
        previous = [job for job in self.hook.find_jobs(ti.tags) if ti.mismatch(job.tags) is None]  # newest first
        if previous and previous[0].state != JobState.SUCCEEDED:
            spec = self.hook.client.spec(previous[0].app_id)
            if spec.input is not None and spec.input.work_preserve_dir:
                self.log.info("Resuming the data of Primus job %s (%s): %s", previous[0].app_id,
                              previous[0].state, spec.input.work_preserve_dir)
                return spec.input.work_preserve_dir
        # Run ids hold ':' and '+' (manual__2026-12-01T00:00:00+00:00), which HDFS refuses in names.
        parts = [re.sub(r"[^\w.=-]", "_", ti.tags[name]) for name in TI_TAGS]
        return "/".join([self.hook.work_preserve_root().rstrip("/"), *parts, f"try-{ti.try_number}"])

    def _log_follower(self, app_id: str) -> LogFollower:
        return LogFollower(self._follow_logs(app_id), lines_per_minute=self.log_lines_per_minute)

    def _copy_log_lines(self, follower: LogFollower, app_id: str, status: StatusSummary,
                        final: bool = False) -> None:
        for line in follower.new_lines(self.hook, app_id, status, final=final):
            self.log.info("%s", line)

    def _copy_final_log_lines(self, follower: LogFollower, app_id: str) -> None:
        """The followed logs' last lines, from the job's full status (its AM may be gone already)."""
        if not follower.executors:
            return
        try:
            status = self.hook.status(app_id)
        except Exception as exc:  # noqa: BLE001 - copying logs is a courtesy: the outcome matters
            self.log.warning("Cannot read the last log lines of Primus job %s: %s", app_id, exc)
            return
        self._copy_log_lines(follower, app_id, status, final=True)

    def _follow_logs(self, app_id: str) -> list[str]:
        if self.follow_logs is not None:
            return self.follow_logs
        try:
            spec: JobSpec = self.hook.client.spec(app_id)
        except Exception as exc:  # noqa: BLE001 - following logs is a courtesy
            self.log.warning("Not following the logs of Primus job %s: its spec cannot be read: %s", app_id, exc)
            return []
        waited = [role.name for role in spec.roles if role.required_successes > 0]
        return [f"{waited[0]}-0"] if waited else []

    def _find_running_job(self, ti: TaskInstanceRef) -> JobIdentity | None:
        """A still-active job of this task instance in this DAG run, found by its tags."""
        running = []
        for job in self.hook.find_jobs(ti.tags):  # newest first
            if job.state not in ACTIVE:
                continue
            problem = ti.mismatch(job.tags)
            if problem is None:
                running.append(job)
            else:
                self.log.warning("Not reattaching to running Primus job %s, which carries this task instance's "
                                 "tags: %s", job.app_id, problem)
        if len(running) > 1:
            self.log.warning("%d running Primus jobs of this task instance (%s): reattaching to the newest",
                             len(running), ", ".join(job.app_id for job in running))
        if not running:
            return None
        return JobIdentity(app_id=running[0].app_id, submit_id=running[0].tags.get(SUBMIT_TAG))

    # --- waiting ----------------------------------------------------------------

    def _wait(self, app_id: str) -> None:
        last_line = None
        follower = self._log_follower(app_id)
        while True:
            if self._stopping.is_set():
                self._raise_killed(app_id)
            try:
                # Transient errors are retried there, others fail the try. A summary: the follower asks
                # for its executors' rows itself, a failure reads the full status below.
                status = self.hook.status(app_id, summary=True)
            except JobNotFound:
                self._progress.finish(app_id, None, "error", f"Primus job {app_id} disappeared")
                raise AirflowException(f"Primus job {app_id} disappeared (its job directory is gone)") from None
            self._copy_log_lines(follower, app_id, status)
            job = status.job
            line = f"{job.state}: {progress_line(status)}"
            if line != last_line:  # only changes, not one line per poll
                self.log.info("Primus job %s %s", app_id, line)
                last_line = line
            self._progress.observe(app_id, status)
            if job.state in FINISHED:
                self._copy_final_log_lines(follower, app_id)
            if job.state == JobState.SUCCEEDED:
                return
            if job.state in FINISHED:
                self._raise_failed(app_id, self.hook.status(app_id),  # in full: the failed executors' tails
                                   f"Primus job {app_id} {job.state}: {job.reason or 'no reason'}")
            if self._stopping.wait(self.poll_interval):
                self._raise_killed(app_id)

    def _raise_killed(self, app_id: str) -> None:
        raise AirflowException(self._killed_reason(app_id))

    def _killed_reason(self, app_id: str) -> str:
        fate = "killed" if self.on_kill_action == "kill" else "left running (on_kill_action='keep')"
        return f"task was killed while waiting for Primus job {app_id}; the job was {fate}"

    def _log_failed_executors(self, app_id: str, status: StatusSummary) -> None:
        for block in self.hook.failed_executor_tails(app_id, status):
            self.log.error("%s", block)

    # --- killing ----------------------------------------------------------------

    def on_kill(self) -> None:
        # Runs in the task's SIGTERM handler (or after a timeout); execute() carries on afterwards,
        # so flag the wait loop to raise. Bounded: the supervisor SIGKILLs the task a few seconds on.
        stopping = getattr(self, "_stopping", None)
        if stopping is not None:
            stopping.set()
        if self.app_id is None:
            return
        if self.on_kill_action == "keep":
            self.log.info("Task killed: leaving Primus job %s running (on_kill_action='keep')", self.app_id)
            return
        worker = threading.Thread(target=self._kill_job, args=(self.app_id,), daemon=True,
                                  name=f"primus-kill-{self.app_id}")
        worker.start()
        worker.join(self.kill_timeout)
        if worker.is_alive():
            self.log.info("Primus job %s is stopping; its AM finishes the stop on its own", self.app_id)

    def _kill_job(self, app_id: str) -> None:
        try:
            self.hook.kill(app_id, reason=f"Airflow task {self.task_id} was killed", wait=False)
        except Exception:  # noqa: BLE001 - nothing to raise to in a kill thread
            self.log.exception("Could not kill Primus job %s", app_id)



class PrimusScaleRoleOperator(BaseOperator):
    """Resize a role of a running Primus job; running executors are told the new membership.

    :param app_id: the job (templated; e.g. ``{{ ti.xcom_pull(task_ids='train', key='app_id') }}``).
    :param role: the role to resize (templated).
    :param replicas: its new number of executors (templated).
    """

    template_fields: Sequence[str] = ("app_id", "role", "replicas", "primus_conn_id")

    def __init__(self, *, app_id: str, role: str, replicas: int | str,
                 primus_conn_id: str = PrimusHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app_id, self.role, self.replicas, self.primus_conn_id = app_id, role, replicas, primus_conn_id

    def execute(self, context: Context) -> int:
        replicas = int(self.replicas)  # a template renders to a string
        reply = PrimusHook(primus_conn_id=self.primus_conn_id).scale(self.app_id, self.role, replicas)
        self.log.info("Primus job %s: role %s now has %s replicas", self.app_id, reply.role, reply.replicas)
        return reply.replicas


class PrimusKillJobOperator(BaseOperator):
    """Stop a Primus job (graceful, then by force) and wait until it has ended.

    :param app_id: the job (templated).
    :param reason: recorded as the job's outcome reason (templated).
    """

    template_fields: Sequence[str] = ("app_id", "reason", "primus_conn_id")

    def __init__(self, *, app_id: str, reason: str = "", primus_conn_id: str = PrimusHook.default_conn_name,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app_id, self.reason, self.primus_conn_id = app_id, reason, primus_conn_id

    def execute(self, context: Context) -> str:
        reason = self.reason or f"killed by Airflow task {self.task_id}"
        status = PrimusHook(primus_conn_id=self.primus_conn_id).kill(self.app_id, reason=reason)
        state = str(status.job.state) if status is not None else "unknown"
        self.log.info("Primus job %s is %s: %s", self.app_id, state, status.job.reason if status is not None else "")
        return state


class PrimusSuspendDataOperator(BaseOperator):
    """Pause a running job's input: no new tasks are handed out, executors finish the ones they
    hold (e.g. while an upstream table is repaired). ``PrimusResumeDataOperator`` undoes it.

    :param app_id: the job (templated).
    """

    template_fields: Sequence[str] = ("app_id", "primus_conn_id")
    suspend = True

    def __init__(self, *, app_id: str, primus_conn_id: str = PrimusHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app_id, self.primus_conn_id = app_id, primus_conn_id

    def execute(self, context: Context) -> str:
        hook = PrimusHook(primus_conn_id=self.primus_conn_id)
        data = hook.suspend_data(self.app_id) if self.suspend else hook.resume_data(self.app_id)
        self.log.info("Primus job %s: data %s", self.app_id, data.state)
        return str(data.state)


class PrimusResumeDataOperator(PrimusSuspendDataOperator):
    """Hand out a suspended job's input tasks again.

    :param app_id: the job (templated).
    """

    suspend = False
