"""The two halves every backend (local, YARN, Kubernetes) implements.

``ExecutorBackend`` runs inside the AM: it turns "launch executor worker-3,
incarnation X, with these resources, command and env" into a process,
container or pod, kills it, and reports back when it is launched and when it
exits (exit code, reason, whether it was preempted).

``ClusterClient`` runs where jobs are submitted from (the CLI, Airflow): it
starts the AM, finds a job by id or tags, reads its status and logs, and
kills it even when the AM is gone.

``JobStore`` is where an AM publishes its address and saves its status, for the
``ClusterClient`` to read (a job directory, HDFS, a ConfigMap).
"""

from __future__ import annotations

import abc
import asyncio
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import protocol
from ..api_client import AMClient, AMUnavailable, am_base_url
from ..models import JobEntry
from ..spec import JobSpec, Resources


@dataclass(frozen=True)
class ClientOptions:
    """How the client reaches the backends (the CLI's flags, an Airflow connection's fields).
    Each backend reads the fields it needs."""

    home: str | None = None  # the Primus home: local jobs, cached bundles
    hadoop_conf_dir: str | None = None  # YARN: the cluster's client configuration
    # YARN on a Kerberized cluster: SPNEGO from this keytab (default $PRIMUS_KERBEROS_PRINCIPAL and
    # $PRIMUS_KERBEROS_KEYTAB; a spec's backend.principal/keytab win for its submit).
    kerberos_principal: str | None = None
    kerberos_keytab: str | None = None
    kube_config: str | None = None  # Kubernetes: a kubeconfig file (default: in-cluster, else ~/.kube/config)
    kube_context: str | None = None
    namespace: str | None = None  # Kubernetes: where jobs are submitted (a spec's backend.namespace wins)
    kube_api_client: Any = None  # Kubernetes: a ready kubernetes.client.ApiClient (Airflow's KubernetesHook)


@dataclass(frozen=True)
class LaunchRequest:
    role: str
    index: int
    incarnation: str
    attempt: int
    resources: Resources
    env: dict[str, str]  # protocol.ENV_* for the executor process
    files: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Launched:
    """Where an executor landed: its host and where its logs are."""

    role: str
    index: int
    incarnation: str
    host: str
    gpus: list[int]
    logs: dict[str, str]
    pid: int | None = None  # the executor's process, where the backend knows it (local)


@dataclass(frozen=True)
class Adoption:
    """An executor an earlier AM attempt launched, for the new attempt to take over."""

    role: str
    index: int
    incarnation: str
    attempt: int
    pid: int | None  # as it registered (or the backend reported at launch)
    resources: Resources
    gpus: list[int]
    logs: dict[str, str]


@dataclass(frozen=True)
class Exited:
    role: str
    index: int
    incarnation: str
    exit_code: int | None
    reason: str
    preempted: bool = False


def role_env(spec: JobSpec, role_name: str) -> dict[str, str]:
    """The executor environment that is the same for every executor of a role (a backend that
    starts executors before the AM runs sets it from the spec too)."""
    preemption = spec.role(role_name).preemption
    optional = {protocol.ENV_PREEMPTION_NOTICE_FILE: preemption.notice_file,
                protocol.ENV_PREEMPTION_SIGNAL: preemption.signal,
                protocol.ENV_PREEMPTION_GRACE: None if preemption.grace is None else str(preemption.grace)}
    return {
        protocol.ENV_ROLE: role_name,
        protocol.ENV_NUM_PORTS: str(spec.role(role_name).ports),
        protocol.ENV_HEARTBEAT_TIMEOUT: str(spec.am.heartbeat_timeout),
        protocol.ENV_AM_RECOVERY_GRACE: str(spec.executor_patience),
        protocol.ENV_KILL_GRACE: str(spec.am.shutdown_grace),
        **{name: value for name, value in optional.items() if value is not None},
        **({protocol.ENV_STORAGE_OUTAGE_TIMEOUT: str(spec.input.storage_outage_timeout)} if spec.input else {}),
    }


def launch_env(spec: JobSpec, app_id: str, role: str, index: int, incarnation: str, am_address: str) -> dict[str, str]:
    """The environment of one executor incarnation (the AM's launches, and a backend that starts
    the first executors with the job before its AM runs)."""
    return {
        protocol.ENV_AM_ADDRESS: am_address,
        protocol.ENV_APP_ID: app_id,
        protocol.ENV_INDEX: str(index),
        protocol.ENV_INCARNATION: incarnation,
        **role_env(spec, role),
    }


def launched_at_start(spec: JobSpec) -> dict[str, int]:
    """Roles whose executors the AM launches the moment it starts, and how many: every role, or the
    first of an ``ordered`` start. A backend may start these with the job itself, before the AM
    runs (it then names their first incarnations through ``ExecutorBackend.incarnation_for``)."""
    first = spec.start_order()[:1] if spec.scheduling.policy == "ordered" else spec.start_order()
    return {name: spec.role(name).replicas for name in first}


class BackendEvents(abc.ABC):
    """Callbacks the AM gives its ExecutorBackend (called on the AM's event loop)."""

    @abc.abstractmethod
    def on_launched(self, launched: Launched) -> None: ...

    @abc.abstractmethod
    def on_exited(self, exited: Exited) -> None: ...


class ExecutorBackend(abc.ABC):
    """Launches and kills executors for one job; lives inside the AM."""

    #: Moves on each time ``credentials()`` changes: executors that report an older one get them.
    credentials_version = 0
    #: Whether executors go on running when the AM dies (local, Kubernetes), for a new attempt to adopt.
    #: False on YARN through skein: every container ends with the application attempt, so a new attempt
    #: counts every executor of the journal as gone, even one the journal's copy still has as new.
    executors_outlive_am = True

    def credentials(self) -> dict[str, str]:
        """Environment values every executor must use from now on (names of ``protocol.CREDENTIAL_ENV``):
        what the backend renews while the job runs. Default: none."""
        return {}

    @abc.abstractmethod
    async def start(self, events: BackendEvents) -> None:
        """Connect to the resource manager; events are delivered from now on."""

    @abc.abstractmethod
    def check_fits(self, role: str, resources: Resources) -> str | None:
        """Why one executor with these resources can never run here, or None."""

    def incarnation_for(self, role: str, index: int) -> str | None:
        """The name of an executor's first incarnation when the backend started it before the AM
        could ask (YARN starts the first containers with the application), else None."""
        return None

    def pending_reason(self, incarnation: str) -> str | None:
        """Why an executor asked for is not running yet (e.g. "waits for memory: needs 8Gi, 2Gi free
        of 16Gi"), for a start barrier that times out; None when the backend cannot tell."""
        return None

    @abc.abstractmethod
    async def launch(self, request: LaunchRequest) -> None:
        """Ask for the executor; ``on_launched`` follows once it runs (maybe after
        queueing for resources), ``on_exited`` once it ends."""

    @abc.abstractmethod
    async def stop(self, role: str, index: int, incarnation: str, force: bool) -> None:
        """Stop an executor: gracefully (it forwards SIGTERM to its trainer) or by force."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Force-stop every executor still running and release the resources."""

    async def adopt(self, executors: list[Adoption]) -> set[str]:
        """A restarted AM takes over executors an earlier attempt launched: watch the ones still
        running as if launched now (``on_exited`` when they end) and return their incarnations. The
        others are treated as gone (ended uncharged, replaced), or launched now if they never were.
        Default: a backend that cannot find them again adopts none."""
        return set()

    async def read_log(self, path: str, offset: int, limit: int) -> tuple[bytes, int | None]:
        """Up to ``limit`` bytes of an executor's log (a path from its ``logs``) from ``offset``
        (negative: that many bytes before the end), and the log's size. Default: a local file."""
        return await asyncio.to_thread(read_file_slice, path, offset, limit)


def read_file_slice(path: str, offset: int, limit: int) -> tuple[bytes, int | None]:
    try:
        with open(path, "rb") as log:
            size = os.fstat(log.fileno()).st_size
            log.seek(max(0, size + offset) if offset < 0 else offset)
            return log.read(limit), size
    except FileNotFoundError:
        return b"", None


def slice_log(data: bytes, offset: int, limit: int) -> tuple[bytes, int]:
    """``read_log`` of a backend that can only read a log whole."""
    start = max(0, len(data) + offset) if offset < 0 else offset
    return data[start:start + limit], len(data)


class ClusterClient(abc.ABC):
    """Submit and find jobs from outside the cluster."""

    #: Whether ``am_endpoint``'s address answers from where the client runs (else only
    #: ``am_request`` reaches the AM, e.g. through the Kubernetes API server's proxy).
    am_reachable_directly: bool = True

    @abc.abstractmethod
    def location(self) -> str:
        """Where this client looks for jobs, for messages (a directory, a cluster's address)."""

    @abc.abstractmethod
    def submit(self, spec: JobSpec) -> str:
        """Start the job's AM; return the application id."""

    @abc.abstractmethod
    def exists(self, app_id: str) -> bool:
        """Whether this backend knows the job."""

    @abc.abstractmethod
    def spec(self, app_id: str) -> JobSpec:
        """The spec the job was submitted with."""

    @abc.abstractmethod
    def am_alive(self, app_id: str) -> bool:
        """Whether the job's AM runs (or is still starting)."""

    @abc.abstractmethod
    def am_endpoint(self, app_id: str) -> tuple[str, str] | None:
        """(``host:port`` of the AM API, token), or None once the AM is gone."""

    def am_ca_file(self, app_id: str) -> str | None:
        """The job's CA certificate (a PEM file) when its AM serves TLS (``am.tls``), else None."""
        return None

    def am_request(self, app_id: str, method: str, path: str, body: dict[str, Any] | None,
                   timeout: float, user: str | None = None) -> dict[str, Any] | None:
        """The AM's JSON answer to ``method path`` (``path`` below ``/api/v1``), asked as ``user`` (the
        name the AM records with an action; none: ``token``); None when the AM is not running or does
        not answer. ``AMRejected`` for a 4xx. Default: straight to ``am_endpoint``; a backend whose
        AM is not reachable from outside overrides it."""
        endpoint = self.am_endpoint(app_id)
        if endpoint is None:
            return None
        client = AMClient(*endpoint, ca_file=self.am_ca_file(app_id), user=user)
        try:
            return client.request(method, protocol.API_PREFIX + path, body, timeout=timeout)
        except AMUnavailable:
            return None
        finally:
            client.close()

    def am_web_url(self, app_id: str) -> str | None:
        """Where a browser sees the AM's status page (``/``), or None when the AM is not running."""
        endpoint = self.am_endpoint(app_id)
        return f"{am_base_url(endpoint[0], self.am_ca_file(app_id))}/" if endpoint is not None else None

    def cli_command(self, *args: str) -> str:
        """A shell command running ``primus ARGS`` against this cluster: with the options and the
        environment the CLI needs to find its jobs (the local home, the Hadoop configuration, the
        namespace), for messages that tell a person what to type."""
        return shlex.join(["primus", *args])

    def app_page_url(self, app_id: str) -> str | None:
        """The cluster's own web page of the job (YARN: the ResourceManager's application page), which
        outlives the AM; None where the cluster has none. Built from configuration, no request."""
        return None

    @abc.abstractmethod
    def final_status(self, app_id: str) -> dict[str, Any] | None:
        """The status the AM left when it finished, if it has."""

    @abc.abstractmethod
    def last_status(self, app_id: str) -> dict[str, Any] | None:
        """The latest status the AM saved (a snapshot, maybe not final)."""

    def am_gone_reason(self, app_id: str) -> str | None:
        """Why the job has no AM any more, when what restarts AMs said so (its attempts used up); None:
        not known here."""
        return None

    @abc.abstractmethod
    def list_jobs(self, tags: dict[str, str] | None = None) -> list[JobEntry]:
        """Known jobs (newest first), optionally only those carrying all ``tags``."""

    @abc.abstractmethod
    def force_kill(self, app_id: str) -> int:
        """Kill every process or container of the job without the AM; return how many."""

    @abc.abstractmethod
    def default_work_preserve_root(self) -> str:
        """Where data checkpoints go when the user names no place (an AM on any node must reach it)."""

    def remove(self, app_id: str) -> None:  # noqa: B027 - most backends keep nothing running after the end
        """Remove what a job keeps on the cluster after it ended or was asked to stop (Airflow's
        kill: nothing may stay behind). Its status is gone afterwards where the cluster held it."""

    @abc.abstractmethod
    def am_log(self, app_id: str) -> str:
        """Where the AM's log is, for ``read_log``."""

    def am_log_attempts(self, app_id: str) -> list[bytes] | None:
        """What each AM attempt wrote to its log, in order (the first attempt's first); None where the
        backend reads only the latest attempt's (``am_log``)."""
        return None

    def executor_log(self, app_id: str, role: str, index: int, stream: str) -> str | None:
        """The log of the executor's latest incarnation when the status names none (the AM is gone)."""
        return None

    @abc.abstractmethod
    def read_log(self, app_id: str, path: str, offset: int = 0) -> bytes:
        """Bytes of one log file from ``offset`` (a path from the executor's ``logs``)."""

    def history_file(self, app_id: str, name: str) -> bytes | None:
        """A file of a finished job's history (``JobStore.save_history``), None where not kept."""
        return None



class JobStore(abc.ABC):
    """Where the AM tells clients its API address and leaves its status (the ``ClusterClient``
    of the same backend reads both). The AM writes its status to a local file; a store whose
    clients cannot read that file copies it (``save_status``) periodically and once at the end."""

    #: Seconds between copies of a changed status while the job runs (None: no copies needed).
    mirror_interval: float | None = None

    @abc.abstractmethod
    def publish_address(self, address: str) -> None:
        """Tell clients where the AM's API listens (``host:port``)."""

    def save_status(self, document: bytes, final: bool) -> None:  # noqa: B027 - most stores need no copy
        """Keep the status document where clients read it once the AM is gone."""

    def save_history(self, files: dict[str, Path]) -> None:  # noqa: B027 - most stores need no copy
        """Keep the files of the job's history page (event log, task and partition tables, by name)
        where ``ClusterClient.history_file`` reads them once the AM is gone."""
