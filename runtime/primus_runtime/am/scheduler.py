"""Role scheduler: which executors to launch, when trainers may start, and
whether the job has succeeded or can no longer succeed.

Pure decisions over ``JobRecord``; it never talks to a backend or an
executor, so each start and success policy is testable alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..spec import JobSpec
from .state import Executor, ExecutorState, JobRecord, JobState

_UP = (ExecutorState.REGISTERED, ExecutorState.RUNNING)


@dataclass(frozen=True)
class Verdict:
    state: JobState
    reason: str


def _not_up(ex: Executor) -> str:
    if ex.state is ExecutorState.STARTING:
        return f"was launched on {ex.host} but never registered (see its executor log)"
    return "was not launched yet"


class RoleScheduler:
    def __init__(self, spec: JobSpec, record: JobRecord):
        self.spec = spec
        self.record = record
        self.policy = spec.scheduling.policy

    # --- launching ---

    def roles_to_launch(self) -> list[str]:
        """Roles whose executors should be requested from the backend now.

        gang and dynamic launch everything at once; ordered launches a role
        once every trainer of the role before it is ready.
        """
        roles = self.record.roles
        pending = [name for name in self.spec.start_order() if not roles[name].launched]
        if self.policy != "ordered":
            return pending
        for name in self.spec.start_order():
            if roles[name].launched and not self._all_ready(name):
                return []  # the role before is still starting
            if not roles[name].launched:
                return [name]
        return []

    def _all_ready(self, role: str) -> bool:
        return self.record.count_ready(role) == self.record.count(role)

    def job_running(self) -> bool:
        """Every executor runs its trainer and the trainer passed its readiness probe."""
        return all(self.record.count(name, ExecutorState.RUNNING) == self.record.count(name) and self._all_ready(name)
                   for name in self.record.roles)

    # --- readiness ---

    def not_ready(self, now: float) -> str | None:
        """Why the job cannot go on: a trainer started longer ago than its readiness timeout is
        still not ready (while it runs, or while an ordered start waits for its role). ``now``: time.monotonic()."""
        for ex in self.record.executors.values():
            if ex.ready or ex.running_clock is None:
                continue
            timeout = self.spec.readiness_timeout(ex.role)
            if now - ex.running_clock <= timeout:
                continue
            if ex.state is ExecutorState.RUNNING or self._awaited(ex.role):
                ended = "" if ex.state is ExecutorState.RUNNING else f" (it has ended: {ex.state.value})"
                return f"{ex.id} not ready after {timeout:g}s: {self._unmet_probe(ex)}{ended}"
        return None

    def _awaited(self, role: str) -> bool:
        """Whether an ordered start waits for this role before launching the next one."""
        order = self.spec.start_order()
        position = order.index(role)
        return self.policy == "ordered" and position + 1 < len(order) \
            and not self.record.roles[order[position + 1]].launched

    def _unmet_probe(self, ex: Executor) -> str:
        probe = self.spec.readiness_probe(ex.role)
        if probe == "ports":
            if len(ex.ports) == 1:
                return f"port {ex.ports[0]} never accepted a connection"
            return f"ports {', '.join(map(str, ex.ports))} did not all accept connections"
        if probe == "file":
            return "the trainer never created its ready file ($PRIMUS_READY_FILE, trainer_api.ready())"
        return "its executor never reported the trainer started"

    def ready_reason(self, ex: Executor) -> str | None:
        """The event recording that ``ex`` became ready; None when that is when its trainer
        started (probe spawned), which is an event already."""
        probe = self.spec.readiness_probe(ex.role)
        if probe == "ports":
            ports = ", ".join(map(str, ex.ports))
            return f"ready: ports {ports} accept connections" if len(ex.ports) > 1 else \
                f"ready: port {ports} accepts connections"
        if probe == "file":
            return "ready: the trainer created its ready file"
        return None

    # --- start barrier ---

    def release_roles(self) -> list[str]:
        """Mark roles whose trainers may now start; return the newly released ones."""
        roles = self.record.roles
        newly = []
        if self.policy == "gang":
            if not any(r.released for r in roles.values()) and all(
                self._up_count(name) >= roles[name].replicas for name in roles
            ):
                newly = list(roles)
        else:
            newly = [name for name, role in roles.items()
                     if not role.released and self._up_count(name) >= self._needed(name)]
        for name in newly:
            roles[name].released = True
        return newly

    def _up_count(self, role: str) -> int:
        return self.record.count(role, *_UP)

    def waiting_too_long(self, now: float, timeout: float,
                         pending_reason: Callable[[str], str | None] = lambda incarnation: None) -> str | None:
        """Why the job cannot start: a role requested ``timeout`` ago is still not released.
        ``pending_reason`` says why the backend has not started an executor yet (by incarnation);
        ``now``: time.monotonic()."""
        late = [name for name, role in self.record.roles.items()
                if role.launched and not role.released and role.launched_at is not None
                and now - role.launched_at > timeout]
        short = [name for name in late if self._up_count(name) < self._needed(name)]
        if not late:
            return None
        name = (short or late)[0]  # gang: the role that is short, not one waiting for the others
        waiting = [f"{ex.id} {pending_reason(ex.incarnation) or _not_up(ex)}"
                   for ex in self.record.role_executors(name) if not ex.state.terminal and ex.state not in _UP]
        shown = "; ".join(waiting[:3]) + (f"; and {len(waiting) - 3} more" if len(waiting) > 3 else "")
        return (f"start barrier of role {name} timed out after {timeout:g}s ({self.policy} scheduling): "
                f"{self._up_count(name)} of {self._needed(name)} executors registered"
                + (f"; {shown}" if shown else ""))

    def _needed(self, name: str) -> int:
        role = self.record.roles[name]
        if self.policy == "gang" or self.spec.role(name).framework == "pytorch":
            return role.replicas
        if self.policy == "dynamic":
            return min(self.spec.role(name).min_replicas or 1, role.replicas)
        return min(1, role.replicas)

    def may_start(self, ex: Executor) -> bool:
        return self.record.roles[ex.role].released and ex.state is ExecutorState.REGISTERED

    # --- success policy ---

    def verdict(self) -> Verdict | None:
        """SUCCEEDED when every waited-on role is done, FAILED when one can no
        longer be, None while the job should go on."""
        waited = [name for name, role in self.record.roles.items()
                  if not role.ignored and self._required(name) > 0]
        if not waited:
            return Verdict(JobState.FAILED, "no role left to wait on: every role that had to succeed was ignored "
                                            "after exhausting its failover budget")
        for name in waited:
            missing = self._cannot_succeed(name)
            if missing:
                return Verdict(JobState.FAILED, missing)
        if all(self._succeeded(name) >= self._required(name) for name in waited):
            counts = ", ".join(f"{n} {self._succeeded(n)}/{self.record.roles[n].replicas}" for n in waited)
            return Verdict(JobState.SUCCEEDED, f"success policy met: {counts} succeeded")
        return None

    def _required(self, role: str) -> int:
        percent = self.spec.role(role).success_percent or 0
        return math.ceil(self.record.roles[role].replicas * percent / 100)

    def _succeeded(self, role: str) -> int:
        return self.record.count(role, ExecutorState.SUCCEEDED)

    def _cannot_succeed(self, role: str) -> str | None:
        record = self.record
        present = record.count(role)
        if present < record.roles[role].replicas:
            return None  # some indices are being created or replaced
        ended_badly = record.count(role, ExecutorState.FAILED, ExecutorState.LOST, ExecutorState.STOPPED)
        if present - ended_badly >= self._required(role):
            return None
        ended = [f"{ex.id} {ex.state.value}" + (f" (exit {ex.exit_code})" if ex.exit_code is not None else "")
                 for ex in record.role_executors(role)
                 if ex.state.terminal and ex.state is not ExecutorState.SUCCEEDED]
        return (f"role {role}: {self._succeeded(role)} of {present} executors succeeded, "
                f"{self._required(role)} required; ended without success: {', '.join(ended)}")
