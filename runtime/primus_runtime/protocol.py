"""The wire contract between the Application Master and its executors.

Standard library only: the executor imports this module on cluster nodes that
have nothing but Python. Every message is a JSON object sent over HTTP/1.1
(keep-alive, over TLS for a job with ``am.tls``) to the AM with ``Authorization: Bearer <job token>``. The AM reads
them as the pydantic models of ``models.py`` (strict types; a malformed message
gets a 400 naming the field); tests/test_contract.py runs the real executor and
checks every field it sends is one those models read.

Executor -> AM (all POST, JSON bodies):

``/api/v1/executors/register``
    ``{"id", "role", "index", "incarnation", "host", "ports": [int], "pid", "gpus": [int]}``
    -> ``{"ok": true, "heartbeat_interval": s, "heartbeat_timeout": s}`` or
    ``{"ok": false, "command": "kill", "reason": ...}`` for a zombie.

``/api/v1/executors/heartbeat``
    ``{"id", "incarnation", "state": "registered" | "running",
    "cluster_version": int, "wait": bool, "ready": bool}``.
    ``ready`` is true once the trainer passed its readiness probe (START's ``readiness``);
    the executor sends that heartbeat at once, not an interval later.
    ``wait`` is true while the executor waits for its start command: the AM
    then holds the request open (long poll, at most one heartbeat interval)
    so the start reaches it the moment the start barrier opens.
    -> ``{"command": "none"}``, ``{"command": "start", "start": START}``,
    ``{"command": "kill", "reason": ...}``, ``{"command": "cluster",
    "cluster": CLUSTER}`` when the membership changed, or ``{"command": "drain", "reason": ...}``
    (``POST /api/v1/executors/{id}/drain``: leave as on a preemption notice, see below).

    Draining (a preemption notice: SIGTERM, the role's ``preemption.signal``, its
    ``preemption.notice_file`` appearing, or the drain command): the executor stops asking for
    tasks and feeding records, forwards SIGTERM to the trainer and gives it
    ``preemption.grace`` seconds to checkpoint and exit. Meanwhile every heartbeat carries
    ``"draining": why``; its last one, sent once the trainer is gone, adds ``"drained": true``
    with the final positions, and the AM hands its tasks to other executors at once. Then it
    exits ``EXIT_PREEMPTED``, which the AM always counts as a preemption (uncharged).

    An executor of a role with ``consumes_input`` (its START has ``feed``) adds its
    data report to every heartbeat once running: ``"need_tasks": n`` (tasks it can
    take now), ``"held": [task_id]`` (tasks it has and is not done with),
    ``"progress": {task_id: {"records": n, "bytes": b}}`` (records and bytes of the
    task delivered to the trainer so far: a retry resumes after ``records``; a Kafka task adds
    ``"offset"``, the next offset to read, and ``"time"``, its last delivered record's timestamp in ms),
    ``"done": [task_id]``, ``"failed": {task_id: error}``, ``"released": [task_id]`` (Kafka tasks
    handed back on a revoke, once the trainer consumed what was fed of them; tasks assigned after the
    trainer's stdin was closed, which it can never read), ``"reading": task_id`` (the task the
    trainer was reading last: when it dies, only that task can be charged; see data/dispatcher.py),
    ``"feed": {"bytes_per_s", "records_per_s", "buffer_fill"}`` (bytes and records written into
    the trainer's stdin per second over the last few seconds, and the share 0..1 of the read-ahead
    buffer between its readers and the writer in use; the AM exports them as metrics) and, under
    exactly-once, ``"commit": {"checkpoint", "records"}`` (the trainer's latest commit; positions and
    done tasks then count only what it committed). The reply may then
    also carry ``"tasks": [TASK]`` (new assignments, or ones the executor does not
    list in ``held`` and so never received), ``"revoke": [task_id]`` (Kafka partitions the AM moves
    to another executor: stop reading them) and ``"data_exhausted": true`` (no task
    is left anywhere: once it holds nothing, the executor closes the trainer's stdin).

    Every heartbeat says ``"credentials_version": n``, the version of the credentials the executor
    has (``PRIMUS_CREDENTIALS_VERSION`` at launch, 0 without); while the backend's are newer, a reply
    carries ``"credentials": {"version": n, "env": {name: value}}``, which the executor takes into its
    environment for what it opens from then on (only the names in ``CREDENTIAL_ENV``: YARN's WebHDFS
    delegation token, renewed and replaced by the AM for the life of the job).

``/api/v1/executors/unregister``
    ``{"id", "incarnation", "exit_code": int, "message": str}`` -> ``{"ok": true}``

``START`` is ``{"command": argv list, "env": {name: value}, "cluster": CLUSTER,
"readiness": "spawned" | "ports" | "file"}``: when the trainer counts as ready (the role's
``readiness.probe`` with ``auto`` resolved; see ``executor/readiness.py``). ``env`` has no
variable that depends on the membership: the executor adds them from ``cluster``
(``membership_env``); a TensorFlow role's START also has ``"tensorflow": {"roles": [role],
"task": {"type", "index"}}``, from which it composes TF_CONFIG.
``START`` of a consuming role also has ``"feed": {"max_tasks": n, "readers": r,
"exit_grace": s or null, "delivery", "restore_checkpoint", "trainer_buffer": b}``: the trainer's stdin is then a pipe
the executor feeds, it reads up to ``r`` tasks at once and asks for more while it feeds fewer than ``n``; a
trainer still running ``s`` seconds after its stdin was closed is stopped; a trainer that reads stdin
itself holds at most ``b`` bytes taken from the pipe but not processed (absent: ``feed.TRAINER_BUFFER``).
``TASK`` is ``{"task_id", "url", "format", "compression", "start", "end", "skip"}``:
read the records of ``url`` that start in ``[start, end)`` (row groups for parquet)
with ``data.records.read_records``, after skipping ``skip`` of them. A Kafka task adds ``"kafka":
{"bootstrap", "topic", "partition", "group", "end_time", "config"}``: read the partition from offset
``start`` (to ``end`` exclusive when ``end >= 0``, and before the first record at or after
``end_time`` ms when given), counting records from ``skip`` (``data/kafka_reader.py``).
``CLUSTER`` is ``{"version": int, "roles": {role: [address or null, ...]}}``,
address being ``host:first_port`` of the executor at that index, for the roles the executor's
role sees (``Role.peers``; every role by default); ``version`` moves on when one of them changes.

An executor is named ``<role>-<index>``; each (re)start of the same index gets
a new ``incarnation`` string. Reports carrying an older incarnation are
rejected with a kill command: that is how zombies are fenced off.
"""

from __future__ import annotations

import json

API_PREFIX = "/api/v1"
REGISTER_PATH = API_PREFIX + "/executors/register"
HEARTBEAT_PATH = API_PREFIX + "/executors/heartbeat"
UNREGISTER_PATH = API_PREFIX + "/executors/unregister"
# The job token may come in this header instead of ``Authorization: Bearer`` (through proxies that
# take the Authorization header for themselves, like the Kubernetes API server's).
TOKEN_HEADER = "X-Primus-Token"
# Header an API caller names itself with, recorded with its actions (the CLI sends the OS user).
USER_HEADER = "X-Primus-User"

# Commands the AM sends in heartbeat replies.
CMD_NONE = "none"
CMD_START = "start"
CMD_KILL = "kill"
CMD_CLUSTER = "cluster"
CMD_DRAIN = "drain"

# States an executor reports about itself.
REPORT_REGISTERED = "registered"
REPORT_RUNNING = "running"

# Environment the backend gives the executor process.
ENV_AM_ADDRESS = "PRIMUS_AM_ADDRESS"  # host:port of the AM API
# Instead of the address, for executors started before their AM (YARN's first containers): a URL
# answering the JSON {"address": "host:port"} once the AM runs; the executor polls it.
ENV_AM_INFO_URL = "PRIMUS_AM_INFO_URL"
# How long such an executor waits for its AM to publish its address.
AM_INFO_PATIENCE = 300.0
ENV_TOKEN_FILE = "PRIMUS_TOKEN_FILE"  # file holding the job token (never the token itself)
# Set for a job with ``am.tls``: the job's CA certificate (a PEM file); the AM API is then https and
# its certificate must verify against this CA and name the AM's host.
ENV_TLS_CA_FILE = "PRIMUS_TLS_CA_FILE"
ENV_APP_ID = "PRIMUS_APP_ID"
ENV_ROLE = "PRIMUS_ROLE"
ENV_INDEX = "PRIMUS_INDEX"
ENV_INCARNATION = "PRIMUS_INCARNATION"
ENV_NUM_PORTS = "PRIMUS_NUM_PORTS"
ENV_LOG_DIR = "PRIMUS_LOG_DIR"  # where the executor writes its and the trainer's logs
ENV_WORK_DIR = "PRIMUS_WORK_DIR"  # the trainer's working directory
ENV_HEARTBEAT_TIMEOUT = "PRIMUS_HEARTBEAT_TIMEOUT"  # seconds without the AM before giving up
ENV_KILL_GRACE = "PRIMUS_KILL_GRACE"  # seconds between SIGTERM and SIGKILL of the trainer
ENV_STORAGE_OUTAGE_TIMEOUT = "PRIMUS_STORAGE_OUTAGE_TIMEOUT"  # input.storage_outage_timeout, seconds
ENV_GPUS = "PRIMUS_GPUS"  # comma-separated GPU ids the backend assigned
ENV_EXECUTOR_HOST = "PRIMUS_EXECUTOR_HOST"  # address other executors reach this one at
# Optional: a cgroup v2 directory the backend made for this executor; the trainer runs in it, and
# everything the trainer starts with it, whatever session or process group it moves to.
ENV_CGROUP = "PRIMUS_CGROUP"
# Optional, for backends whose container log is what users read (Kubernetes): "1" copies the
# trainer's stdout/stderr to the executor's own as well as to its log files.
ENV_LOG_TO_CONSOLE = "PRIMUS_LOG_TO_CONSOLE"
# Optional: a file the executor creates once its trainer passed the readiness probe (a pod's
# readinessProbe checks it).
ENV_READY_MARKER = "PRIMUS_READY_MARKER"
# Optional: a directory whose files the executor links into the trainer's working directory (the
# role's ``files``, where the backend cannot put them there itself).
ENV_FILES_DIR = "PRIMUS_FILES_DIR"
# How long the executor keeps its trainer running while the AM is unreachable (a restarted AM
# adopts it); the heartbeat timeout when the job's AM is not restarted.
ENV_AM_RECOVERY_GRACE = "PRIMUS_AM_RECOVERY_GRACE"
# Optional, local backend: a file holding the AM's {"address"}, reread while the AM is unreachable
# (a restarted AM listens on a new port).
ENV_AM_INFO_FILE = "PRIMUS_AM_INFO_FILE"
# Set by the local supervisor for a restarted AM: its attempt number; by every backend that restarts
# the AM: when the last one was found dead (epoch seconds) and what ended it ("killed by signal 9",
# YARN's diagnostics of the attempt...).
ENV_AM_ATTEMPT = "PRIMUS_AM_ATTEMPT"
ENV_AM_DOWN_SINCE = "PRIMUS_AM_DOWN_SINCE"
ENV_AM_DOWN_CAUSE = "PRIMUS_AM_DOWN_CAUSE"
# Local backend: the AM's first process forks its supervisor (JSON: job_dir, bundle, max_attempts).
ENV_AM_SUPERVISOR = "PRIMUS_AM_SUPERVISOR"
# Set for the AM process by a backend that knows the AM's address before it starts (Kubernetes: the
# pod IP and port): ``host:port`` it listens on before importing anything else (``am/early.py``).
ENV_AM_LISTEN = "PRIMUS_AM_LISTEN"
# Optional, the role's ``preemption`` section: a file whose appearance is a preemption notice (polled
# every heartbeat), an extra signal that is one (a name, e.g. SIGUSR1; SIGTERM always is), and the
# seconds a draining trainer gets between SIGTERM and SIGKILL (default: PRIMUS_KILL_GRACE).
ENV_PREEMPTION_NOTICE_FILE = "PRIMUS_PREEMPTION_NOTICE_FILE"
ENV_PREEMPTION_SIGNAL = "PRIMUS_PREEMPTION_SIGNAL"
ENV_PREEMPTION_GRACE = "PRIMUS_PREEMPTION_GRACE"
# "0": SIGTERM is not a preemption notice, it stops the executor (YARN: the NodeManager sends it for
# every kill, memory limits included, and SIGKILL 250 ms later; its container status says which).
ENV_SIGTERM_IS_NOTICE = "PRIMUS_SIGTERM_IS_NOTICE"
# The version of the credentials an executor was launched with (see the heartbeat's
# ``credentials_version``), and the environment names a heartbeat reply may set.
ENV_CREDENTIALS_VERSION = "PRIMUS_CREDENTIALS_VERSION"
CREDENTIAL_ENV = frozenset({"PRIMUS_WEBHDFS_DELEGATION"})

# Exit code of an executor that gave up because the AM was unreachable.
EXIT_AM_UNREACHABLE = 75
# Exit code of an executor that drained on a preemption notice: never charged, whatever the role's
# failover.preemption_exit_codes say.
EXIT_PREEMPTED = 76
# Exit code of an executor that could not launch its trainer (bad command...).
EXIT_LAUNCH_FAILED = 127


def executor_id(role: str, index: int) -> str:
    return f"{role}-{index}"


# Environment the executor gives the trainer (besides the role's own `env`):
#   PRIMUS_APP_ID, PRIMUS_ROLE, PRIMUS_INDEX, PRIMUS_INCARNATION, PRIMUS_HOST
#   PRIMUS_AM_ADDRESS
#   PRIMUS_PORTS         comma-separated ports reserved for this executor, PRIMUS_PORT the first
#   PRIMUS_ROLE_REPLICAS executors of this role
#   PRIMUS_ROLE_COUNTS   JSON {role: replicas}; also PRIMUS_NUM_<ROLE> (upper case, - as _)
#   PRIMUS_CLUSTER       JSON {role: ["host:port" or null, ...]} at start (the roles of Role.peers);
#                        left out when longer than MAX_CLUSTER_ENV (a variable of more than 128 KiB
#                        cannot be passed to a program): read PRIMUS_CLUSTER_FILE then
#   PRIMUS_CLUSTER_FILE  JSON file {"version": n, "roles": {...}} rewritten (atomically) when
#                        the membership changes, e.g. after a scale; trainers may poll it
#   CUDA_VISIBLE_DEVICES the GPUs assigned to the executor ("" when none)
#   TF_CONFIG            framework tensorflow
#   MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE  framework pytorch
#   PRIMUS_INPUT_FRAMING roles with consumes_input: "lines" (each record ends with a newline)
#                        or "length_prefixed" (4-byte big-endian length, then the record) on stdin
TRAINER_ENV_CLUSTER = "PRIMUS_CLUSTER"
MAX_CLUSTER_ENV = 100_000
TRAINER_ENV_INPUT_FRAMING = "PRIMUS_INPUT_FRAMING"
#   PRIMUS_DATA_COMMIT_FILE    delivery exactly_once: the trainer appends {"checkpoint", "records"}
#                              lines here right after saving a model checkpoint
#   PRIMUS_RESTORE_CHECKPOINT  delivery exactly_once: the checkpoint a replacement trainer restores
TRAINER_ENV_COMMIT_FILE = "PRIMUS_DATA_COMMIT_FILE"
#   PRIMUS_READ_POSITION_FILE  roles with consumes_input: 16 bytes, [1 once in use, records the trainer
#                              is done with], written by data.reader.records() (exact resume positions)
TRAINER_ENV_READ_POSITION = "PRIMUS_READ_POSITION_FILE"
TRAINER_ENV_RESTORE_CHECKPOINT = "PRIMUS_RESTORE_CHECKPOINT"
FRAMING_LINES = "lines"
FRAMING_LENGTH_PREFIXED = "length_prefixed"
TRAINER_ENV_CLUSTER_FILE = "PRIMUS_CLUSTER_FILE"
#   PRIMUS_READY_FILE    readiness probe file: the trainer creates this file once it is ready
#                        (primus_runtime.trainer_api.ready())
TRAINER_ENV_READY_FILE = "PRIMUS_READY_FILE"


def membership_env(cluster: dict, tensorflow: dict | None) -> dict[str, str]:
    """The trainer variables that depend on the membership, from a START's ``cluster`` and
    ``tensorflow``: PRIMUS_CLUSTER (unless too long for a variable), and TF_CONFIG for a TensorFlow
    role (its cluster: the addresses known of each of its roles)."""
    roles = cluster.get("roles", {})
    env = {}
    encoded = json.dumps(roles, sort_keys=True)
    if len(encoded) <= MAX_CLUSTER_ENV:
        env[TRAINER_ENV_CLUSTER] = encoded
    if tensorflow is not None:
        env["TF_CONFIG"] = json.dumps({
            "cluster": {name: [a for a in roles.get(name, []) if a] for name in tensorflow["roles"]},
            "task": tensorflow["task"],
            "environment": "cloud",
        }, sort_keys=True)
    return env


def request_timeout(interval: float, heartbeat_timeout: float) -> float:
    """How long an executor waits for one answer: longer than a long poll, short enough that a
    request the network ate is retried well before the heartbeat timeout declares it lost.

    A third of what the timeout leaves after an interval: a network outage of up to half the
    heartbeat timeout eats the requests sent during it, the last of them up to its very end, and
    the one after must still arrive in time (outage + this + an interval < the timeout). A half
    did not: the chaos suite's 1.5 s blackhole with a 3 s timeout had an executor declared lost
    on YARN. With the defaults (1 s, 30 s) the cap of interval + 5 s applies either way."""
    return min(interval + 5.0, max(interval + 0.5, (heartbeat_timeout - interval) / 3))


def long_poll_seconds(interval: float, heartbeat_timeout: float) -> float:
    """How long the AM holds a heartbeat that waits for its start command: a second less than the
    executor waits for the answer (at least an interval). Thousands of executors waiting for a gang
    start then cost the AM a request every few seconds each, not every interval."""
    return max(interval, request_timeout(interval, heartbeat_timeout) - 1.0)
