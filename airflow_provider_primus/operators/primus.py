"""PrimusSubmitJobOperator: run a Primus job as an Airflow task, reattaching on retries."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider_primus.hooks.primus import ACTIVE, FINISHED, LogFollower, PrimusHook, SpecLike
from airflow_provider_primus.links.primus import CONN_ID_KEY, PrimusJobLink, task_job_page_url
from airflow_provider_primus.templating import PartitionPlaceholdersMixin
from airflow_provider_primus.triggers.primus import PrimusJobTrigger
from primus_runtime.client import JobNotFound, progress_line
from primus_runtime.spec import JobSpec, SpecError
from primus_runtime.states import ExecutorState, JobState

if TYPE_CHECKING:
    from airflow.sdk import Context

#: task_state_store key (Airflow >= 3.3) holding the app id across tries. Renaming it breaks
#: reattaching for tries already in flight.
STATE_KEY = "primus_app_id"
#: Tags that identify the task instance: every try of it shares them (try_number is added on top).
TI_TAGS = ("dag_id", "task_id", "run_id", "map_index")


class PrimusSubmitJobOperator(PartitionPlaceholdersMixin, BaseOperator):
    """Submit a Primus job and (by default) wait for it to end.

    Every job is tagged with the task instance's ``dag_id``, ``task_id``, ``run_id``, ``map_index``
    and ``try_number``. A retry never submits a second job while the previous try's job still runs:
    it reattaches to it, found through Airflow 3.3's ``task_state_store`` or, without one (Airflow
    < 3.3, or a crash between submit and store), by searching the task instance's tags. A job
    that already ended (also a succeeded one, e.g. after the task was cleared) is not reused.

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
        into the task log while it waits, deferred or not. Default: executor 0 of the first role the
        job waits for; ``[]`` copies none. Deferred, the trigger copies only the newest lines, at each
        hand-off (see ``log_interval``), never a line twice, and logs a one-line progress summary.
    :param log_interval: deferred only: every this many seconds the trigger copies the followed logs'
        newest lines and the task defers again from where the copy stopped (a short stop on a
        worker, as the Kubernetes pod operator's ``logging_interval``); None: only when the job ends.

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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if on_kill_action not in ("kill", "keep"):
            raise ValueError(f"on_kill_action must be 'kill' or 'keep', got {on_kill_action!r}")
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be > 0, got {poll_interval!r}")
        self.spec = os.fspath(spec) if isinstance(spec, os.PathLike) else spec
        self.primus_conn_id = primus_conn_id
        self.wait_for_completion = wait_for_completion
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.on_kill_action = on_kill_action
        self.kill_timeout = kill_timeout
        self.follow_logs = None if follow_logs is None else list(follow_logs)
        self.log_interval = log_interval
        self.app_id: str | None = None

    @cached_property
    def hook(self) -> PrimusHook:
        return PrimusHook(primus_conn_id=self.primus_conn_id)

    # --- execute ----------------------------------------------------------------

    def execute(self, context: Context) -> str:
        # Created here, not in __init__: operators are deep-copied, events are not copyable.
        self._stopping = threading.Event()
        ti = context["ti"]
        ti_tags = {name: str(getattr(ti, name)) for name in TI_TAGS}
        store = context.get("task_state_store")  # Airflow >= 3.3

        app_id = self._find_running_job(store, ti_tags)
        if app_id is not None:
            self.log.info("Reattaching to Primus job %s of a previous try (no new job submitted)", app_id)
        else:
            app_id = self._submit(ti_tags, str(ti.try_number))
            if store is not None:
                store.set(STATE_KEY, app_id)
        self.app_id = app_id
        ti.xcom_push(key="app_id", value=app_id)
        if self._stopping.is_set():  # killed while submitting: on_kill() had no app id to act on
            self.on_kill()
            self._raise_killed(app_id)
        # The "Primus job" link: the page finds the job by the task instance's app id and connection.
        ti.xcom_push(key=CONN_ID_KEY, value=self.primus_conn_id)
        ti.xcom_push(key=PrimusJobLink.xcom_key, value=task_job_page_url(ti))
        url = self.hook.job_url(app_id)
        if url is not None:
            self.log.info("Primus job %s page: %s (sign in with the job token, or open the one-time link "
                          "`primus ui %s` prints)", app_id, url, app_id)

        if self.wait_for_completion and self.deferrable:
            self._defer_wait(app_id, self._deadline(ti), self._follow_logs(app_id), log_offsets={})
        if self.wait_for_completion:
            self._wait(app_id)
        return app_id

    def _defer_wait(self, app_id: str, deadline: float | None, follow_logs: list[str],
                    log_offsets: dict[str, int]) -> None:
        self.defer(
            trigger=PrimusJobTrigger(app_id, self.primus_conn_id, self.poll_interval, deadline=deadline,
                                     follow_logs=follow_logs, on_kill_action=self.on_kill_action,
                                     log_offsets=log_offsets, log_interval=self.log_interval),
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
        """Back from the trigger: the app id on success, else the runtime's reason as the error."""
        app_id, status, reason = event["app_id"], event["status"], event.get("reason") or "no reason"
        self.app_id = app_id
        if status == "running":  # a log hand-off: wait on, copying from where the trigger stopped
            self._defer_wait(app_id, event.get("deadline"), self._follow_logs(app_id), event.get("log_offsets") or {})
        if status == "success":
            self.log.info("Primus job %s succeeded: %s", app_id, reason)
            return app_id
        if status == "timeout":
            if self.on_kill_action == "kill":
                self.hook.kill(app_id, reason="the Airflow task's execution_timeout passed", wait=False)
            raise AirflowException(f"Primus job {app_id} did not end within the task's execution_timeout"
                                   f" (job {'killed' if self.on_kill_action == 'kill' else 'left running'})")
        if status == "failed":
            self._raise_failed(app_id, self.hook.status(app_id), reason)
        raise AirflowException(reason)

    def _raise_failed(self, app_id: str, status: dict[str, Any], reason: str) -> None:
        """Log what the failed executors said, then fail the try: without retry when the input
        itself is at fault (missing, empty, or corrupt with ``on_bad_data: fail``), since the next
        try would read the same input."""
        self._log_failed_executors(app_id, status)
        data_failure = (status.get("data") or {}).get("failure")
        if data_failure:
            raise AirflowFailException(f"{reason} (the input is at fault: {data_failure}; not retried, the "
                                       "next try would read the same input)")
        raise AirflowException(reason)

    def _submit(self, ti_tags: dict[str, str], try_number: str) -> str:
        base_dir = self.dag.folder if self.has_dag() else None
        try:
            job = self.hook.load_spec(self.spec, base_dir)
            if job.input is not None and job.input.work_preserve_dir is None:
                preserve = self._work_preserve_dir(ti_tags, try_number)
                job = job.model_copy(update={"input": job.input.model_copy(update={"work_preserve_dir": preserve})})
            return self.hook.submit(job, tags={**ti_tags, "try_number": try_number})
        except SpecError as exc:  # retrying cannot fix the spec
            raise AirflowFailException(f"Primus job spec is invalid: {exc}") from None

    def _work_preserve_dir(self, ti_tags: dict[str, str], try_number: str) -> str:
        """The data checkpoint directory of this task instance's job.

        The previous try's directory while its job did not succeed (the new job resumes its data);
        a fresh one after a success, so that clearing a finished task trains on the data again."""
        previous = self.hook.find_jobs(ti_tags)  # newest first
        if previous and previous[0]["state"] != JobState.SUCCEEDED:
            spec = self.hook.client.spec(previous[0]["app_id"])
            if spec.input is not None and spec.input.work_preserve_dir:
                self.log.info("Resuming the data of Primus job %s (%s): %s", previous[0]["app_id"],
                              previous[0]["state"], spec.input.work_preserve_dir)
                return spec.input.work_preserve_dir
        # Run ids hold ':' and '+' (manual__2026-12-01T00:00:00+00:00), which HDFS refuses in names.
        parts = [re.sub(r"[^\w.=-]", "_", ti_tags[name]) for name in ("dag_id", "task_id", "run_id", "map_index")]
        return "/".join([self.hook.work_preserve_root().rstrip("/"), *parts, f"try-{try_number}"])

    def _follow_logs(self, app_id: str) -> list[str]:
        if self.follow_logs is not None:
            return self.follow_logs
        try:
            spec: JobSpec = self.hook.client.spec(app_id)
        except Exception:  # noqa: BLE001 - following logs is a courtesy
            return []
        waited = [role.name for role in spec.roles if role.required_successes > 0]
        return [f"{waited[0]}-0"] if waited else []

    def _find_running_job(self, store: Any, ti_tags: dict[str, str]) -> str | None:
        """A still-active job of a previous try of this task instance, if any."""
        if store is not None and (stored := store.get(STATE_KEY)):
            try:
                state = self.hook.status(stored)["job"]["state"]
            except JobNotFound:
                state = "gone"
            if state in ACTIVE:
                return str(stored)
            self.log.info("Previous try's Primus job %s is %s: submitting a new job", stored, state)
        # Tag search: Airflow < 3.3, or the try died between submit and store.set().
        running = [job for job in self.hook.find_jobs(ti_tags) if job["state"] in ACTIVE]
        if len(running) > 1:
            self.log.warning("%d running Primus jobs carry this task instance's tags (%s): reattaching to "
                             "the newest", len(running), ", ".join(job["app_id"] for job in running))
        return running[0]["app_id"] if running else None

    # --- waiting ----------------------------------------------------------------

    def _wait(self, app_id: str) -> None:
        last_line = None
        errors = 0
        follower = LogFollower(self._follow_logs(app_id))
        while True:
            if self._stopping.is_set():
                self._raise_killed(app_id)
            try:
                status = self.hook.status(app_id)
                errors = 0
            except JobNotFound:
                raise AirflowException(f"Primus job {app_id} disappeared (its job directory is gone)") from None
            except Exception as exc:  # noqa: BLE001 - a hiccup talking to the AM; give up after a few
                errors += 1
                if errors >= 5:
                    raise
                self.log.warning("Cannot read the status of Primus job %s (%s); retrying", app_id, exc)
            else:
                for log_line in follower.new_lines(self.hook, app_id, status):
                    self.log.info("%s", log_line)
                job = status["job"]
                line = f"{job['state']}: {progress_line(status)}"
                if line != last_line:  # only changes, not one line per poll
                    self.log.info("Primus job %s %s", app_id, line)
                    last_line = line
                if job["state"] == JobState.SUCCEEDED:
                    return
                if job["state"] in FINISHED:
                    self._raise_failed(app_id, status,
                                       f"Primus job {app_id} {job['state']}: {job.get('reason') or 'no reason'}")
            if self._stopping.wait(self.poll_interval):
                self._raise_killed(app_id)

    def _raise_killed(self, app_id: str) -> None:
        fate = "killed" if self.on_kill_action == "kill" else "left running (on_kill_action='keep')"
        raise AirflowException(f"task was killed while waiting for Primus job {app_id}; the job was {fate}")

    def _log_failed_executors(self, app_id: str, status: dict[str, Any]) -> None:
        for ex in status.get("executors", []):
            if ex.get("state") not in (ExecutorState.FAILED, ExecutorState.LOST):
                continue
            try:
                tail = self.hook.tail_logs(app_id, ex["role"], ex["index"], stream="stderr", lines=20)
            except Exception as exc:  # noqa: BLE001 - the log is a courtesy, the outcome matters
                tail = f"(log not readable: {exc})"
            self.log.error("Executor %s %s (exit code %s, %s); last stderr lines:\n%s", ex.get("id"),
                           ex["state"], ex.get("exit_code"), ex.get("reason"), tail or "(empty)")

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
        self.log.info("Primus job %s: role %s now has %s replicas", self.app_id, reply["role"], reply["replicas"])
        return int(reply["replicas"])


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
        state = status["job"]["state"] if status else "unknown"
        self.log.info("Primus job %s is %s: %s", self.app_id, state, status["job"].get("reason") if status else "")
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
        self.log.info("Primus job %s: data %s", self.app_id, data.get("state"))
        return str(data.get("state"))


class PrimusResumeDataOperator(PrimusSuspendDataOperator):
    """Hand out a suspended job's input tasks again.

    :param app_id: the job (templated).
    """

    suspend = False
