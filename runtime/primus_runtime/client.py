"""Talk to jobs from outside: submit, status, wait, kill, scale, logs, list.

``PrimusClient`` is what the CLI (and the Airflow hook) use. It finds a job's
AM through the backend's ``ClusterClient`` and speaks to its REST API; once
the AM is gone it reads the status the AM left behind.
"""

from __future__ import annotations

import builtins
import getpass
import logging
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, overload

from . import backends, preflight, protocol
from .api_client import AMRejected, AMUnavailable
from .backends.base import ClientOptions, ClusterClient
from .hadoop import is_hdfs
from .models import (
    EXECUTOR_IDS_MAX_LENGTH,
    DataStatus,
    ExecutorsQuery,
    ExecutorsReply,
    ExecutorView,
    JobEntry,
    KafkaStatus,
    RestartReply,
    RoleView,
    SavepointReply,
    ScaleReply,
    StatusDocument,
    StatusSummary,
    TimelineReply,
)
from .spec import JobSpec, SpecError, load_spec
from .states import JOB_FINISHED, ExecutorState, JobState
from .ui.auth import clean_name, make_ticket

log = logging.getLogger("primus.client")


def role_progress(role: RoleView) -> str:
    """``worker x2: 1 running, 1 succeeded (1 restart)`` from one role of a status."""
    counts = ", ".join(f"{n} {state}" for state, n in role.states.items() if n) or "none yet"
    restarts = role.restarts
    return f"{role.name} x{role.replicas}: {counts}" + (
        f" ({restarts} restart{'s' if restarts != 1 else ''})" if restarts else "")


def data_progress(data: DataStatus) -> str:
    """``data 40% (4/10 tasks), watermark 2026-12-01`` from the ``data`` part of a status; while
    partitions are still awaited, ``data 40% of 10 tasks listed so far (4/10), waiting for ...``.

    Percentages are truncated, never rounded up: 100% means every task was read."""
    tasks = data.tasks
    counts = f"{tasks.get('done', 0)}/{tasks.get('total', 0)} tasks"
    if data.progress is not None:
        line = f"data {int(data.progress * 100)}% ({counts})"
    else:
        line = f"data {int(data.progress_of_discovered * 100)}% of the tasks listed so far ({counts})"
    if data.state != "running":
        line += f" {data.state}"
    if data.waiting_for:
        line += f", waiting for {data.waiting_for}"
    if tasks.get("quarantined"):
        line += f", {tasks['quarantined']} quarantined"
    if data.watermark:
        line += f", watermark {data.watermark}"
    return line


def kafka_progress(kafka: KafkaStatus) -> str:
    """``kafka lag 1203 records, 713.6 records/s, watermark 2026-12-01T00:19:57.000+00:00, brokers
    reachable`` from the ``data.kafka`` part of a status (``KafkaInput.status``)."""
    lag = "not known yet" if kafka.lag is None else f"{kafka.lag} records"
    line = f"kafka lag {lag}, {kafka.records_per_s} records/s, watermark {kafka.watermark or 'none yet'}"
    if kafka.eta_seconds is not None and kafka.lag:
        line += f", caught up in ~{kafka.eta_seconds:g}s"
    if kafka.progress is not None:
        line += f", {int(kafka.progress * 100)}% of the bounded range"
    return line + (", brokers reachable" if kafka.reachable else f", brokers unreachable since {kafka.unreachable_since}")


def progress_line(status: StatusSummary) -> str:
    """Every role's progress on one line, ``ps x2: 2 running | worker x2: ...``, then the input's."""
    line = " | ".join(role_progress(role) for role in status.roles) or "no executors yet"
    if status.data is not None:
        line += " | " + data_progress(status.data)
    return line


def executor_ranges(replicas: dict[str, int]) -> str:
    """``ps-0, worker-0 to worker-3`` for roles of 1 and 4 replicas (``role: none`` for one scaled to 0)."""
    def one(role: str, count: int) -> str:
        if count < 2:
            return protocol.executor_id(role, 0) if count else f"{role}: none"
        return f"{protocol.executor_id(role, 0)} to {protocol.executor_id(role, count - 1)}"
    return ", ".join(one(role, count) for role, count in replicas.items())


#: The states of an executor incarnation that failed (its stderr tail is what a failed job shows).
FAILED_STATES = (ExecutorState.FAILED.value, ExecutorState.LOST.value)
#: What reading a failed executor's log may end with: a log gone with its pod or node, a path the
#: cluster refuses, an AM that refuses or stops answering. A courtesy's errors: said in its place.
LOG_READ_ERRORS: tuple[type[BaseException], ...] = (OSError, LookupError, AMRejected, AMUnavailable)


def last_lines(data: bytes, lines: int) -> str:
    """The last ``lines`` lines of a log's bytes (an unfinished last line counts)."""
    return "\n".join(data.decode(errors="replace").rstrip("\n").split("\n")[-lines:])


IDS_PER_REQUEST = EXECUTOR_IDS_MAX_LENGTH  # characters of ids one GET /executors carries


def _id_batches(ids: list[str]) -> Iterator[list[str]]:
    """``ids`` in parts whose comma-separated text fits one query."""
    part: list[str] = []
    for executor_id in ids:
        if part and len(",".join([*part, executor_id])) > IDS_PER_REQUEST:
            yield part
            part = []
        part.append(executor_id)
    if part:
        yield part


def read_status(reply: dict[str, Any] | bytes, summary: bool = False) -> StatusSummary:
    """An AM's status answer (parsed JSON, or its bytes) or a status file, as the typed document:
    a ``StatusSummary`` when ``summary`` (the rows of a full document are dropped), else a ``StatusDocument``."""
    if summary and (isinstance(reply, bytes) or "executors" not in reply):
        return StatusSummary.model_validate_json(reply) if isinstance(reply, bytes) \
            else StatusSummary.model_validate(reply)
    document = StatusDocument.model_validate_json(reply) if isinstance(reply, bytes) \
        else StatusDocument.model_validate(reply)
    return document.summary() if summary else document


def local_paths_on_a_cluster(job: JobSpec) -> list[str]:
    """Why the local input paths of ``job`` cannot work on its cluster backend: there its executors
    and its AM run on cluster nodes, where a path of the submitting machine means another file or
    none. Paths marked node-local (every node has them) are the user's promise and pass."""
    if backends.get(job.backend.type).shares_files_with_client or job.input is None:
        return []
    on = f"the {job.backend.type} backend"
    problems = [
        f"input.sources[{i}].path: a local path is read on every node of {on}, not on this machine, "
        f"got {source.path!r}; put the data on HDFS (`primus hdfs put LOCAL_DIR hdfs:///DIR`, see the "
        f"README's \"On YARN\") and name it hdfs:///DIR/..., or set node_local: true if every node has this path"
        for i, source in enumerate(job.input.sources) if not is_hdfs(source.path) and not source.node_local]
    if not job.input.node_local_dirs:
        problems += [
            f"input.{key}: a local path is on the node that runs the AM of {on}, not on this machine, got "
            f"{value!r}; use an hdfs:// directory, or set input.node_local_dirs: true if every node mounts it"
            for key, value in (("work_preserve_dir", job.input.work_preserve_dir),
                               ("restore_from", job.input.restore_from)) if value and not is_hdfs(value)]
    return problems


def os_user() -> str | None:
    """This process's user, as the AM records it with the actions it asks for (ASCII: it travels in
    a header); None when the system cannot tell (a container's uid without a name)."""
    try:
        name = getpass.getuser()
    except (OSError, KeyError):  # no LOGNAME/USER and no passwd entry
        return None
    return clean_name(name).encode("ascii", "backslashreplace").decode()


class JobNotFound(LookupError):
    def __init__(self, app_id: str):
        super().__init__(f"no job {app_id!r}")
        self.app_id = app_id


class NoSuchLog(LookupError):
    """The job exists but has not the log asked for: no such role or executor, or an executor not
    launched yet."""


class JobUnreachable(RuntimeError):
    """The AM is gone and left no outcome (it crashed or was killed)."""


class PrimusClient:
    """Jobs of every backend. A job id says its backend (``backends.of_app_id``); each backend's
    ``ClusterClient`` is made on first use from ``options`` (the local one from ``home``, YARN's from
    the Hadoop configuration, Kubernetes' from a kubeconfig or an API client). ``user``: the name the
    AMs record with the actions asked through this client (default: the OS user, as a page records
    the name signed in)."""

    def __init__(self, home: str | Path | None = None, timeout: float = 10.0,
                 hadoop_conf_dir: str | None = None, options: ClientOptions | None = None,
                 user: str | None = None):
        self.options = options or ClientOptions(home=str(home) if home else None, hadoop_conf_dir=hadoop_conf_dir)
        self.timeout = timeout
        self.user = user or os_user()
        self._clusters: dict[str, ClusterClient] = {}

    @property
    def hadoop_conf_dir(self) -> str | None:
        return self.options.hadoop_conf_dir

    def cluster(self, backend: str) -> ClusterClient:
        """The named backend's client, made on first use (YARN's needs the Hadoop configuration)."""
        if backend not in self._clusters:
            self._clusters[backend] = backends.get(backend).client(self.options)
        return self._clusters[backend]

    def cluster_for(self, app_id: str) -> ClusterClient:
        try:
            return self.cluster(backends.of_app_id(app_id).name)
        except backends.UnknownBackend:
            raise JobNotFound(app_id) from None

    # --- submit ---

    def submit(self, spec: JobSpec | dict[str, Any] | str | Path,
               on_warning: Callable[[str], None] | None = None) -> str:
        """Validate the spec and start its AM; the application id. What is probably a mistake but
        may not be (``preflight``) goes to ``on_warning``, by default this module's log."""
        job = load_spec(spec)
        found = preflight.check(job)
        problems = job.backend.submit_problems() + local_paths_on_a_cluster(job) + found.problems
        if problems:
            raise SpecError(problems)
        for warning in found.warnings:
            (on_warning or log.warning)(warning)
        return self.cluster(job.backend.type).submit(job)

    # --- status ---

    @overload
    def status(self, app_id: str, summary: Literal[False] = False) -> StatusDocument: ...

    @overload
    def status(self, app_id: str, summary: Literal[True]) -> StatusSummary: ...

    @overload
    def status(self, app_id: str, summary: bool) -> StatusSummary: ...

    def status(self, app_id: str, summary: bool = False) -> StatusSummary:
        """Job, roles, executors and recent events, live from the AM or as it left them.

        ``summary``: a ``StatusSummary``, without the executors' rows (and history), which grow
        with the job: the role counts say how many are in each state, ``executors()`` pages the rows."""
        reply = self._api(app_id, "GET", "/status?view=summary" if summary else "/status")
        if reply is None:
            document = self.status_without_am(app_id)
            return document.summary() if summary else document
        # The AM's summary has no rows; an AM of an older runtime has them.
        return read_status(reply, summary)

    def executors(self, app_id: str, role: str | None = None, state: str | Iterable[str] | None = None,
                  ids: Iterable[str] | None = None, offset: int = 0, limit: int | None = None) -> ExecutorsReply:
        """One page of the job's current executors: those of ``role``, in ``state`` (one, or any of
        several) and among ``ids`` (``<role>-<index>``), ``limit`` of them from ``offset`` (every one
        without a limit), in the order of their role in the spec, then their index; ``total`` says how
        many match. Live from the AM or from its status file."""
        states = state if isinstance(state, str) or state is None else ",".join(state)
        wanted = None if ids is None else list(ids)
        if wanted is not None and len(",".join(wanted)) > IDS_PER_REQUEST:
            # More ids than one query may carry: asked for in parts, paged here.
            rows = [row for part in _id_batches(wanted) for row in self.executors(app_id, role, states, part).executors]
            return ExecutorsReply(total=len(rows), offset=offset, limit=limit,
                                  executors=rows[offset:None if limit is None else offset + limit])
        asked = ExecutorsQuery(role=role, state=states, ids=None if wanted is None else ",".join(wanted),
                               offset=offset, limit=limit)
        reply = self._api(app_id, "GET", "/executors?" + urllib.parse.urlencode(
            asked.model_dump(exclude_defaults=True)))
        if reply is not None and "total" in reply:
            return ExecutorsReply.model_validate(reply)
        # The AM is gone (its status file has every row), or it runs a runtime without paging: filter here.
        rows = [ExecutorView.model_validate(row) for row in reply["executors"]] if reply is not None \
            else self.status_without_am(app_id).executors
        matches = asked.matcher()
        matching = [ex for ex in rows if matches(ex.role, ex.state, ex.id)]
        return ExecutorsReply(total=len(matching), offset=offset, limit=limit, executors=asked.window(matching))

    def status_without_am(self, app_id: str) -> StatusDocument:
        """The status when the AM does not answer: its final status, ``pending`` while a just-submitted
        AM starts, else ``lost`` with the last snapshot it wrote. (The async hook reuses this.)"""
        cluster = self._known(app_id)
        final = cluster.final_status(app_id)
        if final is not None:
            return StatusDocument.model_validate(final)
        # Just submitted (the AM is still starting) or the AM died without an outcome.
        if cluster.am_alive(app_id):
            spec = self.spec(app_id)
            return StatusDocument.without_am(app_id, spec.name, JobState.PENDING, "AM starting", spec.tags)
        reason = (cluster.am_gone_reason(app_id) or "the AM exited without recording an outcome") + \
            "; its log: " + cluster.cli_command("logs", app_id)
        last = cluster.last_status(app_id)
        if last is None:
            spec = self.spec(app_id)
            return StatusDocument.without_am(app_id, spec.name, JobState.LOST, reason, spec.tags)
        return StatusDocument.model_validate(last).lost(reason)

    def has_history(self, app_id: str) -> bool:
        """Whether the job's AM saved a status: what ``primus ui`` shows once the AM is gone."""
        cluster = self._known(app_id)
        return cluster.final_status(app_id) is not None or cluster.last_status(app_id) is not None

    def incarnations(self, app_id: str, state: str | Iterable[str] | None = None,
                     ids: Iterable[str] | None = None) -> list[ExecutorView]:
        """Every executor incarnation of the job (those in ``state``, one or any of several, of the
        executors ``ids``): the earlier ones (replaced by a restart) in the order they were replaced,
        then the current ones; live from the AM, else from its status file."""
        states = state if isinstance(state, str) or state is None else ",".join(state)
        wanted_ids = None if ids is None else ",".join(ids)
        reply = self._api(app_id, "GET", "/executors?" + urllib.parse.urlencode(
            {"history": 1, **({"state": states} if states else {}), **({"ids": wanted_ids} if wanted_ids else {})}))
        if reply is None:
            document = self.status_without_am(app_id)
            everyone = [*(document.history or []), *document.executors]
        else:
            page = ExecutorsReply.model_validate(reply)
            everyone = [*(page.history or []), *page.executors]
        # Filtered here too: a status file (and an AM of an older runtime) has every incarnation.
        matches = ExecutorsQuery(state=states, ids=wanted_ids).matcher()
        return [ex for ex in everyone if matches(ex.role, ex.state, ex.id)]

    def wait(self, app_id: str, timeout: float | None = None, poll: float = 0.5,
             on_status: Callable[[StatusSummary], None] | None = None) -> StatusDocument:
        """Poll until the job ends (or ``timeout`` passes); the last status, in full. ``on_status`` gets
        each one polled: summaries (``status(summary=True)``), then that last one."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status(app_id, summary=True)  # a few KiB a poll, however many executors
            if status.job.state in JOB_FINISHED:
                document = self.status(app_id)  # callers read the final executors (exit codes, logs)
                if on_status is not None:
                    on_status(document)
                return document
            if on_status is not None:
                on_status(status)
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {app_id} still {status.job.state} after {timeout:g}s")
            time.sleep(poll)

    def list(self, tags: dict[str, str] | None = None, backend: str = backends.DEFAULT) -> builtins.list[JobEntry]:
        """Jobs of ``backend`` (a name of ``backends.NAMES``) carrying all ``tags``, newest first."""
        return self.cluster(backend).list_jobs(tags)

    # --- control ---

    def request_kill(self, app_id: str, reason: str = "", patience: float = 10.0) -> bool:
        """Ask the job's AM to stop the job and return without waiting for it to end.

        True once an AM took the request (or the job was already ending); False when no AM
        answered within ``patience`` seconds (a just-submitted AM may not serve yet)."""
        deadline = time.monotonic() + patience
        while True:
            try:
                if self._api(app_id, "POST", "/job/kill", {"reason": reason or "killed by user"}) is not None:
                    return True
            except AMRejected as exc:
                if exc.status == 409:  # already finishing or finished
                    return True
                raise
            if not self.cluster_for(app_id).am_alive(app_id) or time.monotonic() > deadline:
                return False
            time.sleep(0.05)

    # The kill sequence lives here only (the CLI and the Airflow hooks, sync and async, call it):
    # ask the AM (409: already ending, fine), force-kill when no AM answers, remove on request.

    def kill(self, app_id: str, reason: str = "", timeout: float | None = None,
             remove: bool = False) -> StatusDocument:
        """Stop the job gracefully through its AM, then by force (what the AM could not stop within
        its shutdown grace, or ``timeout``); the final status. ``remove``: then delete what the job
        keeps on its cluster (``ClusterClient.remove``: on Kubernetes the AM pod and all it owns)."""
        spec = self.spec(app_id)
        grace = spec.am.shutdown_grace + 2 * spec.am.heartbeat_interval + 5
        self.request_kill(app_id, reason)
        status = None
        try:
            status = self.wait(app_id, timeout=timeout or grace, poll=0.2)
        except TimeoutError:
            pass
        if status is None or status.job.state == JobState.LOST or not self._am_exited(app_id, within=5.0):
            self.cluster_for(app_id).force_kill(app_id)  # reap whatever the AM could not stop
            status = self.status(app_id)
        if remove:
            self.cluster_for(app_id).remove(app_id)
        return status

    def stop(self, app_id: str, reason: str = "", remove: bool = False, patience: float = 1.0) -> bool:
        """Ask the job's AM to stop the job and return without waiting for its end; when no AM
        answers within ``patience`` seconds (short: callers such as Airflow's ``on_kill`` have a few
        seconds), kill the job by force. ``remove`` as for ``kill``. True when an AM took the request."""
        asked = self.request_kill(app_id, reason, patience=patience)
        if not asked:
            self.cluster_for(app_id).force_kill(app_id)
        if remove:
            self.cluster_for(app_id).remove(app_id)
        return asked

    def _am_exited(self, app_id: str, within: float) -> bool:
        deadline = time.monotonic() + within
        while self.cluster_for(app_id).am_alive(app_id):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def succeed(self, app_id: str, reason: str = "") -> None:
        self._require_api(app_id, "POST", "/job/succeed", {"reason": reason}, "it cannot be marked succeeded")

    def scale(self, app_id: str, role: str, replicas: int) -> ScaleReply:
        return ScaleReply.model_validate(self._require_api(
            app_id, "POST", f"/roles/{role}/scale", {"replicas": replicas}, "it cannot be scaled"))

    def restart(self, app_id: str, executor: str, reason: str = "") -> RestartReply:
        """Stop ``executor``'s incarnation (``<role>-<index>``); its replacement follows once it ended."""
        return RestartReply.model_validate(self._require_api(
            app_id, "POST", f"/executors/{urllib.parse.quote(executor, safe='')}/restart", {"reason": reason},
            f"{executor} cannot be restarted"))

    def timeline(self, app_id: str, since: float = 0.0) -> TimelineReply | None:
        """The job's life in samples taken after ``since`` (epoch seconds): its AM's while it serves, else
        the samples of the event log it left; None when neither is there."""
        cluster = self._known(app_id)
        reply = self._api(app_id, "GET", "/timeline?" + urllib.parse.urlencode({"since": since}))
        if reply is not None:
            return TimelineReply.model_validate(reply)
        from .am.timeline import EVENT_LOG, read_event_log  # the AM's reader of its own log (heavy imports)

        log = cluster.history_file(app_id, EVENT_LOG)
        if log is None:
            return None
        _, samples = read_event_log(log.decode(errors="replace"))
        return TimelineReply(interval=0.0, samples=[sample for sample in samples if sample["time"] > since])

    def data(self, app_id: str) -> DataStatus | None:
        """The input's progress (the ``data`` part of the status); None for a job without input."""
        return self.status(app_id, summary=True).data

    def data_suspend(self, app_id: str) -> DataStatus:
        """Stop handing out input tasks (executors finish those they hold); the data status."""
        return DataStatus.model_validate(self._require_api(
            app_id, "POST", "/data/suspend", {}, "its input cannot be suspended"))

    def data_resume(self, app_id: str) -> DataStatus:
        """Hand out input tasks again; the data status."""
        return DataStatus.model_validate(self._require_api(
            app_id, "POST", "/data/resume", {}, "its input cannot be resumed"))

    def data_savepoint(self, app_id: str, directory: str | Path) -> SavepointReply:
        """Save every input task's position to ``directory`` (for ``input.restore_from``); what was saved."""
        where = str(directory) if "://" in str(directory) else str(Path(directory).absolute())  # hdfs://...
        return SavepointReply.model_validate(self._require_api(
            app_id, "POST", "/data/savepoint", {"dir": where}, "only its AM could save its input's positions"))

    # --- logs ---

    def log_path(self, app_id: str, role: str | None = None, index: int | None = None,
                 stream: str = "stdout", wait: float = 0.0, attempt: int | None = None) -> str:
        """The log file of an executor's current incarnation, else of its latest one, or of the one of
        ``attempt`` (0 the first, as ``restarts`` counts); the AM log without a role. ``NoSuchLog`` when
        the job has no such executor or attempt, or it has no log yet.

        ``wait``: seconds to wait for an executor that has not been launched yet."""
        cluster = self._known(app_id)
        if role is None:
            return cluster.am_log(app_id)
        index = index or 0
        executor_id = protocol.executor_id(role, index)
        deadline = time.monotonic() + wait
        while True:
            rows = self.incarnations(app_id, ids=[executor_id])
            if attempt is not None and rows:
                of_attempt = [ex for ex in rows if ex.attempt == attempt]
                if not of_attempt:
                    attempts = ", ".join(map(str, sorted({ex.attempt for ex in rows})))
                    raise NoSuchLog(f"{executor_id} of job {app_id} has no attempt {attempt}: its attempts are "
                                    f"{attempts}")
                rows = of_attempt
            logged = next((ex for ex in reversed(rows) if ex.logs), None)  # the current, or the latest
            if logged is not None:
                return logged.logs[stream]
            latest = cluster.executor_log(app_id, role, index, stream) if attempt is None else None
            if latest is not None:
                return latest
            summary = self.status(app_id, summary=True)
            if not rows:  # nothing of that name now, nor earlier: one the job may yet have, or never
                missing = self._missing_executor(app_id, summary, role, index)
                if missing is not None:
                    raise NoSuchLog(missing)
            ended = summary.job.state in JOB_FINISHED
            if time.monotonic() > deadline or ended:
                job_state = summary.job.state
                state = f"it is {rows[-1].state}" if rows else \
                    f"the job ended: {job_state}" if ended else f"the job is {job_state}"
                raise NoSuchLog(f"{executor_id} of job {app_id} has no log: it "
                                f"{'was never launched' if ended else 'has not been launched yet'} ({state})")
            time.sleep(0.2)

    def _missing_executor(self, app_id: str, summary: StatusSummary, role: str, index: int) -> str | None:
        """Why the job cannot have executor ``role``-``index``, naming those it has; None if it may."""
        replicas = {r.name: r.replicas for r in summary.roles} \
            or {r.name: r.replicas for r in self.spec(app_id).roles}  # before the AM made them
        if role in replicas and index < replicas[role]:
            return None
        what = f"executor {protocol.executor_id(role, index)}" if role in replicas else f"role {role!r}"
        return f"job {app_id} has no {what}: its executors are {executor_ranges(replicas)}"

    def failed_executor_tails(self, app_id: str, status: StatusSummary, lines: int, max_executors: int,
                              errors: tuple[type[BaseException], ...] = LOG_READ_ERRORS,
                              warn: Callable[[str], None] | None = None) -> builtins.list[str]:  # (self.list)
        """What the failed executors of a job said: one text block per failed or lost incarnation,
        the current ones and the earlier ones its failover restarted, in the order they ended, each
        with the last ``lines`` lines of its stderr; at most ``max_executors`` blocks (the first
        failures, usually the cause), then one line saying how many more failed and how to read them.

        ``status`` is the job's status: a status file names the earlier incarnations itself, else
        they are asked for. Reading a log is a courtesy: ``errors`` met reading one are said in its
        block; met listing the earlier incarnations, they go to ``warn`` and the current ones are shown."""
        if isinstance(status, StatusDocument) and status.history is not None:
            everyone = [*status.history, *status.executors]
        else:
            try:
                everyone = self.incarnations(app_id, state=FAILED_STATES)  # not every row of a big job
            except errors as exc:  # never hide the job's failure behind this one
                if warn is not None:
                    warn(f"cannot list the earlier incarnations of job {app_id} ({exc}): the current ones only")
                everyone = list(status.executors) if isinstance(status, StatusDocument) else []
        failed = sorted((ex for ex in everyone if ex.state in FAILED_STATES), key=lambda ex: ex.finished_at or 0.0)
        blocks = [self._failure_block(app_id, ex, lines, errors) for ex in failed[:max_executors]]
        rest = failed[max_executors:]
        if rest:
            names = ", ".join(f"{ex.id} (attempt {ex.attempt})" for ex in rest[:20])
            read_one = self.cluster_for(app_id).cli_command("logs", app_id, "--role", "ROLE", "--index", "INDEX",
                                                            "--stream", "stderr", "--attempt", "ATTEMPT")
            blocks.append(f"{len(rest)} more failed executor incarnation{'s' if len(rest) != 1 else ''} not shown: "
                          f"{names}{', ...' if len(rest) > 20 else ''}; read one with `{read_one}`")
        return blocks

    def am_attempt_log(self, app_id: str, attempt: int) -> bytes:
        """What the AM's attempt ``attempt`` (1 the first) wrote to its log. ``NoSuchLog`` for an attempt
        the job did not have, or on a backend that keeps the latest attempt's log only."""
        cluster = self._known(app_id)
        parts = cluster.am_log_attempts(app_id)
        if parts is None:
            raise NoSuchLog(f"the {self.spec(app_id).backend.type} backend keeps the log of the latest AM attempt "
                            f"only: {cluster.cli_command('logs', app_id)}")
        if not 1 <= attempt <= len(parts):
            raise NoSuchLog(f"job {app_id} has had {len(parts)} AM attempt{'s' if len(parts) != 1 else ''}, "
                            f"not {attempt}: they count from 1")
        return parts[attempt - 1]

    def am_log_tail(self, app_id: str, lines: int) -> str | None:
        """The last ``lines`` lines of the AM's log (of a lost job: why its AM ended may be there, ending
        a traceback); None when it cannot be read (gone with its container) or is empty."""
        try:
            cluster = self._known(app_id)
            return last_lines(cluster.read_log(app_id, cluster.am_log(app_id)), lines) or None
        except LOG_READ_ERRORS:
            return None

    def _failure_block(self, app_id: str, ex: ExecutorView, lines: int,
                       errors: tuple[type[BaseException], ...]) -> str:
        path = ex.logs.get("stderr")
        cluster = self.cluster_for(app_id)
        try:
            tail = last_lines(cluster.read_log(app_id, path), lines) if path else "(no log: it never started)"
        except errors as exc:  # the outcome matters, the log is a courtesy
            tail = f"(log not readable: {exc})"
        every_line = cluster.cli_command("logs", app_id, "--role", ex.role, "--index", str(ex.index),
                                         "--stream", "stderr", "--attempt", str(ex.attempt))
        return (f"Executor {ex.id} (attempt {ex.attempt}) {ex.state} (exit code {ex.exit_code}, "
                f"{ex.reason or 'no reason'}); last stderr lines (all: {every_line}):\n"
                f"{tail or '(empty)'}")

    def follow_log(self, app_id: str, path: str, follow: bool = False, poll: float = 0.5) -> Iterator[bytes]:
        offset = 0
        while True:
            chunk = self.cluster_for(app_id).read_log(app_id, path, offset)
            if chunk:
                offset += len(chunk)
                yield chunk
            elif not follow or self.status(app_id, summary=True).job.state in JOB_FINISHED:
                return
            else:
                time.sleep(poll)

    # --- plumbing ---

    def spec(self, app_id: str) -> JobSpec:
        return self._known(app_id).spec(app_id)

    def page_link(self, app_id: str, user: str | None = None) -> str | None:
        """A one-time sign-in link (valid a few minutes) to the page of the job's running AM, for
        ``user`` (default: the client's ``user``, the OS user); None when the AM is not running. Give it to one
        person: it signs them in as ``user``, whose name goes with their actions."""
        cluster = self._known(app_id)
        if self.status(app_id, summary=True).job.state in JOB_FINISHED:
            return None  # its AM may linger a moment, but the page is its history now
        page = cluster.am_web_url(app_id)
        endpoint = cluster.am_endpoint(app_id) if page is not None else None
        if page is None or endpoint is None:
            return None
        return f"{page}ui/login?ticket={make_ticket(endpoint[1], user or self.user or 'anonymous')}"

    def _known(self, app_id: str) -> ClusterClient:
        cluster = self.cluster_for(app_id)
        if not cluster.exists(app_id):
            raise JobNotFound(app_id)
        return cluster

    def _api(self, app_id: str, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The AM's answer, or None when the AM is not (or no longer) serving."""
        return self._known(app_id).am_request(app_id, method, path, body, self.timeout, self.user)

    def _require_api(self, app_id: str, method: str, path: str, body: dict[str, Any], cannot: str) -> dict[str, Any]:
        """The AM's answer; when none comes, ``JobUnreachable`` saying why: the job has ended (``cannot``
        says what that rules out: ``it cannot be scaled``), or its AM does not answer (yet)."""
        reply = self._api(app_id, method, path, body)
        if reply is None:
            state = self.status(app_id, summary=True).job.state
            if state in JOB_FINISHED:  # the AM's own words for a request it refuses once the job ended
                raise JobUnreachable(f"job {app_id} has ended ({state}): {cannot}")
            raise JobUnreachable(f"job {app_id} is {state}: its AM does not answer (yet)")
        return reply
