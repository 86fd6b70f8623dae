"""PrimusHook: the one place of the provider that knows Primus backends."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import time
from collections import deque
from collections.abc import Callable, Iterable
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, TypeAlias, overload

import aiohttp
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException

from airflow_provider_primus.backends import airflow_client_options
from airflow_provider_primus.events import LogCursor
from airflow_provider_primus.retries import READ_ERRORS, async_retrying, retrying
from primus_runtime import backends, protocol
from primus_runtime.api_client import (
    AMUnavailable,
    am_base_url,
    check_answer,
    transport_error,
    verifying_context,
)
from primus_runtime.backends.base import ClientOptions, ClusterClient
from primus_runtime.client import LOG_READ_ERRORS, JobNotFound, PrimusClient, read_status
from primus_runtime.home import default_home
from primus_runtime.models import (
    DataStatus,
    ExecutorView,
    JobEntry,
    ScaleReply,
    StatusDocument,
    StatusSummary,
)
from primus_runtime.spec import JobSpec, SpecError
from primus_runtime.states import JOB_ACTIVE, JOB_FINISHED

#: Keys of a ``primus`` connection's extra (declared as ``conn-fields`` in ``get_provider_info``): the
#: backend, each backend's own (its registry entry's ``connection_fields``), the data checkpoint root.
CONNECTION_FIELDS = ("backend", *dict.fromkeys(field.name for info in backends.BACKENDS.values()
                                               for field in info.connection_fields), "work_preserve_root")
#: Job states in which a job can still be reattached to (``lost``: the AM died without an outcome).
ACTIVE = JOB_ACTIVE
FINISHED = JOB_FINISHED

SpecLike: TypeAlias = JobSpec | dict[str, Any] | str | os.PathLike

#: A failed job's task log shows the stderr tail of each failed executor incarnation: this many
#: lines of each, for at most this many incarnations (the rest are named, with the command to read them).
FAILED_TAIL_LINES = 20
FAILED_TAIL_EXECUTORS = 10
#: What reading a failed executor's log may end with (a log gone with its pod, an unknown path...).
_LOG_READ_ERRORS: tuple[type[BaseException], ...] = (*LOG_READ_ERRORS, *READ_ERRORS)

#: (connection id, Primus home) pairs whose local fallback this process has announced already.
_ANNOUNCED_FALLBACKS: set[tuple[str, str]] = set()


class PrimusHook(BaseHook):
    """Submit, find, watch and control Primus jobs through a ``primus`` connection.

    The connection's extra holds ``backend`` (``local`` or ``yarn``; ``kubernetes`` is not
    available yet) and, for the local backend, ``home`` (the Primus home, default
    ``$PRIMUS_HOME``, else ``~/.primus``); for YARN ``hadoop_conf_dir`` (default
    ``$HADOOP_CONF_DIR``) and ``yarn_queue``. A spec that names no ``backend`` runs on the
    connection's.

    When the connection id is the default ``primus_default`` and no such connection exists, the
    hook uses the local backend with the default home, so the quickstart needs no setup. A
    connection id that is named explicitly must exist: when it does not, the error says how to
    create it (type, fields, a command). The fallback is logged once per task try, naming the home:
    by the try's first hook (once per process), not by its triggers nor the try resumed from them.

    :param primus_conn_id: the ``primus`` connection to use.
    :param timeout: seconds for each request to a job's Application Master.
    :param announce_fallback: log the fallback (see above); False where the try said it already.
    """

    conn_name_attr = "primus_conn_id"
    default_conn_name = "primus_default"
    conn_type = "primus"
    hook_name = "Primus"

    def __init__(self, primus_conn_id: str = default_conn_name, timeout: float = 10.0,
                 announce_fallback: bool = True) -> None:
        super().__init__()
        self.primus_conn_id = primus_conn_id
        self.timeout = timeout
        self.announce_fallback = announce_fallback

    # --- connection -------------------------------------------------------------

    @cached_property
    def settings(self) -> dict[str, Any]:
        """``backend`` and ``home`` from the connection (or the local defaults, see the class doc)."""
        try:
            conn = self.get_connection(self.primus_conn_id)
        except AirflowNotFoundException as exc:
            if self.primus_conn_id != self.default_conn_name:
                raise AirflowNotFoundException(missing_connection_message(self.primus_conn_id)) from exc
            if self.announce_fallback:
                self._announce_local_fallback()
            return dict.fromkeys(CONNECTION_FIELDS) | {"backend": backends.DEFAULT}
        extra = conn.extra_dejson

        def field(name: str) -> Any:  # forms may store the legacy prefixed key
            return extra.get(name) or extra.get(f"extra__primus__{name}") or None

        backend = field("backend") or backends.DEFAULT
        if backend not in backends.NAMES:
            raise AirflowException(f"connection {self.primus_conn_id!r}: backend must be one of "
                                   f"{list(backends.NAMES)}, got {backend!r}")
        return {name: field(name) for name in CONNECTION_FIELDS} | {"backend": backend}

    def _announce_local_fallback(self) -> None:
        """Say once per process (a task, the triggerer) which home the fallback uses: sensors make a
        hook per poke, and one line per poke drowned the task log."""
        home = default_home()
        key = (self.primus_conn_id, str(home))
        if key in _ANNOUNCED_FALLBACKS:
            return
        _ANNOUNCED_FALLBACKS.add(key)
        source = "$PRIMUS_HOME" if os.environ.get("PRIMUS_HOME") else "the default, as $PRIMUS_HOME is not set"
        self.log.info("No connection %r: using the local backend with Primus home %s (%s)",
                      self.primus_conn_id, home, source)

    @cached_property
    def client(self) -> PrimusClient:
        return PrimusClient(options=self.client_options(), timeout=self.timeout)

    def client_options(self) -> ClientOptions:
        """How the runtime's client reaches the connection's backend."""
        settings = self.settings
        # Every backend's options the connection sets (a client reaches any job whose id it is given),
        # then what the connection's backend adds (Kubernetes: through the cncf-kubernetes provider's hook).
        options = ClientOptions(**{field.client_option: settings[field.name] for info in backends.BACKENDS.values()
                                   for field in info.connection_fields if field.client_option})
        options = backends.get(settings["backend"]).client_options(settings, options)
        try:
            return airflow_client_options(settings["backend"], settings, options)
        except ImportError as exc:
            raise AirflowException(f"connection {self.primus_conn_id!r}: {exc}") from exc

    def get_conn(self) -> PrimusClient:
        return self.client

    # --- jobs -------------------------------------------------------------------

    def load_spec(self, spec: SpecLike, base_dir: str | os.PathLike | None = None) -> JobSpec:
        """A validated JobSpec (raises ``SpecError``). Relative paths (of a spec file, or the ``files``
        of a dict spec) are taken from ``base_dir`` when given."""
        if isinstance(spec, JobSpec):
            return spec
        if isinstance(spec, dict):
            return JobSpec.from_dict(spec, base_dir=Path(base_dir) if base_dir is not None else None)
        path = Path(spec).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = Path(base_dir) / path
        return JobSpec.from_file(path)

    def submit(self, spec: SpecLike, tags: dict[str, Any] | None = None,
               base_dir: str | os.PathLike | None = None) -> str:
        """Submit a job; its application id. ``tags`` are merged into (and win over) the spec's tags.

        Raises ``SpecError`` for a spec that cannot run (nothing was started)."""
        job = self.load_spec(spec, base_dir)
        if tags:
            job = job.model_copy(deep=True)  # never change the caller's JobSpec
            job.tags = {**job.tags, **{str(k): str(v) for k, v in tags.items()}}
        job = self.with_connection_defaults(job)
        if job.backend.type != self.settings["backend"]:
            raise SpecError([f"backend.type: connection {self.primus_conn_id!r} uses the "
                             f"{self.settings['backend']} backend, got {job.backend.type!r}"])
        app_id = self.client.submit(job)
        self.log.info("Submitted Primus job %s (%s)", app_id, job.name)
        return app_id

    def with_connection_defaults(self, job: JobSpec) -> JobSpec:
        """``job`` with the connection's backend settings where the spec left them out: a spec that
        names no backend runs where the connection points (one DAG, any cluster), and the
        connection's YARN queue, Kubernetes namespace and image fill what the spec's section omits."""
        settings = self.settings
        defaults = backends.get(settings["backend"]).spec_defaults(settings)
        if "backend" not in job.model_fields_set:
            section: dict[str, Any] = {"type": settings["backend"]}
        elif job.backend.type == settings["backend"]:
            section = job.backend.model_dump(mode="json", exclude_unset=True) | {"type": job.backend.type}
        else:
            return job  # refused by the caller, naming both backends
        section = defaults | section
        return job.model_copy(update={"backend": backends.get(section["type"]).settings.model_validate(section)})

    @overload
    def status(self, app_id: str, summary: Literal[False] = False) -> StatusDocument: ...

    @overload
    def status(self, app_id: str, summary: Literal[True]) -> StatusSummary: ...

    @overload
    def status(self, app_id: str, summary: bool) -> StatusSummary: ...

    def status(self, app_id: str, summary: bool = False) -> StatusSummary:
        """The job's ``StatusDocument``: ``job`` (state, reason, tags), ``roles``, ``executors`` and
        recent ``events``. Transient errors (``retries.is_transient``) are retried with backoff before
        one is raised.

        ``summary``: a ``StatusSummary``, without ``executors`` (their rows grow with the job; the roles
        count them by state), for callers that judge the job, its roles or its data only."""
        return retrying(f"Reading the status of Primus job {app_id}", self.log)(
            self.client.status, app_id, summary=summary)

    def find_jobs(self, tags: dict[str, Any] | None = None) -> list[JobEntry]:
        """Jobs carrying all ``tags`` (app_id, name, state, tags), newest first (transient errors retried)."""
        wanted = {str(k): str(v) for k, v in (tags or {}).items()}
        return retrying(f"Listing Primus jobs tagged {wanted}", self.log)(
            self.client.list, wanted, backend=self.settings["backend"])

    def kill(self, app_id: str, reason: str = "", timeout: float | None = None,
             wait: bool = True) -> StatusDocument | None:
        """Stop the job (graceful, then by force) and remove what it keeps on the cluster (on
        Kubernetes the AM pod and everything it owns); its final status. With ``wait=False`` only
        ask its AM to stop it (forcing it when no AM answers) and return None at once."""
        self.log.info("Killing Primus job %s: %s", app_id, reason or "no reason given")
        if wait:
            return self.client.kill(app_id, reason=reason, timeout=timeout, remove=True)
        self.client.stop(app_id, reason, remove=True)
        return None

    def scale(self, app_id: str, role: str, replicas: int) -> ScaleReply:
        """Resize ``role`` of a running job to ``replicas`` executors."""
        return self.client.scale(app_id, role, replicas)

    def suspend_data(self, app_id: str) -> DataStatus:
        """Stop handing out input tasks (executors finish those they hold); the data status."""
        return self.client.data_suspend(app_id)

    def resume_data(self, app_id: str) -> DataStatus:
        """Hand out input tasks again; the data status."""
        return self.client.data_resume(app_id)

    def tail_logs(self, app_id: str, role: str | None = None, index: int = 0, stream: str = "stdout",
                  lines: int = 20) -> str:
        """The last ``lines`` lines of an executor's log (``stream``: stdout/stderr/executor), or of the
        AM log when ``role`` is None."""
        path = self.client.log_path(app_id, role, index if role is not None else None, stream)
        tail: deque[str] = deque(maxlen=lines)
        pending = b""
        for chunk in self.client.follow_log(app_id, path):
            *complete, pending = (pending + chunk).split(b"\n")
            tail.extend(line.decode(errors="replace") for line in complete)
        if pending:
            tail.append(pending.decode(errors="replace"))
        return "\n".join(tail)

    def failed_executor_tails(self, app_id: str, status: StatusSummary, lines: int = FAILED_TAIL_LINES,
                              max_executors: int = FAILED_TAIL_EXECUTORS) -> list[str]:
        """What the failed executors of a job said: one text block per failed or lost incarnation, with
        the last ``lines`` lines of its stderr, at most ``max_executors`` of them, as ``primus status``
        shows a failed job (``PrimusClient.failed_executor_tails``)."""
        return self.client.failed_executor_tails(
            app_id, status, lines, max_executors, errors=_LOG_READ_ERRORS,
            warn=lambda message: self.log.warning("Primus: %s", message))

    def job_url(self, app_id: str, wait: float = 10.0) -> str | None:
        """The job's web page (served by its AM; it asks for the job token, or a one-time link from
        ``primus ui APP``), or None once the AM is gone. No secret: it goes to XCom and the task log.

        ``wait``: seconds to wait for a just-submitted AM to publish its address."""
        deadline = time.monotonic() + wait
        while True:
            url = self.client.cluster_for(app_id).am_web_url(app_id)
            if url is not None:
                return url + "ui/"
            if time.monotonic() > deadline or self.client.status(app_id, summary=True).job.state in FINISHED:
                return None
            time.sleep(0.1)

    def work_preserve_root(self) -> str:
        """Where the operator keeps data checkpoints of jobs it submits (one directory per task
        instance): the connection's ``work_preserve_root``; else ``<Primus home>/work-preserve``
        locally and ``hdfs:///user/<user>/.primus/work-preserve`` on YARN (where the AM runs on
        any node)."""
        configured = self.settings.get("work_preserve_root")
        if configured:
            return configured if "://" in configured else str(Path(configured).expanduser())
        return self.client.cluster(self.settings["backend"]).default_work_preserve_root()


def missing_connection_message(conn_id: str) -> str:
    """What to create when ``conn_id`` does not exist: its type, its fields, a command. The backend
    is guessed from the id (``primus_yarn``: yarn), as the example DAGs name connections so."""
    guessed = [info for info in backends.BACKENDS.values() if info.name in conn_id.lower()]
    shown = guessed[:1] or list(backends.BACKENDS.values())
    fields = "; ".join(f"{info.name}: " + ", ".join(f"{field.name} ({field.label})" for field in info.connection_fields)
                       for info in shown)
    # Not guessed: a cluster's (a connection named explicitly is rarely for this machine).
    example = json.dumps({"backend": shown[0].name if guessed else next(
        info.name for info in shown if not info.shares_files_with_client)})
    backends_shown = [info.name for info in shown]
    return (f"Airflow connection {conn_id!r} does not exist. Create it (Admin > Connections, or the CLI) with "
            f"connection type 'primus', the extra field backend ({' or '.join(backends_shown)}) and the fields "
            f"of that backend ({fields}; work_preserve_root is optional), for example: "
            f"airflow connections add {conn_id} --conn-type primus --conn-extra '{example}'")


class LogFollower:
    """Hands out the lines that executors' logs gained since the last copy.

    Follows the current incarnation of each executor (``worker-0``): after a restart it starts
    on the new incarnation's log. One rule caps what reaches the task log, however the task waits
    (in a worker slot it copies at every poll, deferred at each hand-off): at most
    ``lines_per_minute`` lines of each followed log a minute. A copy takes the newest lines up to
    what the time since the previous copy earned, plus at most a minute's worth saved up by quieter
    copies (a trainer's first lines, a burst), and counts the others in one line: a chatty trainer
    floods neither way, a quiet one's lines all arrive, and both ways copy alike over time.

    ``cursor()`` is where it stands (the executors followed; offsets of whole lines copied, keyed
    ``<executor>/<stream>@<incarnation>``; the allowance left; when it last copied): a follower made
    ``from_cursor`` carries on without repeating a line, as a task resumed from its trigger does.
    Short keys, not the logs' paths: the cursor travels through the trigger and back in its event,
    which Airflow logs whole.
    """

    def __init__(self, executors: Iterable[str], streams: tuple[str, ...] = ("stdout", "stderr"),
                 lines_per_minute: int = 60, clock: Callable[[], float] = time.time) -> None:
        if lines_per_minute < 1:
            raise ValueError(f"log_lines_per_minute must be >= 1, got {lines_per_minute!r}")
        self.executors = list(executors)
        self.streams = streams
        self.lines_per_minute = lines_per_minute
        self.clock = clock
        self.offsets: dict[str, int] = {}
        self._allowance: dict[str, float] = {}  # <executor>/<stream> -> lines it may copy now
        self._skipped: dict[str, int] = {}  # <executor>/<stream> -> lines skipped, not yet said
        self._failing: set[str] = set()  # logs whose last read failed (said once)
        self._copied_at = clock()

    def cursor(self) -> LogCursor:
        """Where the follower stands (see the class)."""
        return LogCursor(executors=list(self.executors), offsets=dict(self.offsets),
                         allowance={log: round(left, 2) for log, left in self._allowance.items()},
                         skipped=dict(self._skipped), copied_at=round(self._copied_at, 2))

    @classmethod
    def from_cursor(cls, cursor: LogCursor, lines_per_minute: int = 60,
                    clock: Callable[[], float] = time.time) -> LogFollower:
        follower = cls(cursor.executors, lines_per_minute=lines_per_minute, clock=clock)
        follower.offsets = dict(cursor.offsets)
        follower._allowance = dict(cursor.allowance)
        follower._skipped = dict(cursor.skipped)
        follower._copied_at = cursor.copied_at
        return follower

    def new_lines(self, hook: PrimusHook, app_id: str, status: StatusSummary, final: bool = False) -> list[str]:
        """The new lines of the followed executors' logs; ``status`` is a full status (a
        ``StatusDocument``), or a summary (``status(summary=True)``: then the followed executors' rows
        are asked for, only theirs). ``final``: the last copy (the job ended), which says every skip
        not said yet."""
        if not self.executors:
            return []
        rows = status.executors if isinstance(status, StatusDocument) else self._followed_rows(hook, app_id)
        by_id = {ex.id: ex for ex in rows}
        now = self.clock()
        elapsed, self._copied_at = max(0.0, now - self._copied_at), now
        out: list[str] = []
        for executor_id in self.executors:
            row = by_id.get(executor_id)
            if row is None:
                continue
            for stream in self.streams:
                if stream in row.logs:
                    key = f"{executor_id}/{stream}@{row.incarnation}"
                    lines = self._read(hook, app_id, row.logs[stream], key, retry=final)
                    out.extend(self._within_allowance(app_id, executor_id, stream, lines, elapsed, final))
        return out

    def _followed_rows(self, hook: PrimusHook, app_id: str) -> list[ExecutorView]:
        try:
            return list(hook.client.executors(app_id, ids=self.executors).executors)
        except _LOG_READ_ERRORS as exc:  # a courtesy, as reading the logs: the next call tries again
            hook.log.warning("Cannot read the executors %s of Primus job %s to follow their logs: %s",
                             ", ".join(self.executors), app_id, exc)
            return []

    def _read(self, hook: PrimusHook, app_id: str, path: str, key: str, retry: bool = False) -> list[str]:
        """The whole new lines of one log (``retry``, the last copy: its unfinished line too). A log
        not written yet reads empty (every backend's ``read_log``); a failed read is said, and tried
        again by the next call, or here once more when there is no next call (``retry``)."""
        start = self.offsets.get(key, 0)
        for last_try in ((False, True) if retry else (True,)):
            try:
                chunk = hook.client.cluster_for(app_id).read_log(app_id, path, start)
                break
            except _LOG_READ_ERRORS as exc:
                if key not in self._failing or not last_try:  # once while it fails, not at every poll
                    hook.log.warning("Cannot read the log %s of Primus job %s%s: %s", key.partition("@")[0],
                                     app_id, "" if last_try else " (trying again in a second)", exc)
                if last_try:
                    self._failing.add(key)
                    return []
                time.sleep(1.0)
        self._failing.discard(key)
        # An unfinished last line stays unread: the next call (or the next follower) reads it whole;
        # at the last copy (``retry``) none comes, and a trainer's last words often lack a newline.
        *complete, unfinished = chunk.split(b"\n")
        self.offsets[key] = start + sum(len(line) + 1 for line in complete)
        if retry and unfinished:
            complete.append(unfinished)
            self.offsets[key] += len(unfinished)
        return [line.decode(errors="replace") for line in complete]

    def _within_allowance(self, app_id: str, executor_id: str, stream: str, lines: list[str],
                          elapsed: float, final: bool) -> list[str]:
        """The newest of ``lines`` the log's allowance covers, after a line counting the rest."""
        log = f"{executor_id}/{stream}"
        rate = self.lines_per_minute
        earned = self._allowance.get(log, rate) + rate * elapsed / 60
        allowance = min(earned, rate * (1 + elapsed / 60))
        keep = min(len(lines), int(allowance))
        self._allowance[log] = allowance - keep
        skipped = self._skipped.pop(log, 0) + len(lines) - keep
        if keep == 0 and not final:  # said with the next lines copied, not at each poll of a chatty trainer
            if skipped:
                self._skipped[log] = skipped
            return []
        prefix = f"[{executor_id} {stream}] "
        out = [prefix + line for line in lines[len(lines) - keep:]]
        if skipped:
            role, _, index = executor_id.rpartition("-")
            out.insert(0, f"{prefix}... {skipped} lines skipped (over {rate} a minute), the newest {keep} follow "
                          f"(all: primus logs {app_id} --role {role} --index {index} --stream {stream})")
        return out


class PrimusAsyncHook(PrimusHook):
    """``PrimusHook`` for triggers: status reads and kill requests over asynchronous HTTP.

    Nothing blocking runs on the triggerer's event loop: talking to the AM is asynchronous, and what
    is not (reading the connection, the first use of a backend's client, which imports it and reads
    its configuration, the AM's address and CA files, loading that CA into a TLS context, parsing an
    answer, the status a finished job left behind) runs in a worker thread.
    """

    def __init__(self, primus_conn_id: str = PrimusHook.default_conn_name, timeout: float = 10.0,
                 announce_fallback: bool = False) -> None:
        # A trigger runs for a task whose try announced the fallback already (see PrimusHook).
        super().__init__(primus_conn_id=primus_conn_id, timeout=timeout, announce_fallback=announce_fallback)
        self._session: aiohttp.ClientSession | None = None
        self._tls: dict[str, ssl.SSLContext] = {}  # CA file -> its context, loaded once

    async def _client(self) -> PrimusClient:
        # Reading the connection may touch the metadata DB or a secrets backend: off the loop.
        if "client" not in self.__dict__:
            await asyncio.to_thread(lambda: self.client)
        return self.client

    async def _api(self, app_id: str, method: str, path: str, body: dict[str, Any] | None = None
                   ) -> bytes | dict[str, Any] | None:
        """The AM's JSON answer, or None when no AM serves the job (any more): its bytes as they came
        (read in a worker thread by the caller, ``read_status``), or parsed when a cluster's proxy
        carried it (``ClusterClient.am_request``)."""
        client = await self._client()
        cluster = await asyncio.to_thread(client.cluster_for, app_id)
        if not cluster.am_reachable_directly:  # through the cluster's proxy, with its own client
            return await asyncio.to_thread(cluster.am_request, app_id, method, path, body, self.timeout)
        try:
            endpoint, ca_file, tls = await asyncio.to_thread(self._where, cluster, app_id)
        except KeyError:
            raise JobNotFound(app_id) from None
        if endpoint is None:
            return None
        address, token = endpoint
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        url = f"{am_base_url(address, ca_file)}{protocol.API_PREFIX}{path}"
        try:
            async with self._session.request(method, url, json=body, headers={"Authorization": f"Bearer {token}"},
                                             ssl=tls) as response:
                data = await response.read()
        except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as exc:
            error = transport_error(address, exc)  # the same meaning as the runtime's AMClient gives it
            if isinstance(error, AMUnavailable):
                return None  # the AM just exited: its final status is on disk
            raise error from None
        try:
            check_answer(response.status, data)
        except AMUnavailable:
            return None  # as ClusterClient.am_request: an AM that cannot serve is an AM that does not answer
        return data

    def _where(self, cluster: ClusterClient, app_id: str
               ) -> tuple[tuple[str, str] | None, str | None, ssl.SSLContext | bool]:
        """(The AM's endpoint, the job's CA file, what aiohttp verifies the AM with), by blocking
        calls: in a worker thread. ``KeyError``: no such job."""
        endpoint = cluster.am_endpoint(app_id)
        ca_file = cluster.am_ca_file(app_id)
        if not ca_file:
            return endpoint, None, True
        if ca_file not in self._tls:
            self._tls[ca_file] = verifying_context(ca_file)
        return endpoint, ca_file, self._tls[ca_file]

    @overload
    async def astatus(self, app_id: str, summary: Literal[False] = False) -> StatusDocument: ...

    @overload
    async def astatus(self, app_id: str, summary: Literal[True]) -> StatusSummary: ...

    @overload
    async def astatus(self, app_id: str, summary: bool) -> StatusSummary: ...

    async def astatus(self, app_id: str, summary: bool = False) -> StatusSummary:
        """Same as ``status`` (transient errors retried), without blocking the event loop."""
        return await async_retrying(f"Reading the status of Primus job {app_id}", self.log)(
            self._astatus, app_id, summary)

    async def _astatus(self, app_id: str, summary: bool) -> StatusSummary:
        reply = await self._api(app_id, "GET", "/status?view=summary" if summary else "/status")
        if reply is None:
            client = await self._client()
            document = await asyncio.to_thread(client.status_without_am, app_id)
            return document.summary() if summary else document  # as PrimusClient.status
        # A full status grows with the job's executors: megabytes of JSON for a large one, validated
        # off the loop (from its bytes: faster than parsing, then validating).
        return await asyncio.to_thread(read_status, reply, summary)

    async def akill(self, app_id: str, reason: str = "") -> None:
        """Ask the job's AM to stop the job (force-kill it when no AM answers), then remove what it keeps
        on the cluster (on Kubernetes the AM pod and everything it owns)."""
        self.log.info("Killing Primus job %s: %s", app_id, reason or "no reason given")
        client = await self._client()
        # The runtime client's kill sequence, in a thread: a kill is rare, and one sequence is kept.
        await asyncio.to_thread(client.stop, app_id, reason or "killed by Airflow", remove=True)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
