"""The AM's state: explicit state machines for the job and each executor.

Everything the AM knows lives in these dataclasses, and every state change
goes through ``transition()`` which checks it against the allowed-transition
table and records an ``Event``. ``to_dict()`` gives a JSON-ready snapshot
(the status API, the final status file, and later the AM journal).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any

from ..states import EXECUTOR_TERMINAL, ExecutorState, JobState
from .goodput import GoodputAccountant

JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.STARTING, JobState.FAILED, JobState.KILLED}),
    JobState.STARTING: frozenset({JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED}),
    JobState.RUNNING: frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED}),
}

EXECUTOR_TRANSITIONS: dict[ExecutorState, frozenset[ExecutorState]] = {
    ExecutorState.NEW: frozenset({ExecutorState.STARTING, ExecutorState.FAILED, ExecutorState.STOPPED}),
    ExecutorState.STARTING: frozenset({ExecutorState.REGISTERED} | EXECUTOR_TERMINAL),
    ExecutorState.REGISTERED: frozenset({ExecutorState.RUNNING} | EXECUTOR_TERMINAL),
    ExecutorState.RUNNING: EXECUTOR_TERMINAL,
}


class InvalidTransition(RuntimeError):
    pass


@dataclass
class Event:
    """One recorded state change, shown by the status API."""

    seq: int
    time: float
    subject: str  # "job" or an executor id such as "worker-1"
    from_state: str | None
    to_state: str
    reason: str = ""
    exit_code: int | None = None
    incarnation: str | None = None
    actor: str | None = None  # who asked, for changes a user requested


@dataclass
class Executor:
    """One incarnation of one executor index of a role."""

    role: str
    index: int
    incarnation: str
    attempt: int
    state: ExecutorState = ExecutorState.NEW
    host: str | None = None
    ports: list[int] = field(default_factory=list)
    pid: int | None = None
    gpus: list[int] = field(default_factory=list)
    exit_code: int | None = None
    reason: str = ""
    logs: dict[str, str] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    registered_at: float | None = None
    running_at: float | None = None
    running_clock: float | None = None  # monotonic twin of running_at, for timeouts (not part of snapshots)
    # Its trainer passed the role's readiness probe (stays true once it ended).
    ready: bool = False
    ready_at: float | None = None
    finished_at: float | None = None
    # Set when the AM asked it to stop: its ending is then STOPPED, never a failure.
    stop_reason: str | None = None
    stop_deadline: float | None = None  # monotonic time after which it is force-killed
    preempted: bool = False  # it ended because its node or slot was taken back (not charged)
    replace_when_stopped: bool = False  # a user asked to restart it: a new incarnation follows its stop
    draining: str | None = None  # why it drains (a preemption notice): it then exits preempted
    last_seen: float = 0.0  # monotonic time of the last report (not part of snapshots)
    heartbeat_at: float | None = None  # wall-clock time of the last report, for people
    # Where its time goes from goodput_since on (am/goodput.py; None once it ended): journaled, not shown.
    goodput: str | None = None
    goodput_since: float | None = None

    @property
    def id(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def address(self) -> str | None:
        if self.host and self.ports and self.state in (ExecutorState.REGISTERED, ExecutorState.RUNNING):
            return f"{self.host}:{self.ports[0]}"
        return None

    def to_dict(self) -> dict[str, Any]:
        # By hand, not dataclasses.asdict: that deep-copies every field and made a status of 1,000
        # executors cost ~90 ms; only the list and dict fields need copies.
        data = {name: getattr(self, name) for name in _EXECUTOR_FIELDS}
        data.update(id=self.id, state=self.state.value, ports=list(self.ports), gpus=list(self.gpus),
                    logs=dict(self.logs))
        return data


_EXECUTOR_FIELDS = tuple(f.name for f in fields(Executor)
                         if f.name not in ("last_seen", "stop_deadline", "replace_when_stopped", "running_clock",
                                           "goodput", "goodput_since"))


@dataclass
class RoleState:
    """Run-time state of a role: its current size and failure budget."""

    name: str
    replicas: int
    released: bool = False  # its trainers may start (the start barrier opened for it)
    launched: bool = False  # its executors were requested from the backend (ordered start)
    launched_at: float | None = None  # monotonic time they were requested (start_timeout)
    ignored: bool = False  # budget exhausted with on_exhausted=ignore_role
    failures: int = 0  # charged failures, all indices
    failures_by_index: dict[int, int] = field(default_factory=dict)
    restarts: int = 0
    # Role.autoscale's policy and its last decision (models.AutoscaleView); None: not autoscaled.
    # Replaced, never changed in place: the AM journal sees a change by comparing values.
    autoscale: dict[str, Any] | None = None


@dataclass
class JobRecord:
    """Everything about the job; executors maps an executor id to its current incarnation."""

    app_id: str
    name: str
    state: JobState = JobState.PENDING
    reason: str = ""
    attempt: int = 1
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    roles: dict[str, RoleState] = field(default_factory=dict)
    executors: dict[str, Executor] = field(default_factory=dict)
    history: list[Executor] = field(default_factory=list)  # earlier incarnations, oldest first
    events: list[Event] = field(default_factory=list)
    cluster_version: int = 0
    # Final state requested by kill/succeed/success/failure while executors stop.
    finishing: JobState | None = None
    tags: dict[str, str] = field(default_factory=dict)
    # Derived from `executors`, kept up to date so that each scheduling pass costs
    # O(roles), not O(executors): role -> state -> current executors in it.
    counts: dict[str, Counter] = field(default_factory=dict, repr=False)
    ready_counts: Counter = field(default_factory=Counter, repr=False)  # role -> current executors ready
    # The data plane's status (``data`` in every snapshot); None when the job has no input.
    data_view: Callable[[], dict[str, Any]] | None = field(default=None, repr=False)
    # One entry per AM attempt after the first: when it took over and how the adoption went.
    am_attempts: list[dict[str, Any]] = field(default_factory=list)
    # Executors changed since the AM journal last wrote them (incarnation -> executor).
    dirty: dict[str, Executor] = field(default_factory=dict, repr=False)
    # Where the executors' time went (``goodput`` in every snapshot; the AM says which cause when).
    goodput: GoodputAccountant = field(default_factory=GoodputAccountant, repr=False)

    # --- membership ---

    def put_executor(self, ex: Executor) -> None:
        """Make ``ex`` the current incarnation of its index (replacing an earlier one)."""
        old = self.executors.get(ex.id)
        if old is not None:
            self.counts[old.role][old.state] -= 1
            self.ready_counts[old.role] -= old.ready
        self.executors[ex.id] = ex
        self.counts.setdefault(ex.role, Counter())[ex.state] += 1
        self.ready_counts[ex.role] += ex.ready
        self.touch(ex)
        if old is not None:
            self.touch(old)

    def drop_executor(self, executor_id: str) -> Executor:
        """Remove an index from the job (scale down); returns its current incarnation."""
        ex = self.executors.pop(executor_id)
        self.counts[ex.role][ex.state] -= 1
        self.ready_counts[ex.role] -= ex.ready
        self.touch(ex)
        return ex

    def find_incarnation(self, incarnation: str) -> Executor | None:
        """The executor incarnation of that name, current or replaced (the newest one first)."""
        for ex in (*self.executors.values(), *reversed(self.history)):
            if ex.incarnation == incarnation:
                return ex
        return None

    def touch(self, ex: Executor) -> None:
        """``ex`` changed: the AM journal writes it at the end of the AM's current step."""
        self.dirty[ex.incarnation] = ex

    def count(self, role: str, *states: ExecutorState) -> int:
        """Current executors of ``role`` in any of ``states`` (all of them without states)."""
        counts = self.counts.get(role)
        if not counts:
            return 0
        return sum(counts[s] for s in states) if states else sum(counts.values())

    def count_ready(self, role: str) -> int:
        """Current executors of ``role`` whose trainer was ready (even if it has ended since)."""
        return self.ready_counts[role]

    # --- transitions ---

    def add_event(self, subject: str, old: str | None, new: str, reason: str,
                  exit_code: int | None = None, incarnation: str | None = None, actor: str | None = None) -> Event:
        event = Event(len(self.events) + 1, time.time(), subject, old, new, reason, exit_code, incarnation, actor)
        self.events.append(event)
        return event

    def set_job_state(self, new: JobState, reason: str = "") -> Event:
        if new not in JOB_TRANSITIONS.get(self.state, frozenset()):
            raise InvalidTransition(f"job: {self.state.value} -> {new.value}")
        old, self.state = self.state, new
        if new is JobState.RUNNING or (new is JobState.STARTING and self.started_at is None):
            self.started_at = self.started_at or time.time()
        if new.terminal:
            self.finished_at = time.time()
            self.reason = reason
        return self.add_event("job", old.value, new.value, reason)

    def set_executor_state(self, ex: Executor, new: ExecutorState, reason: str = "",
                           exit_code: int | None = None) -> Event:
        if new not in EXECUTOR_TRANSITIONS.get(ex.state, frozenset()):
            raise InvalidTransition(f"{ex.id} ({ex.incarnation}): {ex.state.value} -> {new.value}")
        old, ex.state = ex.state, new
        if self.executors.get(ex.id) is ex:
            self.counts[ex.role][old] -= 1
            self.counts[ex.role][new] += 1
        self.touch(ex)
        now = time.time()
        if new is ExecutorState.REGISTERED:
            ex.registered_at = now
        elif new is ExecutorState.RUNNING:
            ex.running_at, ex.running_clock = now, time.monotonic()
        elif new.terminal:
            ex.finished_at = now
            ex.exit_code = exit_code
            ex.reason = reason
        return self.add_event(ex.id, old.value, new.value, reason, exit_code, ex.incarnation)

    def mark_ready(self, ex: Executor, reason: str | None) -> None:
        """Its trainer passed the readiness probe: an event of its (unchanged) state with ``reason``,
        none when ``reason`` is None (ready the moment it started: that event is there already)."""
        if ex.ready:
            return
        ex.ready, ex.ready_at = True, time.time()
        self.touch(ex)
        if self.executors.get(ex.id) is ex:
            self.ready_counts[ex.role] += 1
        if reason is not None:
            self.add_event(ex.id, ex.state.value, ex.state.value, reason, incarnation=ex.incarnation)

    # --- queries ---

    def role_executors(self, role: str) -> list[Executor]:
        return [ex for ex in self.executors.values() if ex.role == role]

    def role_counts(self, role: str) -> dict[str, int]:
        counts = self.counts.get(role, Counter())
        return {state.value: counts[state] for state in ExecutorState}

    def summary(self) -> dict[str, Any]:
        return {
            "app_id": self.app_id,
            "name": self.name,
            "state": self.state.value,
            "stopping": self.finishing.value if self.finishing is not None and not self.state.terminal else None,
            "reason": self.reason,
            "attempt": self.attempt,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "cluster_version": self.cluster_version,
            "tags": self.tags,
            "am_attempts": [dict(a) for a in self.am_attempts],
        }

    def roles_view(self) -> list[dict[str, Any]]:
        return [
            {
                "name": role.name,
                "replicas": role.replicas,
                "released": role.released,
                "ready": self.count_ready(role.name),
                "ignored": role.ignored,
                "failures": role.failures,
                "restarts": role.restarts,
                "states": self.role_counts(role.name),
                "autoscale": role.autoscale,
            }
            for role in self.roles.values()
        ]

    def executors_view(self, role: str | None = None) -> list[dict[str, Any]]:
        return [executor_row(ex) for ex in self.executors.values() if role is None or ex.role == role]

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.summary(),
            "roles": self.roles_view(),
            "executors": self.executors_view(),
            "history": [ex.to_dict() for ex in self.history],
            "events": [dict(e.__dict__) for e in self.events],  # flat: no deep copy (asdict) needed
            "data": self.data_view() if self.data_view is not None else None,
            "goodput": self.goodput.view(),
        }

    def json_parts(self, rows: int = 500) -> Iterator[str]:
        """``to_dict()`` as JSON, in parts of at most ``rows`` executors or events: at 10,000 executors the
        document is megabytes, and the AM writes it between the parts (``rows`` lets it serve requests
        meanwhile). ``"".join`` of the parts is the document."""
        data = self.data_view() if self.data_view is not None else None
        yield (f'{{"job":{json.dumps(self.summary())},"roles":{json.dumps(self.roles_view())},"data":{json.dumps(data)},'
               f'"goodput":{json.dumps(self.goodput.view())}')
        listed: tuple[tuple[str, list[Any], Callable[[Any], dict[str, Any]]], ...] = (
            ("executors", list(self.executors.values()), executor_row),
            ("history", list(self.history), Executor.to_dict),
            ("events", list(self.events), lambda e: dict(e.__dict__)))
        for key, items, row in listed:
            yield f',"{key}":['
            for start in range(0, len(items), rows):
                yield ("," if start else "") + json.dumps([row(item) for item in items[start:start + rows]])[1:-1]
            yield "]"
        yield "}"


def executor_row(ex: Executor) -> dict[str, Any]:
    """A current executor as the status shows it."""
    data = ex.to_dict()
    data["restarts"] = ex.attempt
    return data
