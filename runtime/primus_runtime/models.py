"""The AM's API as typed models: executor messages, control requests, query parameters and the
status document. The server validates every request body with them, the OpenAPI document is
generated from them, and clients read replies as they describe.

The executor does not import this module (it stays standard library only): ``protocol.py`` is its
plain description of the same messages, and tests/test_contract.py checks the two agree.

Executor messages are strict (a string is not an integer, a float is not an integer) and ignore
unknown fields, so an executor one version ahead can still talk to this AM.

No ``from __future__ import annotations`` here: pydantic would then evaluate every field's annotation
from its text (a compile per field) at each AM start; evaluated by Python they cost nothing more.
"""

import enum
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import protocol
from .states import ExecutorState, JobState

# Bounds that keep junk out of the AM's state and status file (no real value comes near them).
_MAX_ID = 256
_MAX_TEXT = 10_000
_MAX_COUNT = 2**53  # integers a JSON reader in any language still reads exactly

T = TypeVar("T")

Port = Annotated[int, Field(ge=1, le=65535)]
GpuId = Annotated[int, Field(ge=0, le=_MAX_COUNT)]


class _Message(BaseModel):
    # Mutable defaults are default_factory: pydantic deep-copies a literal [] or {} default on every
    # validation, which was a third of a heartbeat's parse time.
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class _Reply(BaseModel):
    # Replies are described, never validated, by the AM: their schemas are built when the OpenAPI
    # document (or a test) first asks, not at every AM start.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class _Control(_Message):
    """A user's request: built at its first use, not on the AM's way to its first executor."""

    model_config = ConfigDict(defer_build=True)


class _Query(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)


# --- executor -> AM ---------------------------------------------------------------------------------


class RegisterRequest(_Message):
    """An executor announces itself once its backend started it."""

    incarnation: str = Field(max_length=_MAX_ID, description="This (re)start of the executor index; "
                                                                  "reports of older incarnations are fenced off")
    host: str = Field(max_length=_MAX_ID, description="Address other executors reach this one at")
    id: str | None = Field(None, max_length=_MAX_ID, description="`<role>-<index>`")
    role: str | None = Field(None, max_length=_MAX_ID)
    index: int | None = Field(None, ge=0, le=_MAX_COUNT)
    ports: list[Port] = Field(default_factory=list, max_length=1024, description="Ports reserved for the trainer; the first is "
                                                                   "its address in the cluster")
    pid: int | None = Field(None, ge=0, le=2**31, description="The executor's process id")
    gpus: list[GpuId] = Field(default_factory=list, max_length=1024, description="GPU ids the backend assigned, as it saw them")


class TaskPosition(_Message):
    records: int = Field(0, ge=0, le=_MAX_COUNT, description="Records delivered to the trainer so far: a "
                                                              "retry resumes after them")
    bytes: int = Field(0, ge=0, le=_MAX_COUNT, description="Bytes of the task delivered so far")
    offset: int | None = Field(None, ge=0, le=2**63 - 1, description="Kafka: the next offset to read "
                                                                     "(what a retry resumes from)")
    time: int | None = Field(None, ge=-1, le=2**63 - 1, description="Kafka: the timestamp (ms since the epoch) of "
                                                                   "the last record delivered (the event-time watermark)")


class Commit(_Message):
    checkpoint: str | None = Field(None, max_length=_MAX_TEXT, description="The trainer's latest committed "
                                                                             "checkpoint (exactly-once)")
    records: int = Field(0, ge=0, le=_MAX_COUNT, description="Records of the stream that checkpoint covers")


class FeedStats(_Message):
    """How a consuming executor's feeding goes, over its last few seconds (exported as metrics)."""

    bytes_per_s: float = Field(0.0, ge=0, le=_MAX_COUNT, allow_inf_nan=False,
                               description="Bytes written into the trainer's stdin per second")
    records_per_s: float = Field(0.0, ge=0, le=_MAX_COUNT, allow_inf_nan=False,
                                 description="Records written into the trainer's stdin per second")
    buffer_fill: float = Field(0.0, ge=0, le=1, allow_inf_nan=False,
                               description="0..1, share of the read-ahead buffer (readers -> writer) in use: "
                                           "full, the trainer is the bottleneck; empty, the input's storage")


class DataReport(_Message):
    """The data part of a consuming executor's heartbeat (roles with ``consumes_input``)."""

    need_tasks: int = Field(0, ge=0, le=_MAX_COUNT, description="Tasks it can take now")
    held: list[str] | None = Field(None, description="Tasks it has and is not done with; absent: not "
                                                     "reported (assignments are then not resent)")
    progress: dict[str, TaskPosition] = Field(default_factory=dict, description="task id -> position delivered so far")
    done: list[str] = Field(default_factory=list, description="Tasks read to the end")
    failed: dict[str, str] = Field(default_factory=dict, description="task id -> why its reader failed")
    released: list[str] = Field(default_factory=list, description="Tasks handed back on the AM's revoke (Kafka partitions moved "
                                                "to another executor), at the position in progress, and "
                                                "tasks assigned after its trainer's stdin was closed")
    commit: Commit | None = Field(None, description="Exactly-once: the trainer's latest commit; positions "
                                                    "and done tasks then count only what it committed")
    reading: str | None = Field(None, max_length=_MAX_ID,
                                description="The task the trainer was reading last (the only one its death "
                                            "can be charged to)")
    feed: FeedStats | None = Field(None, description="Feed throughput and buffer fill")


class HeartbeatRequest(DataReport):
    """Sent every heartbeat interval; the reply carries the AM's command."""

    incarnation: str = Field(max_length=_MAX_ID)
    id: str | None = Field(None, max_length=_MAX_ID)
    state: Literal["registered", "running"] | None = Field(
        None, description="`registered` while waiting for the start command, `running` once the trainer runs")
    cluster_version: int = Field(0, ge=0, le=_MAX_COUNT, description="The membership version it knows; a "
                                                                     "newer one comes back as a cluster command")
    wait: bool = Field(False, description="Waiting for its start command: the AM holds the request open "
                                          "(long poll, at most one heartbeat interval)")
    ready: bool | None = Field(None, description="The trainer passed its readiness probe")
    draining: str | None = Field(None, max_length=_MAX_TEXT,
                                 description="Why it is draining (a preemption notice): it takes no more tasks "
                                             "and its trainer was told to checkpoint and exit")
    drained: bool = Field(False, description="Draining, and the trainer is gone: these are its final positions, "
                                             "its tasks go to other executors now")
    credentials_version: int = Field(0, ge=0, le=_MAX_COUNT, description="The version of the credentials it has; "
                                     "newer ones come back in the reply")


class UnregisterRequest(_Message):
    """The trainer exited (or never started): the executor's last report."""

    incarnation: str = Field(max_length=_MAX_ID)
    exit_code: int = Field(ge=-(2**31), le=2**31, description="The trainer's exit code (negative: a signal)")
    id: str | None = Field(None, max_length=_MAX_ID)
    message: str = Field("", max_length=_MAX_TEXT, description="Why it ended (kept to 500 characters)")


# --- AM -> executor ---------------------------------------------------------------------------------


class Command(str, enum.Enum):
    NONE = protocol.CMD_NONE
    START = protocol.CMD_START
    KILL = protocol.CMD_KILL
    CLUSTER = protocol.CMD_CLUSTER
    DRAIN = protocol.CMD_DRAIN


class Cluster(_Reply):
    version: int = Field(description="Membership version; bumped on every change")
    roles: dict[str, list[str | None]] = Field(description="role -> `host:first_port` by index (null: not "
                                                           "registered)")


class Feed(_Reply):
    max_tasks: int = Field(description="Ask for more tasks while feeding fewer than this")
    readers: int = Field(description="Tasks read at once")
    exit_grace: float | None = Field(description="Seconds a trainer may run after its stdin closed")
    trainer_buffer: int | None = Field(None, description="At-least-once: bytes a trainer reading stdin itself "
                                                         "may hold taken from the pipe but not processed")
    delivery: Literal["at_least_once", "exactly_once"]
    restore_checkpoint: str | None = Field(description="Exactly-once: the checkpoint a replacement restores")


class TensorflowTask(_Reply):
    roles: list[str] = Field(description="The roles of TF_CONFIG's cluster")
    task: dict[str, str | int] = Field(description="TF_CONFIG's task: {type, index}")


class StartPayload(_Reply):
    command: list[str] = Field(description="The trainer's argv")
    env: dict[str, str] = Field(description="The trainer's environment (besides the executor's own and the "
                                            "membership's: PRIMUS_CLUSTER, TF_CONFIG)")
    cluster: Cluster
    tensorflow: TensorflowTask | None = Field(None, description="A TensorFlow role: the executor composes "
                                                                "TF_CONFIG from this and `cluster`")
    feed: Feed | None = Field(None, description="Roles with consumes_input: stdin is fed input tasks")


class KafkaAssignment(_Reply):
    bootstrap: str
    topic: str
    partition: int
    group: str = Field(description="The consumer group (librdkafka needs one even for assigned partitions)")
    end_time: int | None = Field(None, description="Stop before the first record at or after this time (ms)")
    config: dict[str, str | int | float | bool] = Field(default_factory=dict, description="The source's consumer_config")


class TaskAssignment(_Reply):
    task_id: str
    url: str
    format: str
    compression: str
    start: int = Field(description="First byte (row group for parquet) whose records belong to the task")
    end: int
    skip: int = Field(description="Records already delivered by an earlier attempt")
    kafka: KafkaAssignment | None = Field(None, description="A Kafka partition: read from offset `start` (to "
                                                              "`end`, exclusive, when >= 0)")


class RegisterReply(_Reply):
    ok: bool = Field(description="False: an unknown or stale incarnation, which must exit")
    heartbeat_interval: float | None = None
    heartbeat_timeout: float | None = None
    command: Command | None = None
    reason: str | None = None


class Credentials(_Reply):
    version: int = Field(description="Heartbeats say it back once taken")
    env: dict[str, str] = Field(description="Environment values to use from now on (a WebHDFS delegation token)")


class HeartbeatReply(_Reply):
    command: Command
    reason: str | None = Field(None, description="kill, drain: why")
    start: StartPayload | None = None
    cluster: Cluster | None = Field(None, description="cluster: the new membership")
    tasks: list[TaskAssignment] | None = Field(None, description="New input tasks, or ones the executor "
                                                                  "did not list in `held`")
    data_exhausted: bool | None = Field(None, description="No input task is left anywhere")
    revoke: list[str] | None = Field(None, description="Kafka partitions to hand back (reported in `released` "
                                                        "once the trainer consumed what was fed of them)")
    credentials: Credentials | None = Field(None, description="Newer credentials than the heartbeat's "
                                                              "`credentials_version`")


class UnregisterReply(_Reply):
    ok: bool


# --- users -> AM ------------------------------------------------------------------------------------


class EndRequest(_Control):
    """Body of /job/kill and /job/succeed (optional)."""

    reason: str = Field("", max_length=_MAX_TEXT, description="Recorded as the job's reason")


class ScaleRequest(_Control):
    replicas: int = Field(ge=0, le=100_000, description="The role's new number of executors")


class SavepointRequest(_Control):
    dir: str = Field(min_length=1, max_length=_MAX_TEXT, description="An absolute path, or a file://, "
                                                                     "hdfs:// or webhdfs://host:port URL")


class EmptyRequest(_Control):
    """A body without fields (an empty body is fine too)."""


class TaskActionRequest(_Control):
    """Body of /data/tasks/requeue and /data/tasks/skip."""

    task: str = Field(min_length=1, max_length=_MAX_TEXT, description="The task id (as in the task table)")
    reason: str = Field("", max_length=_MAX_TEXT, description="Recorded with the event")
    holder: str | None = Field(
        None, max_length=_MAX_TEXT, description="skip: the executor the caller was told reads the task ('' for "
        "none). If another one reads it now (or none does), the skip is refused (409), so that no executor is "
        "restarted that the caller was not told of; omitted, nothing is checked.")


class RestartRequest(_Control):
    """Body of /executors/{id}/restart (optional)."""

    reason: str = Field("", max_length=_MAX_TEXT, description="Recorded with the event")


class DrainRequest(_Control):
    """Body of /executors/{id}/drain (optional)."""

    reason: str = Field("", max_length=_MAX_TEXT, description="Recorded with the event")


class StatusQuery(_Query):
    events: int = Field(50, ge=0, le=_MAX_COUNT, description="How many recent events")
    view: Literal["full", "summary"] = Field(
        "full", description="`summary`: job, roles (counts by state, ready, restarts, failures), data and events, "
                            "without a row per executor (those are paged by GET /executors): a few KiB however "
                            "many executors the job has")


class EventsQuery(_Query):
    since: int = Field(0, ge=0, le=_MAX_COUNT, description="Skip the first N events")
    subject: str | None = Field(None, max_length=_MAX_ID, description="Only events whose subject starts with this "
                                                                      "(`job`, `data`, `task/`, `role/`, `worker-`)")
    q: str | None = Field(None, max_length=_MAX_ID, description="Only events whose subject, states, reason or actor "
                                                                "contain this text (case-insensitive)")
    limit: int = Field(100_000, ge=1, le=100_000, description="At most this many events (the first ones matching)")


class TasksQuery(_Query):
    state: Literal["queued", "running", "done", "failed", "quarantined"] | None = Field(
        None, description="Only tasks in this state")
    q: str | None = Field(None, max_length=_MAX_ID, description="Only tasks whose id contains this text")
    offset: int = Field(0, ge=0, le=_MAX_COUNT, description="Skip this many matching tasks (in reading order)")
    limit: int = Field(50, ge=1, le=1000, description="At most this many tasks")


class TimelineQuery(_Query):
    since: float = Field(0.0, ge=0, description="Only samples taken after this time (epoch seconds)")


class LogQuery(_Query):
    offset: int = Field(-65536, ge=-(2**40), le=2**40, description="First byte to return; negative: that many bytes "
                                                                   "before the end (a tail)")
    limit: int = Field(65536, ge=1, le=1 << 20, description="At most this many bytes")
    attempt: int | None = Field(None, ge=0, le=_MAX_COUNT, description="The executor's incarnation of this "
                                "attempt (0 the first, as `restarts` counts); default: its current one")


# Bounds the ids one GET /executors may name, so that a request line stays below what aiohttp reads
# (8190 bytes) however they percent-encode; clients ask for more in parts.
EXECUTOR_IDS_MAX_LENGTH = 512
_EXECUTOR_STATE = "|".join(state.value for state in ExecutorState)
EXECUTOR_STATES_PATTERN = f"^({_EXECUTOR_STATE})(,({_EXECUTOR_STATE}))*$"


class ExecutorsQuery(_Query):
    """Which current executors, in the order of their role in the spec, then their index. The same
    filter serves the AM, the history server and a client reading a status file (``matcher``, ``window``)."""

    role: str | None = Field(None, max_length=_MAX_ID, description="Only this role")
    state: str | None = Field(None, max_length=100, pattern=EXECUTOR_STATES_PATTERN,
                              description="Only executors in this state, or in any of several, comma-separated "
                                          "(`failed,lost`)")
    ids: str | None = Field(None, max_length=EXECUTOR_IDS_MAX_LENGTH, description="Only these executors, comma-separated "
                                                             "`<role>-<index>`")
    offset: int = Field(0, ge=0, le=_MAX_COUNT, description="Skip this many matching executors")
    limit: int | None = Field(None, ge=1, le=100_000, description="At most this many executors (default: every "
                                                                  "one from `offset`)")
    history: bool = Field(False, description="Include earlier incarnations (1/true; filtered by role, state and "
                                             "ids, not paged)")

    def matcher(self) -> Callable[[str, str, str], bool]:
        """``matches(role, state, executor_id)``: whether an executor passes the filters."""
        role = self.role
        states = frozenset(self.state.split(",")) if self.state else None
        ids = frozenset(self.ids.split(",")) if self.ids else None

        def matches(executor_role: str, state: str, executor_id: str) -> bool:
            return ((role is None or executor_role == role) and (states is None or state in states)
                    and (ids is None or executor_id in ids))
        return matches

    def window(self, rows: Sequence[T]) -> list[T]:
        """The page of ``rows`` (the matching executors, in order) that ``offset`` and ``limit`` ask for."""
        end = None if self.limit is None else self.offset + self.limit
        return list(rows[self.offset:end])


# --- AM -> users: the status document ---------------------------------------------------------------


class AMAttempt(_Reply):
    attempt: int = Field(description="The AM attempt (2 for the first restart)")
    started_at: float = Field(description="When it started")
    down_since: float | None = Field(description="When the attempt before it was found dead")
    recovered_at: float | None = Field(description="When every executor kept had been adopted or found gone")
    adopted: int = Field(description="Executors still running that it adopted")
    gone: int = Field(description="Executors that ended while no AM was there")
    cause: str | None = Field(None, description="What ended the attempt before it, as its backend tells "
                                                "(\"killed by signal 9\", YARN's diagnostics); null: not known")


class JobSummary(_Reply):
    app_id: str
    name: str
    state: JobState
    stopping: JobState | None = Field(None, description="The outcome decided while the executors stop; "
                                      "``state`` becomes it once they all have")
    reason: str = Field(description="Why the job reached its final state")
    attempt: int = Field(1, description="The AM attempt serving the job (1 until the AM was restarted)")
    am_attempts: list[AMAttempt] = Field(default_factory=list, description="Each AM restart, oldest first")
    # Defaults: what a client knows of a job whose AM has not written a status yet (or never will).
    created_at: float | None = Field(None, description="When the AM recorded the job (null: no AM has yet)")
    started_at: float | None = None
    finished_at: float | None = None
    cluster_version: int = 0
    tags: dict[str, str] = Field(default_factory=dict)


class AutoscaleDecision(_Reply):
    time: float = Field(description="When it was made")
    from_replicas: int
    to_replicas: int
    reason: str = Field(description="The backlog against the target, e.g. 'backlog 120,000 records > 2 x 10,000 "
                                    "per replica: 2 -> 4 (max 4)'")


class AutoscaleView(_Reply):
    """A role's ``autoscale`` policy as the spec gives it, and the last change it made."""

    min_replicas: int
    max_replicas: int
    target_lag: int | None = Field(description="Kafka: records of consumer lag per replica")
    target_queued: str | None = Field(description="Files: queued bytes per replica, as a size ('1Gi')")
    target_catchup: float | None = Field(description="Seconds the backlog may take to drain")
    cooldown: float
    interval: float
    last_decision: AutoscaleDecision | None


class RoleView(_Reply):
    name: str
    replicas: int
    released: bool = Field(description="Its trainers may start (the start barrier opened)")
    ignored: bool = Field(description="Failure budget exhausted with on_exhausted=ignore_role")
    failures: int
    restarts: int
    states: dict[ExecutorState, int] = Field(description="Current executors by state")
    ready: int = Field(description="Current executors whose trainer passed the role's readiness probe")
    autoscale: AutoscaleView | None = Field(None, description="Sized on the input's backlog (Role.autoscale)")


class ExecutorView(_Reply):
    id: str
    role: str
    index: int
    incarnation: str
    attempt: int
    state: ExecutorState
    host: str | None
    ports: list[int]
    pid: int | None
    gpus: list[int]
    exit_code: int | None
    reason: str
    logs: dict[str, str]
    created_at: float
    registered_at: float | None
    running_at: float | None
    finished_at: float | None
    ready: bool = Field(description="Its trainer passed the role's readiness probe")
    ready_at: float | None
    heartbeat_at: float | None = Field(None, description="When its last report (register or heartbeat) arrived")
    stop_reason: str | None = Field(description="Set once the AM asked it to stop")
    preempted: bool = Field(False, description="It ended preempted (the backend said so, a preemption exit "
                                               "code, or it drained): not charged to its failure budget")
    draining: str | None = Field(None, description="Why it drains (a preemption notice): it takes no more "
                                                   "tasks, its trainer was told to checkpoint and exit")
    restarts: int | None = Field(None, description="Current executors only: replacements so far")


class EventView(_Reply):
    seq: int
    time: float
    subject: str = Field(description='"job", "data", "task/<id>", "role/<name>" or an executor id')
    from_state: str | None
    to_state: str
    reason: str
    exit_code: int | None
    incarnation: str | None
    actor: str | None = Field(None, description="Who asked for it, for changes a user requested (the web UI's "
                                                "signed-in name, or the API caller's X-Primus-User)")


class KafkaPartitionView(BaseModel):
    topic: str
    partition: int
    task: str
    state: Literal["queued", "running", "done", "failed", "quarantined"]
    holder: str | None = Field(description="The executor incarnation reading it")
    offset: int = Field(description="The next offset to read (the task's checkpoint)")
    end: int | None = Field(description="Where reading stops (exclusive); null: a stream, or an end time not reached")
    high: int | None = Field(description="The partition's end (next offset to be written) at the last reading")
    lag: int | None = Field(description="Records between offset and the end (or high); null until known")
    records: int = Field(description="Records delivered from it, over every attempt")
    time: str | None = Field(description="Timestamp of the last record delivered (ISO 8601, UTC)")


class KafkaStatus(BaseModel):
    """The Kafka source's progress (``data.kafka``)."""

    source: str
    bootstrap_servers: str
    topics: list[str]
    group: str = Field(description="The consumer group its offsets are committed to")
    start: str = Field(description="committed, earliest, latest or the time reading starts at")
    end: str | dict[str, dict[int, int]] | None
    consumer_config: dict[str, Any] = Field(description="Passed to librdkafka; secret values masked")
    reachable: bool = Field(description="Whether the brokers answered the last reading")
    unreachable_since: str | None
    lag: int | None = Field(description="Records of lag over every partition; null until every one is known")
    records_per_s: float = Field(description="Records delivered per second over the last 30 s")
    eta_seconds: float | None = Field(description="lag / records_per_s")
    watermark: str | None = Field(description="Event time up to which every partition is read: the earliest "
                                              "last-delivered timestamp of the partitions that still lag")
    progress: float | None = Field(description="0..1 of the offsets to read, with a bounded end only")
    partitions: list[KafkaPartitionView]


class DataStatus(BaseModel):
    """Input progress (more fields may be added)."""

    model_config = ConfigDict(extra="allow")
    state: Literal["scanning", "running", "suspended", "exhausted", "succeeded", "incomplete", "failed"] = Field(
        description="incomplete: the job succeeded with tasks left unread (input.early_exit: accept)")
    tasks: dict[str, int]
    bytes: dict[str, int]
    records_done: int
    progress: float | None = Field(description="0..1, bytes done over the bytes of the whole input; null while "
                                               "partitions are still awaited (the total is not known)")
    progress_of_discovered: float = Field(description="0..1, bytes done over the bytes of the tasks listed so far")
    partitions_listed: int = Field(description="Partitions listed so far")
    rate_bytes_per_s: float
    eta_seconds: float | None
    watermark: str | None = Field(description="Latest partition consumed completely, with all before it")
    scan_complete: bool
    waiting_for: str | None
    quarantined: list[str]
    failure: str | None
    kafka: KafkaStatus | None = Field(None, description="The Kafka source's lag, watermark and partitions")


#: Where an executor's time goes, as the AM accounts it (``Goodput.seconds``' keys).
GoodputCause = Literal["productive", "pending_resources", "restarting", "waiting_for_data", "draining"]


class Goodput(_Reply):
    """The job's goodput: where its executors' time went, in executor-seconds, from each one's
    creation to now (or to its end).

    productive: its trainer runs and trains (a role that consumes input: it holds an input task);
    pending_resources: a first incarnation not running its trainer yet (launch, registration, the
    start order); restarting: a replacement not running its trainer yet, from the end of the
    incarnation before it; waiting_for_data: its trainer runs, but it holds no input task while the
    input is not exhausted; draining: told to drain (a preemption notice) until it exited.
    """

    ratio: float | None = Field(description="Effective training time ratio (ETTR): productive seconds over every "
                                            "second accounted, 0..1; null before any second was")
    seconds: dict[GoodputCause, float] = Field(description="Executor-seconds by cause")
    as_of: float | None = Field(None, description="When they were counted (epoch seconds): the AM counts them "
                                                  "afresh when an executor changes cause, else every 5 s")


class StatusSummary(_Reply):
    """GET /status?view=summary: the job, its roles' counts and its data, without a row per executor."""

    job: JobSummary
    roles: list[RoleView]
    events: list[EventView]
    data: DataStatus | None
    goodput: Goodput | None = Field(None, description="Where the executors' time went (null: an AM that does not "
                                                      "account it, or no AM yet)")


class StatusDocument(StatusSummary):
    """GET /status, and the status file an AM leaves behind (which also has ``history``)."""

    executors: list[ExecutorView]
    history: list[ExecutorView] | None = Field(None, description="Earlier incarnations (status file only)")

    @classmethod
    def without_am(cls, app_id: str, name: str, state: JobState, reason: str,
                   tags: dict[str, str] | None = None) -> "StatusDocument":
        """What a client says of a job no AM has described: ``pending`` while its AM starts, ``lost``
        when it died before writing a status. No roles, executors, events or data: none is known."""
        return cls(job=JobSummary(app_id=app_id, name=name, state=state, reason=reason, tags=tags or {}),
                   roles=[], events=[], data=None, executors=[])

    def lost(self, reason: str, finished_at: float | None = None) -> "StatusDocument":
        """This last snapshot of a job whose AM exited without an outcome, as the client reports it.

        No AM watches its executors any more: those the snapshot had alive show ``lost`` (their last
        known state in the reason), never ``running`` for a job that is over."""
        unwatched = "no AM watches it any more (last seen {state})"
        executors = [ex.model_copy(update={"state": ExecutorState.LOST,
                                           "reason": unwatched.format(state=ex.state.value)})
                     if ex.state.alive or ex.state is ExecutorState.NEW else ex for ex in self.executors]
        roles = []
        for role in self.roles:
            live = {state for state in role.states if state.alive or state is ExecutorState.NEW}
            states = {state: 0 if state in live else n for state, n in role.states.items()}
            gone = sum(role.states[state] for state in live)
            if gone:
                states[ExecutorState.LOST] = states.get(ExecutorState.LOST, 0) + gone
            roles.append(role.model_copy(update={"states": states, "ready": 0}))
        job = self.job.model_copy(update={"state": JobState.LOST, "reason": reason, "stopping": None,
                                          "finished_at": finished_at or self.job.finished_at})
        return self.model_copy(update={"job": job, "roles": roles, "executors": executors})

    def summary(self) -> StatusSummary:
        """As ``GET /status?view=summary`` has it: without the executors' rows and history."""
        return StatusSummary.model_construct(job=self.job, roles=self.roles, events=self.events, data=self.data,
                                             goodput=self.goodput)


class JobEntry(_Reply):
    """One job of ``primus list``: what its backend keeps of it without asking its AM."""

    app_id: str
    name: str
    state: JobState
    tags: dict[str, str]
    reason: str
    created_at: float
    finished_at: float | None


class TaskView(_Reply):
    id: str
    partition: str = Field(description='Its time partition ("" without a time range)')
    source: str
    url: str
    start: int = Field(description="First byte (row group for parquet) of its range")
    end: int
    size: int = Field(description="Bytes it stands for")
    state: Literal["queued", "running", "done", "failed", "quarantined"]
    attempts: int = Field(description="Attempts charged to it (reader failures, poison records)")
    interruptions: int = Field(description="Times the executor reading it ended (uncharged)")
    records: int = Field(description="Records delivered: the position a retry resumes from")
    bytes_done: int
    holder: str | None = Field(description="The executor reading it (`<role>-<index>`)")
    error: str = Field(description="The last error charged to it")
    offset: int | None = Field(None, description="A Kafka partition: the next offset to read")


class TasksPage(_Reply):
    """GET /data/tasks: one page of the task table, in reading order."""

    total: int = Field(description="Tasks matching the query")
    offset: int
    limit: int
    tasks: list[TaskView]


class PartitionView(_Reply):
    source: str
    partition: str = Field(description='"" without a time range')
    tasks: int
    done: int
    quarantined: int
    running: int
    bytes: int
    bytes_done: int


class SourceView(_Reply):
    name: str
    watermark: str | None = Field(description="Latest partition of this source consumed completely, with all "
                                              "before it")


class PartitionsReply(_Reply):
    """GET /data/partitions: progress per source and partition, and what the scan still waits for."""

    partitions: list[PartitionView]
    sources: list[SourceView]
    watermark: str | None
    waiting_for: str | None = Field(description="The marker or path the scan waits for (a partition not there yet)")
    scan_complete: bool


class TimelineSample(_Reply):
    time: float
    records_done: int
    bytes_done: int
    tasks_done: int
    tasks_quarantined: int
    executors: dict[ExecutorState, int] = Field(description="Current executors by state, all roles")
    ready: int
    restarts: int = Field(description="Replacements so far, all roles")


class TimelineReply(_Reply):
    """GET /timeline: the job's life in samples (at most a few thousand: older ones are thinned out)."""

    interval: float = Field(description="Seconds between samples now")
    samples: list[TimelineSample]


class LogChunk(_Reply):
    """GET /executors/{id}/logs/{stream}: a slice of one log file of the executor's current incarnation
    (or of the one its ``attempt`` asked for)."""

    executor: str
    stream: str
    offset: int = Field(description="Where this slice starts")
    next_offset: int = Field(description="Where the next slice starts (this one's end, in bytes)")
    size: int | None = Field(description="The file's size when read (null when the backend cannot tell)")
    text: str = Field(description="The bytes read, decoded as UTF-8 (invalid bytes replaced)")


class WhoAmI(_Reply):
    """GET /whoami: who the caller is and what the server behind the page is."""

    user: str = Field(description="The signed-in name, or `token` for a caller with the job token")
    live: bool = Field(description="The job's AM (actions allowed) rather than the history of a finished job")
    app_id: str


class RestartReply(_Reply):
    executor: str
    incarnation: str = Field(description="The incarnation being stopped; its replacement follows once it ended")


class DrainReply(_Reply):
    executor: str
    incarnation: str = Field(description="The incarnation told to drain; its replacement follows once it exited")


class RolesReply(_Reply):
    roles: list[RoleView]


class ExecutorsReply(_Reply):
    """GET /executors: one page of the current executors matching the query."""

    total: int = Field(description="Current executors matching the query (every page)")
    offset: int
    limit: int | None
    executors: list[ExecutorView]
    history: list[ExecutorView] | None = None


class EventsReply(_Reply):
    events: list[EventView]


class Accepted(_Reply):
    accepted: bool
    state: Literal["killing", "succeeding"]


class ScaleReply(_Reply):
    role: str
    replicas: int


class SavepointReply(_Reply):
    dir: str
    tasks: int
    done: int
    records: int


class ErrorReply(_Reply):
    error: str = Field(description="What was wrong, naming the field and the value given")


# --- errors -----------------------------------------------------------------------------------------


class RequestError(Exception):
    """A request the AM (or the history server) refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status



def describe(exc: ValidationError, what: str) -> str:
    """``what: field.path: should be a valid integer, got 'many'; ...`` for a user to read."""
    problems = []
    for error in exc.errors(include_url=False)[:5]:
        path = ".".join(str(part) for part in error["loc"])
        text = error["msg"].removeprefix("Input ").lower()
        given = "" if error["type"] == "missing" else f", got {_short(error['input'])}"
        problems.append(f"{path + ': ' if path else ''}{text}{given}")
    more = exc.error_count() - len(problems)
    return f"{what}: " + "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
