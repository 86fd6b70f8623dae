"""The job spec: everything a user writes to describe a Primus job.

One module of small, strictly validated pydantic types, read top to bottom:

    JobSpec
      roles: [Role]            who runs (ps, worker, chief, evaluator, ...)
        resources: Resources   cpu, memory, gpu per executor
        failover: Failover     what to do when one of its executors ends badly
        placement: Placement   anti-affinity to other roles
        readiness: Readiness   when a started trainer counts as ready (ordered start waits for it)
        preemption: Preemption how a node's preemption notice reaches the executor (it then drains)
        autoscale: Autoscale   a consuming role sized on the input's backlog
      scheduling: Scheduling   when trainers may start (gang / ordered / dynamic)
      am: AMSettings           heartbeats, shutdown grace, AM attempts
      backend: Local | Yarn | Kubernetes
      input: InputSpec | None  the data the AM hands out (see the data plane)

Unknown keys and bad values are rejected with the path and the value, e.g.
``roles[1].failover.max_failures_per_index: must be >= 0, got -2``, before
anything is submitted. ``JobSpec.json_schema()`` exports the JSON Schema.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, Field, ValidationError, field_validator, model_validator

from .backends import catalogue
from .partitions import DAY_RE, HOUR_RE, partition_hour
from .spec_types import (
    SIZE_RULE,
    BackendSettings,
    ByteSize,
    Name,
    Seconds,
    SpecError,
    StrictModel,
    _stringify_env,
    format_memory,
)

__all__ = [
    "AMSettings",
    "Autoscale",
    "Failover",
    "FileSource",
    "InputSpec",
    "KafkaSource",
    "JobSpec",
    "Placement",
    "Readiness",
    "Resources",
    "Role",
    "Scheduling",
    "SpecError",
    "TimeRange",
    "load_spec",
]

PS_ROLE_NAMES = frozenset({"ps", "parameter_server", "parameter-server"})
# Shell convention: 126 the command is not executable, 127 it does not exist.
DEFAULT_PERMANENT_EXIT_CODES = (126, 127)


# --- roles -------------------------------------------------------------------


class Resources(StrictModel):
    """What one executor of the role gets."""

    cpu: float = Field(1.0, gt=0, description="Virtual cores per executor.")
    memory: ByteSize = Field(
        "1Gi", validate_default=True, description="Memory per executor, e.g. '2Gi', '512Mi'. " + SIZE_RULE
    )
    gpu: int = Field(0, ge=0, description="GPUs per executor; shown to the trainer as CUDA_VISIBLE_DEVICES.")


class Failover(StrictModel):
    """What happens when an executor of the role ends other than by success.

    Roles named ``ps`` default to ``restart: never`` (a lost parameter server
    loses model state, so its failure fails the job); every other role
    defaults to ``restart: on_failure`` with 3 failures per index.
    """

    restart: Literal["never", "on_failure", "always"] = Field(
        "on_failure",
        description="never: a failure exhausts the budget at once; on_failure: restart failed "
        "executors; always: restart even executors that exit 0 (services).",
    )
    max_failures_per_index: int = Field(
        3, ge=0, description="Charged failures one executor index may have before the budget is exhausted."
    )
    max_failures_per_role: int | None = Field(
        None, ge=0, description="Charged failures across all indices of the role; unset = no role-wide cap."
    )
    on_exhausted: Literal["fail_job", "ignore_role"] = Field(
        "fail_job",
        description="fail_job: the job fails with the reason; ignore_role: the index stays down and "
        "the role no longer counts towards the job's success.",
    )
    preemption_exit_codes: list[int] = Field(
        default_factory=list,
        description="Exit codes that mean 'preempted or evicted': restarted without being charged. "
        "Backends also flag preemptions they detect themselves.",
    )
    permanent_exit_codes: list[int] = Field(
        default_factory=lambda: list(DEFAULT_PERMANENT_EXIT_CODES),
        description="Exit codes that can never succeed on a retry (126/127: the command cannot be run, "
        "by shell convention): the index is not restarted and on_exhausted applies at once.",
    )
    retryable_exit_codes: list[int] | None = Field(
        None,
        description="Exit codes worth a restart. Unset: every non-zero code that is not permanent; "
        "set: codes outside it (and outside preemption_exit_codes) are permanent.",
    )

    @model_validator(mode="after")
    def _exit_code_classes_are_disjoint(self) -> Failover:
        classes = {"preemption_exit_codes": self.preemption_exit_codes,
                   "permanent_exit_codes": self.permanent_exit_codes,
                   "retryable_exit_codes": self.retryable_exit_codes or []}
        for name, codes in classes.items():
            if 0 in codes:
                raise ValueError(f"{name}: exit code 0 is success, never a failure, got {codes}")
        names = list(classes)
        for i, first in enumerate(names):
            for second in names[i + 1:]:
                both = sorted(set(classes[first]) & set(classes[second]))
                if both:
                    field, other = (second, first) if second in self.model_fields_set else (first, second)
                    default = "" if other in self.model_fields_set else f" (default {classes[other]})"
                    raise ValueError(f"{field}: exit codes {both} are also in {other}{default}, "
                                     f"got {classes[field]}; a code belongs to one class")
        return self

    def is_preemption(self, exit_code: int | None) -> bool:
        """Whether ``exit_code`` says the executor was preempted (never charged)."""
        return exit_code is not None and exit_code in self.preemption_exit_codes

    def is_permanent(self, exit_code: int | None) -> bool:
        """Whether a failure with ``exit_code`` can never succeed on a restart (None: no exit code,
        e.g. a lost executor, is always worth a retry)."""
        if exit_code is None or self.is_preemption(exit_code):
            return False
        if exit_code in self.permanent_exit_codes:
            return True
        return self.retryable_exit_codes is not None and exit_code not in self.retryable_exit_codes


class Placement(StrictModel):
    """Where executors of the role may run relative to others."""

    anti_affinity: list[str] = Field(
        default_factory=list,
        description="Role names (this role's own name included) whose executors must not share a "
        "node with this role's. Honoured by multi-node backends; one node locally.",
    )


class Readiness(StrictModel):
    """When a started trainer counts as ready: what an ordered start waits for before it
    launches the next role, and what a job waits for before it is ``running``."""

    probe: Literal["auto", "spawned", "ports", "file"] = Field(
        "auto",
        description="spawned: once the trainer process started; ports: once every port of "
        "PRIMUS_PORTS accepts TCP connections; file: once the trainer created the file named by "
        "PRIMUS_READY_FILE (primus_runtime.trainer_api.ready() does it). auto: ports for a role with "
        "ports that another role waits on in an ordered start (every role but the last of "
        "scheduling.order), spawned otherwise.",
    )
    timeout: Seconds | None = Field(
        None, description="A trainer not ready this long after it started fails the job. "
        "Default: scheduling.start_timeout."
    )


# Signals a preemption notice cannot be: uncatchable, or what the executor hears about its trainer.
_NOT_NOTICE_SIGNALS = ("SIGKILL", "SIGSTOP", "SIGCHLD")


class Preemption(StrictModel):
    """How the node tells the executor it is going away. On a notice (SIGTERM, ``signal``, ``notice_file``
    appearing, or ``POST /executors/{id}/drain``) the executor drains: it takes no more input tasks,
    stops feeding records, sends SIGTERM to the trainer and gives it ``grace`` seconds to checkpoint and
    exit, reports its exact positions (its tasks move to other executors at once) and exits as
    preempted: restarted, never charged to the failure budget."""

    notice_file: str | None = Field(
        None, min_length=1, description="A path on the node the executor checks every heartbeat; once it "
        "exists (a node termination handler or spot-instance agent writes it), the executor drains.",
    )
    signal: str | None = Field(
        None, description="A signal that is a notice besides SIGTERM, e.g. SIGUSR1 (name, with or without SIG).",
    )
    grace: Seconds | None = Field(
        None, description="Seconds the trainer gets after SIGTERM before SIGKILL. Default: am.shutdown_grace.",
    )

    @field_validator("signal")
    @classmethod
    def _signal_name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        name = value.upper() if value.upper().startswith("SIG") else "SIG" + value.upper()
        known = sorted(s.name for s in signal.Signals if s.name.startswith("SIG") and not s.name.startswith("SIG_"))
        if name not in known:
            raise ValueError(f"no signal {value!r} (e.g. SIGUSR1, SIGUSR2, SIGHUP)")
        if name in _NOT_NOTICE_SIGNALS:
            raise ValueError(f"{name} cannot be a preemption notice (it cannot be caught, or the executor "
                             f"needs it), got {value!r}")
        return name


AUTOSCALE_TARGETS = ("target_lag", "target_queued", "target_catchup")


class Autoscale(StrictModel):
    """Sizes a role that consumes the input on its backlog: what is left to read, and how fast it goes.

    Every ``interval`` the AM works out the replicas the target asks for, clamped to
    ``min_replicas..max_replicas``, and scales the role through its own scaling path (as
    ``primus scale`` does: added executors start as they register, whatever the start policy, and
    every executor is told the new membership; removed ones hand their tasks back at their positions).
    It changes the role at most once per ``cooldown`` (counted from the job's start too): up at once,
    down only once the backlog has asked for fewer replicas for a whole cooldown (then to the most it
    asked for in that time), or at once when a file input is finishing (every partition listed, the
    backlog falling). Each change is an event of ``role/NAME`` (actor ``autoscaler``) whose reason names
    the backlog and the target; the role's status shows the policy and the last decision. A user's
    ``scale`` outside the bounds is brought back within them at the next change.

    With both file sources and Kafka (files first), ``target_queued`` applies while the files are read
    and ``target_lag`` once Kafka is; ``target_catchup`` applies to both.
    """

    min_replicas: int = Field(ge=1, description="Fewest executors (0 would stop reading the input).")
    max_replicas: int = Field(ge=1, description="Most executors.")
    target_lag: int | None = Field(
        None, gt=0, description="Kafka: records of consumer lag per replica (replicas = ceil(lag / target_lag)).")
    target_queued: ByteSize | None = Field(
        None, description="Files: bytes of listed tasks not read yet per replica (replicas = ceil(queued / "
        "target_queued)), e.g. '1Gi'. " + SIZE_RULE)
    target_catchup: Seconds | None = Field(
        None, description="Files or Kafka: seconds the backlog may take to drain at the rate one replica reads "
        "(replicas = ceil(backlog / (rate per replica * target_catchup))); no change until a rate is measured.")
    cooldown: Seconds = Field(60.0, description="No change within this long of the previous one or of the "
                              "job's start; also how long the backlog must ask for fewer replicas before a scale-down.")
    interval: Seconds = Field(5.0, description="How often the backlog is compared with the target.")

    @model_validator(mode="after")
    def _one_target_and_ordered_bounds(self) -> Autoscale:
        given = {name: getattr(self, name) for name in AUTOSCALE_TARGETS if getattr(self, name) is not None}
        if len(given) != 1:
            spelled = {k: format_memory(v) if k == "target_queued" else v for k, v in given.items()}
            shown = ", ".join(f"{k}: {v!r}" for k, v in spelled.items()) or "none"
            raise ValueError(f"give exactly one of target_lag (Kafka), target_queued (files) or target_catchup, "
                             f"got {shown}")
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"max_replicas: must be >= min_replicas ({self.min_replicas}), got {self.max_replicas}")
        return self

    @property
    def target(self) -> str:
        """The name of the target given (``target_lag``, ``target_queued`` or ``target_catchup``)."""
        return next(name for name in AUTOSCALE_TARGETS if getattr(self, name) is not None)


class Role(StrictModel):
    """One kind of executor: ``replicas`` copies of the same trainer command."""

    name: Name = Field(description="Role name, e.g. ps, worker, chief, evaluator.")
    replicas: int = Field(1, ge=1, description="Executors of this role.")
    min_replicas: int | None = Field(
        None, ge=1, description="Under `dynamic` scheduling the role starts once this many registered. "
        "Default: replicas."
    )
    command: str | list[str] = Field(
        description="Trainer command: a string runs under `bash -c`, a list is executed as is."
    )
    env: Annotated[dict[str, str], BeforeValidator(_stringify_env)] = Field(
        default_factory=dict, description="Extra environment for the trainer."
    )
    ports: int = Field(1, ge=0, le=64, description="Ports reserved per executor (PRIMUS_PORTS); the first is "
                       "the executor's address in the cluster spec.")
    files: list[str] = Field(
        default_factory=list,
        description="Files or directories made available in the trainer's working directory "
        "(relative paths are taken from the spec file's directory).",
    )
    resources: Resources = Field(default_factory=Resources)
    consumes_input: bool = Field(False, description="Whether this role's trainers are fed the job's input data.")
    success_percent: float | None = Field(
        None, ge=0, le=100,
        description="The role is done when ceil(replicas * success_percent / 100) executors have "
        "succeeded; 0 = never waited on. Default 100, and 0 for roles named ps.",
    )
    failover: Failover | None = Field(None, description="Default depends on the role name (see Failover).")
    placement: Placement = Field(default_factory=Placement)
    readiness: Readiness = Field(default_factory=Readiness)
    preemption: Preemption = Field(default_factory=Preemption)
    framework: Literal["plain", "tensorflow", "pytorch"] = Field(
        "plain",
        description="tensorflow: TF_CONFIG is set; pytorch: MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE/"
        "LOCAL_RANK are set from this role's executors; plain: PRIMUS_* only.",
    )
    peers: list[Name] | None = Field(
        None, description="The roles whose addresses this role's trainers get (PRIMUS_CLUSTER, PRIMUS_CLUSTER_FILE, "
        "TF_CONFIG's cluster). Default: every role. Each executor receives its view at start and again "
        "after every change of it: at thousands of executors, give a role only what it talks to (the "
        "workers of a parameter-server job: [ps]).")
    autoscale: Autoscale | None = Field(
        None, description="Size this role on the input's backlog (it must consume the input); replicas is the "
        "size it starts with, within the bounds. See Autoscale.")

    @field_validator("command")
    @classmethod
    def _command_not_empty(cls, value: str | list[str]) -> str | list[str]:
        if (isinstance(value, str) and not value.strip()) or (isinstance(value, list) and not value):
            raise ValueError("must not be empty")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
        return value

    @model_validator(mode="after")
    def _fill_defaults(self) -> Role:
        is_ps = self.name in PS_ROLE_NAMES
        if self.min_replicas is None:
            object.__setattr__(self, "min_replicas", self.replicas)
        if self.success_percent is None:
            object.__setattr__(self, "success_percent", 0.0 if is_ps else 100.0)
        if self.failover is None:
            object.__setattr__(self, "failover", Failover(restart="never") if is_ps else Failover())
        if self.min_replicas is not None and self.min_replicas > self.replicas:
            raise ValueError(f"min_replicas: must be <= replicas ({self.replicas}), got {self.min_replicas}")
        if self.framework == "pytorch" and self.min_replicas != self.replicas:
            raise ValueError(
                f"min_replicas: pytorch roles start with all replicas (WORLD_SIZE is fixed), "
                f"got {self.min_replicas} < {self.replicas}"
            )
        if self.framework == "pytorch" and self.ports < 1:
            raise ValueError("ports: pytorch roles need at least 1 port (MASTER_PORT), got 0")
        if self.readiness.probe == "ports" and self.ports < 1:
            raise ValueError("readiness.probe: 'ports' needs the role to reserve ports, got ports: 0")
        return self

    @model_validator(mode="after")
    def _autoscale_fits_the_role(self) -> Role:
        policy = self.autoscale
        if policy is None:
            return self
        if not self.consumes_input:
            raise ValueError("autoscale: sizes the role on the input's backlog, so the role needs "
                             "consumes_input: true, got false")
        if self.framework == "pytorch":
            raise ValueError("autoscale: a pytorch role cannot be scaled (WORLD_SIZE is fixed at start), "
                             "got framework: pytorch")
        if not policy.min_replicas <= self.replicas <= policy.max_replicas:
            raise ValueError(f"replicas: must be within autoscale's bounds {policy.min_replicas}.."
                             f"{policy.max_replicas}, got {self.replicas}")
        return self

    @property
    def required_successes(self) -> int:
        """Executors that must succeed for the role to be done (0: never waited on)."""
        return math.ceil(self.replicas * (self.success_percent or 0) / 100)

    def argv(self) -> list[str]:
        return ["bash", "-c", self.command] if isinstance(self.command, str) else list(self.command)


# --- scheduling and AM --------------------------------------------------------


class Scheduling(StrictModel):
    """When each role's trainers may start.

    gang: no trainer starts until every executor of every role has registered.
    ordered: the roles of ``order`` are launched one after another, each once
    every trainer of the one before is ready (see ``Readiness``). dynamic: each role starts once
    its ``min_replicas`` have registered. A role whose barrier has not opened
    ``start_timeout`` after its executors were requested fails the job.
    """

    policy: Literal["gang", "ordered", "dynamic"] = "gang"
    order: list[str] | None = Field(
        None, description="Start order for `ordered` (default: the order of `roles`)."
    )
    start_timeout: Seconds = Field(
        300.0, description="How long a role may wait for its start barrier (resources, registrations) "
        "before the job fails."
    )


class AMSettings(StrictModel):
    """The Application Master's own settings."""

    heartbeat_interval: Seconds = Field(1.0, description="Executor heartbeat period. A job of more than "
                                        "3,000 executors heartbeats less often: one per executor every "
                                        "executors/3,000 seconds (at most 3s, and a third of heartbeat_timeout), "
                                        "so that one AM answers every heartbeat in time.")
    heartbeat_timeout: Seconds = Field(
        10.0, description="An executor silent this long is lost and replaced; an executor that cannot "
        "reach the AM this long kills its trainer and exits."
    )
    shutdown_grace: Seconds = Field(
        10.0, description="Between SIGTERM and SIGKILL when executors are stopped (kill, success, scale down)."
    )
    max_attempts: int | None = Field(
        None, ge=1, description="AM attempts: a dead AM is restarted this many times minus one (local: by a "
        "supervisor process; Kubernetes: the AM runs as a batch Job; YARN: a new application attempt). "
        "On local and Kubernetes the new attempt adopts the executors still running, trainers untouched, "
        "so the default there is 3; on YARN a new attempt starts every executor again, so the default "
        "is 1 (no restart).")
    attempt_failures_validity_interval: Seconds | None = Field(
        3600.0, gt=0, description="Only AM deaths within this long of each other count toward max_attempts "
        "(YARN's attemptFailuresValidityInterval): a job of days that loses its AM now and then, each time "
        "recovered, is not lost for it. Default 1h; null: every death since submit counts. Local and "
        "Kubernetes apply it; on YARN, whose skein submission cannot set it, every death counts.")
    recovery_grace: Seconds | None = Field(
        None, description="With max_attempts > 1: how long executors keep their trainers running while "
        "the AM is unreachable, waiting for its next attempt to adopt them (more than heartbeat_timeout; "
        "default 60s, or twice heartbeat_timeout when that is longer).")
    host: str | None = Field(None, description="Address the AM API binds to; default chosen by the backend.")
    port: int = Field(0, ge=0, le=65535, description="AM API port; 0 = any free port.")
    tls: bool = Field(
        False, description="Serve the AM API (executors, clients, web page, /metrics) over HTTPS. The job gets a "
        "CA of its own at submit, whose key stays with the AM; the AM's certificate names its host, and "
        "executors and clients trust only that CA. Browsers do not know the CA: they warn on the web page."
    )
    advertise: str | None = Field(
        None, description="host:port executors and clients are given to reach the AM instead of its own "
        "address, e.g. a NAT, load balancer or proxy in front of it that forwards to the AM's `port`."
    )

    @field_validator("advertise")
    @classmethod
    def _host_and_port(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, _, port = value.rpartition(":")
        bad_host = not host or any(c.isspace() or c == "/" for c in host)
        if bad_host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(f"must be host:port with a port from 1 to 65535, got {value!r}")
        return value

    @model_validator(mode="after")
    def _timeout_above_interval(self) -> AMSettings:
        if self.heartbeat_timeout < 2 * self.heartbeat_interval:
            raise ValueError(
                f"heartbeat_timeout: must be at least twice heartbeat_interval "
                f"({self.heartbeat_interval:g}s), got {self.heartbeat_timeout:g}s"
            )
        return self

    @property
    def grace(self) -> float:
        """``recovery_grace``, or its default."""
        return self.recovery_grace if self.recovery_grace is not None else max(60.0, 2 * self.heartbeat_timeout)


# Each backend's own section (backends/<name>/settings.py), told apart by ``type``.
if TYPE_CHECKING:
    Backend = BackendSettings
else:
    Backend = Annotated[Union[catalogue.SETTINGS], Field(discriminator="type")]  # noqa: UP007 - built from a tuple


def _default_backend() -> BackendSettings:
    """The section of a spec that names no backend: the default backend's, with its defaults."""
    return catalogue.facts(catalogue.DEFAULT).settings.model_validate({"type": catalogue.DEFAULT})


# --- input (the data plane) ----------------------------------------------------------

FORMATS = ("text", "jsonl", "raw", "tfrecord", "length_delimited", "parquet")
# How each format's records are fed (see data/formats.frame): lines, or 4-byte big-endian length + record.
_FRAMING = {"text": "lines", "jsonl": "lines", "parquet": "lines",
            "raw": "length_prefixed", "tfrecord": "length_prefixed", "length_delimited": "length_prefixed"}
TEMPLATE_TOKENS = ("YYYY", "MM", "DD", "HH")
_TEMPLATE_RE = re.compile(r"\{\{([^{}]*)\}\}")


def local_path(value: str) -> str:
    """The local path of a ``file://`` URL or a plain path; other schemes are refused."""
    if value.startswith("file://"):
        value = value[len("file://"):]
    elif re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", value):
        raise ValueError(f"must be a local path or a file:// URL here, got {value!r}")
    if not value.startswith("/"):
        raise ValueError(f"must be an absolute path or a file:// URL, got {value!r}")
    return value


def input_url(value: str) -> str:
    """``value`` if the data plane can read it: an absolute local path, ``file://``, ``hdfs://`` (the
    NameNode of ``$HADOOP_CONF_DIR``) or ``webhdfs://host:port`` (a NameNode's HTTP address)."""
    scheme = value.split("://", 1)[0] if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", value) else ""
    if scheme in ("hdfs", "webhdfs"):
        parts = urlsplit(value)
        if scheme == "webhdfs" and not (parts.hostname and parts.port):
            raise ValueError(f"webhdfs:// URLs name the NameNode's HTTP address: webhdfs://host:port/path, "
                             f"got {value!r}")
        if not parts.path.startswith("/"):
            raise ValueError(f"needs an absolute path after the host, got {value!r}")
        if ":" in parts.path:
            raise ValueError(f"HDFS refuses ':' in file and directory names, got {value!r}")
        return value
    if scheme not in ("", "file"):
        raise ValueError(f"only local paths, file://, hdfs:// and webhdfs://host:port URLs are readable, "
                         f"got {value!r}")
    return local_path(value)


class FileSource(StrictModel):
    """Files under a path (template) read as records of one format.

    ``path`` may hold the templates ``{{YYYY}}``, ``{{MM}}``, ``{{DD}}`` and ``{{HH}}``,
    filled in from the job's ``time_range`` one partition at a time: a day for a daily
    source (``/data/clicks/{{YYYY}}{{MM}}{{DD}}/``), an hour for an hourly one
    (``/data/views/{{YYYY}}{{MM}}{{DD}}/{{HH}}/``). A partition is read once its
    ``success_marker`` file exists. Files named ``_SUCCESS``, ``_temporary`` or starting
    with ``.`` or ``_`` are never read.
    """

    name: Name = Field(description="Source name, used in task ids (e.g. clicks).")
    path: str = Field(description="Directory (template) holding the files: an absolute path, a file://, "
                      "hdfs:// (the NameNode of $HADOOP_CONF_DIR) or webhdfs://host:port URL (in a spec file, a "
                      "relative path is taken from the file's directory).")
    pattern: str = Field("*", min_length=1, description="Glob the file names must match (default every file).")
    success_marker: str | None = Field(
        "_SUCCESS", description="File that must exist in a partition before it is read; null = read at once."
    )
    granularity: Literal["day", "hour"] | None = Field(
        None, description="One partition per day or per hour of the time_range; default from the path: hour "
        "when it holds {{HH}}, else day. A job may mix daily and hourly sources."
    )
    format: Literal["text", "jsonl", "raw", "tfrecord", "length_delimited", "parquet"] = Field(
        "text", description="Record format: text/jsonl lines; raw bytes; tfrecord / length_delimited framed "
        "records; parquet row groups. Binary records reach the trainer length-prefixed."
    )
    compression: Literal["auto", "none", "gzip", "zstd"] = Field(
        "auto", description="auto: by file suffix (.gz gzip, .zst zstd, else none). Compressed files are "
        "read whole (one task per file)."
    )
    node_local: bool = Field(
        False, description="A local path that every node of the cluster has (a shared mount, or the same files "
        "on each node): a cluster backend's executors read it there. Without it, a local path or file:// on "
        "a cluster backend is refused at submit: put the data on HDFS (`primus hdfs put`)."
    )

    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str) -> str:
        input_url(value)
        unknown = [t for t in _TEMPLATE_RE.findall(value) if t not in TEMPLATE_TOKENS]
        if unknown:
            raise ValueError(f"unknown template {{{{{unknown[0]}}}}} in {value!r} "
                             "(templates: {{YYYY}}, {{MM}}, {{DD}}, {{HH}})")
        if "{" in _TEMPLATE_RE.sub("", value) or "}" in _TEMPLATE_RE.sub("", value):
            raise ValueError(f"unbalanced braces in {value!r} (templates are written {{{{YYYY}}}})")
        return value

    @model_validator(mode="before")
    @classmethod
    def _granularity_from_path(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("granularity") is None and isinstance(data.get("path"), str):
            return {**data, "granularity": "hour" if "{{HH}}" in data["path"] else "day"}
        return data

    @model_validator(mode="after")
    def _path_fits_granularity(self) -> FileSource:
        hourly_path = "HH" in self.templates
        if self.granularity == "day" and hourly_path:
            raise ValueError(f"path: a daily source (granularity: day) cannot fill in {{{{HH}}}}; make it hourly "
                             f"(granularity: hour) or drop {{{{HH}}}}, got {self.path!r}")
        if self.granularity == "hour" and not hourly_path:
            raise ValueError(f"path: an hourly source (granularity: hour) needs {{{{HH}}}} in its path (else "
                             f"every hour reads the same directory), got {self.path!r}")
        return self

    @field_validator("success_marker")
    @classmethod
    def _check_marker(cls, value: str | None) -> str | None:
        if value is not None and (not value or "/" in value):
            raise ValueError(f"must be a file name without '/', got {value!r}")
        return value

    @property
    def templates(self) -> set[str]:
        return set(_TEMPLATE_RE.findall(self.path))


KAFKA_FORMATS = ("jsonl", "raw", "protobuf")
# How a Kafka message is fed: a JSON document as one line; raw and protobuf bytes length-prefixed.
_KAFKA_FRAMING = {"jsonl": "lines", "raw": "length_prefixed", "protobuf": "length_prefixed"}
KAFKA_START_MODES = ("committed", "earliest", "latest")
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
# consumer_config keys the AM and the executors set themselves: a passthrough value would break
# the task model (partitions are assigned by the AM, offsets kept in the task checkpoint).
_KAFKA_OWN_KEYS = ("bootstrap.servers", "group.id", "enable.auto.commit", "enable.auto.offset.store",
                   "auto.offset.reset", "group.instance.id", "partition.assignment.strategy")


def kafka_time(value: str) -> Any:
    """A Kafka start/end time as an aware UTC datetime: a date ``YYYY-MM-DD`` (its 00:00), an hour
    ``YYYY-MM-DDTHH`` (a time partition's start), or an ISO 8601 time (without a zone: UTC)."""
    import datetime as _dt

    day, hour = DAY_RE.match(value), HOUR_RE.match(value)
    try:
        if day:
            return _dt.datetime(int(day[1]), int(day[2]), int(day[3]), tzinfo=_dt.timezone.utc)
        if hour:
            return _dt.datetime(int(hour[1]), int(hour[2]), int(hour[3]), int(hour[4]), tzinfo=_dt.timezone.utc)
        when = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"must be committed, earliest, latest, a date YYYY-MM-DD, an hour YYYY-MM-DDTHH or an "
                         f"ISO 8601 time, got {value!r}") from None
    return when.replace(tzinfo=_dt.timezone.utc) if when.tzinfo is None else when.astimezone(_dt.timezone.utc)


class KafkaSource(StrictModel):
    """Kafka topics read as one stream: each topic partition is a task the AM assigns to a consuming
    executor and moves, with its offset, when that executor ends or the role is scaled; the offset is
    the task's checkpoint (journaled, resumed by a resubmitted job, exactly-once with the trainer's
    model checkpoint) and is also committed to ``group_id`` for visibility. Without ``end`` the stream
    never ends: the job runs until it is stopped, picking up new partitions of the topics as they
    appear. With file ``sources`` too, the files (a bounded ``time_range``) are read first and Kafka
    continues at the end of their time range (``start`` defaults to it)."""

    name: Name = Field("kafka", description="Source name, used in task ids (NAME/TOPIC/PARTITION).")
    bootstrap_servers: str = Field(min_length=1, description="Brokers to bootstrap from: host:port[,host:port...].")
    topics: list[str] = Field(min_length=1, description="Topics to read; every partition of each is read.")
    group_id: str | None = Field(
        None, description="Consumer group the offsets are committed to (for visibility and for start: "
        "committed); default primus-JOBNAME. Partitions are assigned by the AM, never by the group.")
    start: str | None = Field(
        None, description="Where a partition is read from the first time (a resubmitted job resumes from its "
        "journaled offsets instead): committed (the group's offset; earliest where it has none), earliest, "
        "latest, or a time (YYYY-MM-DD, YYYY-MM-DDTHH or ISO 8601; UTC unless the time says otherwise: the first "
        "message at or after it). Default: the end of the file sources' time_range when there are file sources "
        "(files, then Kafka without a gap or an overlap), else committed.")
    end: str | dict[str, dict[int, int]] | None = Field(
        None, description="Where reading stops (a bounded backfill; the input is then exhausted like files): "
        "latest (the partitions' ends when they are first listed), a time (as for start: messages before it), or "
        "offsets per topic and partition ({topic: {partition: offset}}, exclusive). Default: never (a stream).")
    format: Literal["jsonl", "raw", "protobuf"] = Field(
        "jsonl", description="Message values: jsonl (a JSON document, fed as one line); raw or protobuf bytes "
        "(fed length-prefixed, 4-byte big-endian, like every binary record).")
    consumer_config: dict[str, str | int | float | bool] = Field(
        {}, description="librdkafka consumer settings passed through (security.protocol, sasl.*, ssl.*, fetch "
        "sizes...). Values of secret-looking keys (passwords, jaas configs, keys) are masked in the status, "
        "page and logs. Executors fetch up to 1M records per partition ahead (queued.min.messages, capped by "
        "queued.max.messages.kbytes, 64 MiB) unless set here. The keys the AM sets itself (" + ", ".join(_KAFKA_OWN_KEYS) + ") are refused.")
    connect_timeout: Seconds = Field(
        30.0, description="How long the AM keeps trying to reach the brokers at start before the job fails "
        "naming them.")

    @field_validator("bootstrap_servers")
    @classmethod
    def _check_servers(cls, value: str) -> str:
        for server in value.split(","):
            host, _, port = server.strip().rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"must be host:port[,host:port...], got {value!r}")
        return value

    @field_validator("topics")
    @classmethod
    def _check_topics(cls, value: list[str]) -> list[str]:
        bad = [t for t in value if not _TOPIC_RE.match(t)]
        if bad:
            raise ValueError(f"a topic name is 1-249 of [a-zA-Z0-9._-], got {bad[0]!r}")
        if len(set(value)) != len(value):
            raise ValueError(f"duplicate topics in {value}")
        return value

    @field_validator("start")
    @classmethod
    def _check_start(cls, value: str | None) -> str | None:
        if value is not None and value not in KAFKA_START_MODES:
            kafka_time(value)
        return value

    @field_validator("end")
    @classmethod
    def _check_end(cls, value: Any) -> Any:
        if isinstance(value, str) and value != "latest":
            try:
                kafka_time(value)
            except ValueError:
                raise ValueError(f"must be latest, a time (YYYY-MM-DD, YYYY-MM-DDTHH, ISO 8601) or offsets "
                                 f"{{topic: {{partition: offset}}}}, got {value!r}") from None
        return value

    @field_validator("consumer_config")
    @classmethod
    def _check_config(cls, value: dict[str, Any]) -> dict[str, Any]:
        own = sorted(k for k in value if k in _KAFKA_OWN_KEYS)
        if own:
            raise ValueError(f"{own[0]}: set by Primus (partitions are assigned by the AM and their offsets kept "
                             f"in the task checkpoint); remove it")
        return value

    @model_validator(mode="after")
    def _end_offsets_name_topics(self) -> KafkaSource:
        if isinstance(self.end, dict):
            unknown = sorted(set(self.end) - set(self.topics))
            if unknown:
                raise ValueError(f"end: offsets for {unknown[0]!r}, which is not one of topics {self.topics}")
        return self

    @property
    def framing(self) -> str:
        return _KAFKA_FRAMING[self.format]

    @property
    def bounded(self) -> bool:
        return self.end is not None


def _partition_value(value: Any) -> Any:
    # YAML turns 2026-12-01 into a date; keep the spelling the user meant.
    import datetime as _dt

    if isinstance(value, _dt.datetime):
        return value.strftime("%Y-%m-%dT%H")
    if isinstance(value, _dt.date):
        return value.isoformat()
    return value


PartitionTime = Annotated[str, BeforeValidator(_partition_value)]


class TimeRange(StrictModel):
    """Which partitions to read, inclusive at both ends, oldest first.

    ``start`` and ``end`` are ``YYYY-MM-DD`` (day) or ``YYYY-MM-DDTHH`` (hour). A daily
    source reads the days from ``start``'s to ``end``'s; an hourly source the hours from
    ``start`` (a date: its hour 00) to ``end`` (a date: its hour 23). ``end: null`` leaves
    the range open: the job keeps waiting for new partitions until it is stopped.
    """

    start: PartitionTime = Field(description="First partition, e.g. 2026-12-01 or 2026-12-01T05.")
    end: PartitionTime | None = Field(None, description="Last partition (inclusive); null = open-ended.")
    granularity: Literal["day", "hour"] | None = Field(
        None, description="Deprecated: each source has its own granularity (sources[].granularity, by default "
        "from its path). If given, every source must have this one."
    )

    @field_validator("start", "end")
    @classmethod
    def _check_time(cls, value: str | None) -> str | None:
        if value is None:
            return None
        partition_hour(value)  # a ValueError says what is accepted
        return value

    def hours(self) -> tuple[Any, Any]:
        """(first hour, last hour or None) as datetimes: a date starts at its hour 00 and ends at its hour 23."""
        return partition_hour(self.start), None if self.end is None else partition_hour(self.end, last=True)

    @model_validator(mode="after")
    def _ordered(self) -> TimeRange:
        start, end = self.hours()
        if end is not None and end < start:
            raise ValueError(f"end: must not be before start ({self.start}), got {self.end!r}")
        return self


class InputSpec(StrictModel):
    """The data the AM hands out, as tasks, to the roles with ``consumes_input: true``.

    The AM scans the sources partition by partition (in time order across daily and hourly
    sources, a day before its first hour; in the background while training runs), splits files into tasks of about ``task_size`` bytes, and
    hands them out on heartbeats: each consuming executor holds at most
    ``max_tasks_per_executor + prefetch`` tasks and pulls more as it finishes. The
    trainer reads the records on its stdin (text lines, or 4-byte big-endian
    length-prefixed binary records) and gets EOF once every task is done.
    """

    sources: list[FileSource] = Field([], description="Files to read (with kafka: read first); together one stream.")
    kafka: KafkaSource | None = Field(
        None, description="Kafka topics to read (after the file sources, when there are some): a stream, or a "
        "bounded backfill with kafka.end.")
    time_range: TimeRange | None = Field(
        None, description="Partitions to read; required when a path holds templates, refused when none does."
    )
    task_size: ByteSize = Field("64Mi", validate_default=True,
                                description="Target size of a task, e.g. '64Mi'. " + SIZE_RULE)
    max_tasks_per_executor: int = Field(1, ge=1, description="Tasks an executor reads at the same time.")
    prefetch: int = Field(1, ge=0, description="Extra tasks held per executor so that its trainer never waits.")
    max_task_attempts: int = Field(
        3, ge=1, description="Attempts charged to a task before on_bad_data applies. Only failures the task is "
        "at fault for are charged: its reader failed (unreadable or corrupt data), or trainers on different "
        "executors died while reading it without getting past the same position (a poison record). A trainer "
        "killed by a signal, out of memory, preempted or lost returns its tasks uncharged, at their position."
    )
    max_task_interruptions: int = Field(
        10, ge=1, description="Times in a row a task may be interrupted uncharged at one position (the executor "
        "reading it ended: crash, signal, preemption, loss, with no record read since the interruption before) "
        "before on_bad_data applies: a backstop so that a task that takes down every executor that reads it "
        "still ends. Interruptions with records read in between do not count."
    )
    early_exit: Literal["requeue", "accept"] = Field(
        "requeue", description="What a consuming trainer's exit 0 before the end of its input means. requeue: "
        "it has not finished the input: its tasks go back to the queue (uncharged) for the other trainers, and "
        "the job cannot succeed while tasks are left; once every consuming executor has ended with tasks left, "
        "the job fails ('input not consumed'). accept: the trainer decides when it has read enough (e.g. a "
        "fixed number of steps): its exit is a success and the unread tasks are reported as not read (data "
        "state 'incomplete')."
    )
    storage_outage_timeout: Seconds = Field(
        120.0, description="How long a read of HDFS input waits through an outage (a DataNode restarting, "
        "a NameNode failing over: a server unreachable, a cut stream, an HTTP 5xx, safe mode), reading on from "
        "where it stopped, before the task fails as unreadable (charged, see max_task_attempts)."
    )
    on_bad_data: Literal["fail", "quarantine"] = Field(
        "fail", description="A task out of attempts: fail the job naming the file, or quarantine it "
        "(skip it, list it in the status) and go on."
    )
    success_percent: float = Field(
        100.0, gt=0, le=100, description="The input is complete once this share of tasks is done "
        "(quarantined tasks count as done); the rest is not read."
    )
    failed_percent: float = Field(
        100.0, gt=0, le=100, description="The job fails once this share of tasks is quarantined."
    )
    delivery: Literal["at_least_once", "exactly_once"] = Field(
        "at_least_once", description="at_least_once: a retried task resumes from the last position the trainer "
        "was seen to consume (a crash may repeat a few records); exactly_once: only from what the trainer "
        "committed right after saving a model checkpoint (data.reader.commit), and its replacement is told "
        "which checkpoint to restore (PRIMUS_RESTORE_CHECKPOINT)."
    )
    trainer_buffer: ByteSize = Field(
        "8Ki", validate_default=True, description="At-least-once, for a trainer that reads its stdin itself (not "
        "through data.reader, which says exactly which records it is done with): how much input it may hold, "
        "taken from the pipe but not yet processed (its read buffer and any queue of its own). A killed trainer "
        "gets this much of what it had taken fed again: too small loses records, too large repeats them. 8Ki "
        "covers Python's sys.stdin (8 KiB reads), C stdio (4 KiB) and Rust's BufReader; raise it for readers that "
        "hold more (Java's BufferedReader over System.in: 16Ki; Node.js streams: 64Ki; a prefetch queue). "
        + SIZE_RULE)
    exit_grace: Seconds | None = Field(
        None, description="After its stdin reached EOF (the input is done), how long a trainer may take to "
        "exit on its own before it is stopped and counted as failed; null = as long as it takes."
    )
    poll_interval: Seconds = Field(
        5.0, description="How often a partition waiting for its marker, or an open range, is checked again."
    )
    wait_timeout: Seconds | None = Field(
        None, description="How long a partition may keep the scan waiting (for its success_marker, or for its "
        "directory in a source without one) once its day or hour is over (UTC); then the job fails, naming the "
        "path awaited. null: as long as it takes, e.g. for a job started before its data lands, which an open "
        "time_range always is."
    )
    work_preserve_dir: str | None = Field(
        None, description="Directory for the AM's task journal; a job started with the same directory "
        "resumes where the last one stopped, mid-file. A local path, file://, hdfs:// or webhdfs://host:port "
        "(on HDFS: a snapshot uploaded every few seconds, see data/journal.py)."
    )

    restore_from: str | None = Field(
        None, description="A savepoint directory (POST /api/v1/data/savepoint, `primus data savepoint`) or "
        "another job's work_preserve_dir to start from: done tasks are skipped, the others resume at their "
        "saved position. Not used when work_preserve_dir already holds progress."
    )
    node_local_dirs: bool = Field(
        False, description="work_preserve_dir and restore_from are local paths that every node sees (a shared "
        "mount): a cluster backend's AM uses them there. Without it, a local path or file:// in either is "
        "refused on a cluster backend (use hdfs://)."
    )

    @field_validator("work_preserve_dir", "restore_from")
    @classmethod
    def _check_dir(cls, value: str | None) -> str | None:
        if value is not None:
            input_url(value)
        return value

    @property
    def framing(self) -> str:
        """How records reach the trainer: ``lines`` or ``length_prefixed``."""
        return _FRAMING[self.sources[0].format] if self.sources else _KAFKA_FRAMING[self.kafka.format]  # type: ignore[union-attr]

    @property
    def kafka_sources(self) -> list[KafkaSource]:
        return [self.kafka] if self.kafka is not None else []

    def files_end(self) -> Any:
        """Where the file sources' time range ends (an aware UTC datetime): where a Kafka source
        continues by default; None without a bounded time range."""
        import datetime as _dt

        if self.time_range is None or self.time_range.end is None or not self.sources:
            return None
        last = self.time_range.hours()[1]
        if any(s.granularity == "day" for s in self.sources):
            end = last.replace(hour=0) + _dt.timedelta(days=1)
        else:
            end = last + _dt.timedelta(hours=1)
        return end.replace(tzinfo=_dt.timezone.utc)

    def kafka_start(self) -> str:
        """The Kafka source's start as given, or its default (see KafkaSource.start)."""
        assert self.kafka is not None
        if self.kafka.start is not None:
            return self.kafka.start
        end = self.files_end()
        return end.isoformat() if end is not None else "committed"

    @model_validator(mode="after")
    def _consistent(self) -> InputSpec:
        if not self.sources and self.kafka is None:
            raise ValueError("sources: give file sources, a kafka source, or both (files first, then Kafka)")
        if self.kafka is not None and self.sources:
            if self.time_range is None or self.time_range.end is None:
                raise ValueError("kafka: reading files and then Kafka needs a time_range with an end (Kafka continues "
                                 f"where the files' range ends), got time_range {self.time_range!r}")
            if self.kafka.framing != _FRAMING[self.sources[0].format]:
                raise ValueError(f"kafka.format: every source of a job must be fed the same way; {self.kafka.format!r} "
                                 f"is {self.kafka.framing}, the file sources' {self.sources[0].format!r} is "
                                 f"{_FRAMING[self.sources[0].format]}")
        if self.kafka is not None and not self.sources and self.time_range is not None:
            raise ValueError("time_range: applies to file sources, and this input has only a kafka source (use "
                             "kafka.start and kafka.end)")
        names = [s.name for s in self.sources] + ([self.kafka.name] if self.kafka is not None else [])
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"sources: duplicate source names {duplicates}")
        for i, source in enumerate(self.sources):
            used = source.templates
            if used and self.time_range is None:
                raise ValueError(f"sources[{i}].path: holds templates but the input has no time_range, "
                                 f"got {source.path!r}")
            if not used and self.time_range is not None:
                raise ValueError(f"sources[{i}].path: a time_range needs {{{{YYYY}}}}{{{{MM}}}}{{{{DD}}}} "
                                 f"templates in the path, got {source.path!r}")
            if self.time_range is not None:
                needed = {"YYYY", "MM", "DD"} | ({"HH"} if source.granularity == "hour" else set())
                if not needed <= used:
                    raise ValueError(f"sources[{i}].path: {source.granularity} partitions need the "
                                     f"templates {sorted(needed)}, got {source.path!r}")
                deprecated = self.time_range.granularity
                if deprecated is not None and source.granularity != deprecated:
                    raise ValueError(f"time_range.granularity: deprecated, each source has its own; remove it "
                                     f"(sources[{i}] is by {source.granularity}: {source.path!r}), got {deprecated!r}")
        framings = {_FRAMING[s.format] for s in self.sources}
        if len(framings) > 1:
            raise ValueError("sources: every source of a job must be fed the same way (text, jsonl and parquet "
                             "as lines; raw, tfrecord and length_delimited length-prefixed), got formats "
                             f"{[s.format for s in self.sources]}")
        return self


# --- the job --------------------------------------------------------------------


class JobSpec(StrictModel):
    """A Primus job: roles, how they start, and where they run."""

    name: Name = Field(description="Job name (lowercase letters, digits, - and _).")
    roles: list[Role] = Field(min_length=1)
    scheduling: Scheduling = Field(default_factory=Scheduling)
    am: AMSettings = Field(default_factory=AMSettings)
    backend: Backend = Field(default_factory=_default_backend)
    input: InputSpec | None = None
    tags: dict[str, str] = Field(
        default_factory=dict, description="Labels kept with the job (e.g. dag_id, task_id, run_id) to find it later."
    )

    @model_validator(mode="after")
    def _cross_checks(self) -> JobSpec:
        names = [r.name for r in self.roles]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"roles: duplicate role names {duplicates}")
        for role in self.roles:
            for other in role.placement.anti_affinity:
                if other not in names:
                    raise ValueError(
                        f"roles[{names.index(role.name)}].placement.anti_affinity: unknown role {other!r} "
                        f"(roles: {names})"
                    )
        self._check_peers(names)
        order = self.scheduling.order
        if order is not None:
            if sorted(order) != sorted(names):
                raise ValueError(f"scheduling.order: must list every role once, got {order} for roles {names}")
            if self.scheduling.policy != "ordered":
                raise ValueError("scheduling.order: only used with policy 'ordered'")
        if not any(r.required_successes > 0 for r in self.roles):
            raise ValueError(
                "roles: at least one role needs success_percent > 0, otherwise the job can never succeed"
            )
        frameworks = {r.framework for r in self.roles if r.framework != "plain"}
        if len(frameworks) > 1:
            raise ValueError(f"roles: one framework per job, got {sorted(frameworks)}")
        if self.input is not None and not any(r.consumes_input for r in self.roles):
            raise ValueError("input: no role has consumes_input: true, so nobody would read it")
        if any(r.consumes_input for r in self.roles) and self.input is None:
            raise ValueError("roles: a role consumes_input but the job has no `input` section")
        self._check_recovery_grace()
        if self.am.tls and not catalogue.facts(self.backend.type).serves_tls:
            able = [facts.name for facts in catalogue.CATALOGUE if facts.serves_tls]
            raise ValueError(f"am.tls: the {self.backend.type} backend cannot serve the AM API over TLS yet "
                             f"(only {', '.join(able)}), got true")
        return self

    @property
    def am_attempts(self) -> int:
        """``am.max_attempts``, or the default of the backend the job runs on: recovery where the next
        AM attempt adopts the executors still running. Resolved when asked, never stored: a spec
        without a backend section takes the one of the connection it is submitted through."""
        if self.am.max_attempts is not None:
            return self.am.max_attempts
        return catalogue.DEFAULT_AM_ATTEMPTS if catalogue.facts(self.backend.type).adopts_executors else 1

    @property
    def executor_patience(self) -> float:
        """How long an executor waits for an unreachable AM before it ends its trainer."""
        return self.am.grace if self.am_attempts > 1 else self.am.heartbeat_timeout

    def _check_recovery_grace(self) -> None:
        am = self.am
        if self.am_attempts > 1 and am.recovery_grace is not None and am.recovery_grace <= am.heartbeat_timeout:
            default = f" (the {self.backend.type} backend's default: {self.am_attempts})" \
                if am.max_attempts is None else ""
            raise ValueError(
                f"am.recovery_grace: must be more than heartbeat_timeout ({am.heartbeat_timeout:g}s) when "
                f"max_attempts > 1{default}, got {am.recovery_grace:g}s"
            )

    def _check_peers(self, names: list[str]) -> None:
        tensorflow = [r.name for r in self.roles if r.framework == "tensorflow" and r.name != "evaluator"]
        for i, role in enumerate(self.roles):
            if role.peers is None:
                continue
            unknown = [name for name in role.peers if name not in names]
            if unknown:
                raise ValueError(f"roles[{i}].peers: unknown role(s) {unknown} (roles: {names})")
            missing = [name for name in tensorflow if name not in role.peers]
            if role.framework == "tensorflow" and missing:
                raise ValueError(f"roles[{i}].peers: a tensorflow role must see every role of TF_CONFIG's cluster "
                                 f"({tensorflow}), missing {missing}")

    @model_validator(mode="after")
    def _autoscaled_roles_fit_the_input(self) -> JobSpec:
        consumers = [r.name for r in self.roles if r.consumes_input]
        for i, role in enumerate(self.roles):
            policy = role.autoscale
            if policy is None or self.input is None:
                continue  # a consuming role without input is refused above
            if len(consumers) > 1:
                raise ValueError(f"roles[{i}].autoscale: the backlog and its rate are the whole input's, shared by "
                                 f"the roles that consume it, so autoscaling needs a single consuming role, got "
                                 f"{consumers}")
            kafka = self.input.kafka_sources
            if policy.target_lag is not None and not kafka:
                raise ValueError(f"roles[{i}].autoscale.target_lag: is Kafka consumer lag and the input has no "
                                 f"kafka source (files: target_queued or target_catchup), got {policy.target_lag}")
            if policy.target_queued is not None and not self.input.sources:
                raise ValueError(f"roles[{i}].autoscale.target_queued: is bytes of file tasks and the input has no "
                                 f"file sources (Kafka: target_lag or target_catchup), got "
                                 f"{format_memory(policy.target_queued)!r}")
        return self

    # --- helpers used by the AM ---

    def role(self, name: str) -> Role:
        for role in self.roles:
            if role.name == name:
                return role
        raise KeyError(name)

    def peer_views(self) -> dict[str, tuple[str, ...]]:
        """role -> the roles whose addresses its executors get (``Role.peers``), in the spec's order."""
        names = [r.name for r in self.roles]
        return {r.name: tuple(n for n in names if r.peers is None or n in r.peers) for r in self.roles}

    def start_order(self) -> list[str]:
        return list(self.scheduling.order or [r.name for r in self.roles])

    def readiness_probe(self, name: str) -> Literal["spawned", "ports", "file"]:
        """The role's probe with ``auto`` resolved (see ``Readiness.probe``)."""
        role = self.role(name)
        if role.readiness.probe != "auto":
            return role.readiness.probe
        waited_on = self.scheduling.policy == "ordered" and name in self.start_order()[:-1]
        return "ports" if waited_on and role.ports > 0 else "spawned"

    def readiness_timeout(self, name: str) -> float:
        return self.role(name).readiness.timeout or self.scheduling.start_timeout

    # --- (de)serialisation ---

    @classmethod
    def from_dict(cls, data: dict[str, Any], base_dir: str | Path | None = None) -> JobSpec:
        """Validate a dict; raise SpecError naming every bad field and its value."""
        if base_dir is not None:
            data = _input_paths_from(data, Path(base_dir))
        try:
            spec = cls.model_validate(data)
        except ValidationError as exc:
            raise SpecError(format_validation_error(exc, cls)) from None
        if base_dir is not None:
            spec = spec._with_absolute_files(Path(base_dir))
        return spec

    @classmethod
    def from_file(cls, path: str | Path) -> JobSpec:
        """Load a YAML (.yaml/.yml) or JSON spec file."""
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise SpecError([f"{path}: cannot read ({exc.strerror})"]) from None
        try:
            if path.suffix in (".yaml", ".yml"):
                data = _load_yaml(text, path)
            else:
                data = json.loads(text)
        except SpecError:
            raise
        except json.JSONDecodeError as exc:
            raise SpecError([f"{path}:{exc.lineno}:{exc.colno}: not valid json: {exc.msg}"]) from None
        except Exception as exc:  # noqa: BLE001 - any parser error is the user's file
            raise SpecError([f"{path}: not valid {path.suffix.lstrip('.') or 'JSON'}: {exc}"]) from None
        if not isinstance(data, dict):
            raise SpecError([f"{path}: must hold a mapping, got {type(data).__name__}"])
        return cls.from_dict(data, base_dir=path.parent)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        return cls.model_json_schema()

    def _with_absolute_files(self, base: Path) -> JobSpec:
        # exclude_unset: what the user left out stays unset (a spec without `backend` runs on the
        # backend of the connection that submits it).
        data = self.model_dump(mode="json", exclude_unset=True)
        for role in data["roles"]:
            role["files"] = [str((base / f).resolve()) if not Path(f).is_absolute() else f
                             for f in role.get("files", [])]
        return JobSpec.model_validate(data)


def _load_yaml(text: str, path: Path) -> Any:
    """The YAML document in ``text``; a syntax error as one ``FILE:LINE:COLUMN: ...`` problem."""
    import io

    import yaml

    stream = io.StringIO(text)
    # yaml names a stream by its `name`, else "<unicode string>": the file it came from is what helps.
    stream.name = str(path)
    try:
        return yaml.safe_load(stream)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if mark is None:
            raise SpecError([f"{path}: not valid yaml: {' '.join(str(exc).split())}"]) from None
        # yaml's own text spans several lines (with a caret under a copy of the line): one line per
        # problem here, as an editor or terminal can jump to (marks count from 0).
        where = f"{path}:{mark.line + 1}:{mark.column + 1}"
        what = exc.problem or exc.context or "syntax error"
        context = exc.context_mark
        if exc.problem and exc.context and context is not None:
            what += f" ({exc.context} started at {context.line + 1}:{context.column + 1})"
        raise SpecError([f"{where}: not valid yaml: {what}"]) from None
    except yaml.YAMLError as exc:  # e.g. a character YAML refuses: its position, on one line
        raise SpecError([f"{path}: not valid yaml: {' '.join(str(exc).split())}"]) from None


def _input_paths_from(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """Relative input paths in a spec file are taken from the file's directory."""
    section = data.get("input")
    if not isinstance(section, dict):
        return data

    def absolute(value: Any) -> Any:
        if isinstance(value, str) and value and not value.startswith("/") and "://" not in value:
            return str(base.resolve() / value) + ("/" if value.endswith("/") else "")
        return value

    section = dict(section)
    if isinstance(section.get("sources"), list):
        section["sources"] = [{**src, "path": absolute(src.get("path"))} if isinstance(src, dict) else src
                              for src in section["sources"]]
    for key in ("work_preserve_dir", "restore_from"):
        if key in section:
            section[key] = absolute(section[key])
    return {**data, "input": section}


def load_spec(source: JobSpec | dict[str, Any] | str | Path) -> JobSpec:
    """A JobSpec from a model, a dict, or a path to a YAML/JSON file."""
    if isinstance(source, JobSpec):
        return source
    if isinstance(source, dict):
        return JobSpec.from_dict(source)
    return JobSpec.from_file(source)


# --- error messages ---------------------------------------------------------------

_MESSAGES = {
    "greater_than_equal": "must be >= {ge}",
    "greater_than": "must be > {gt}",
    "less_than_equal": "must be <= {le}",
    "less_than": "must be < {lt}",
    "missing": "is required",
    "extra_forbidden": "unknown field",
    "string_pattern_mismatch": "must match {pattern}",
    "too_short": "must have at least {min_length} item(s)",
    "literal_error": "must be one of {expected}",
    "union_tag_invalid": "must be one of {expected_tags}, got {tag!r}",
    "int_parsing": "must be an integer",
    "int_type": "must be an integer",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
}


# Exact, so that a user's key that merely starts alike (`stride`, `strategy`) stays in the path.
_UNION_MEMBER = re.compile(r"^(str|list\[.*\]|function-[a-z]+\[.*\])$")


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in catalogue.NAMES and out == "backend":
            continue  # the discriminated-union tag pydantic puts in the path
        elif isinstance(part, str) and _UNION_MEMBER.match(part):
            continue  # union-member labels (e.g. command: str | list[str]), not a user's key
        else:
            out += ("." if out else "") + str(part)
    return out or "(spec)"


def format_validation_error(exc: ValidationError, model: type[BaseModel] | None = None) -> list[str]:
    """One line per problem: ``path: what is wrong, got value``. ``model``: the model validated, whose
    field names an unknown key is compared with (``did you mean 'replicas'?``)."""
    problems: dict[str, None] = {}
    for err in exc.errors():
        path = _path(err["loc"])
        template = _MESSAGES.get(err["type"])
        ctx = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in err.get("ctx", {}).items()}
        msg = template.format(**ctx) if template else err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        if err["type"] == "missing":
            line = f"{path}: {msg}"
        elif _NAMES_ITS_FIELD.match(msg):
            # A cross-field check names the field itself ("min_replicas: ...").
            line = f"{path}.{msg}" if err["loc"] else msg
        elif isinstance(value, (dict, list)) and not err["type"].endswith("_type"):
            line = f"{path}: {msg}"  # a whole section failed a check: its message says why
        else:
            shown = repr(value)
            line = f"{path}: {msg}, got {shown if len(shown) <= 80 else shown[:77] + '...'}"
        if err["type"] == "extra_forbidden" and model is not None and err["loc"]:
            line += _nearest_field(model, err["loc"])
        problems.setdefault(line, None)
    return list(problems)


def _nearest_field(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """``; did you mean 'replicas'?`` for the unknown key at the end of ``loc``: the closest field name
    (or alias) of the model that holds it, found by following ``loc`` from ``model``; "" if none is close."""
    holders: list[type[BaseModel]] = [model]
    for part in loc[:-1]:
        if isinstance(part, int) or (isinstance(part, str) and _UNION_MEMBER.match(part)):
            continue  # a list index, or a union member's label: the same model(s) hold what follows
        inner = [m for holder in holders if part in holder.model_fields
                 for m in _models_in(holder.model_fields[part].annotation)]
        # Not a field: a discriminated union's tag (`backend` -> `local`), which picks one of its models.
        holders = inner or [m for m in holders if m.model_fields.get("type") is not None
                            and m.model_fields["type"].default == part]
        if not holders:
            return ""
    names = {known for holder in holders for name, field in holder.model_fields.items()
             for known in (name, field.alias) if known}
    close = difflib.get_close_matches(str(loc[-1]), sorted(names), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models a field's type holds: ``Role`` for ``list[Role]``, each member of a union."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


_NAMES_ITS_FIELD = re.compile(r"^[a-z_][\w.\[\]]*: ")
