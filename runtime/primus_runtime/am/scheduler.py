"""Role scheduler: which executors to launch, when trainers may start, and
whether the job has succeeded or can no longer succeed.

Pure decisions over ``JobRecord``; it never talks to a backend or an
executor, so each start and success policy is testable alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..spec import JobSpec
from .state import Executor, ExecutorState, JobRecord, JobState

_UP = (ExecutorState.REGISTERED, ExecutorState.RUNNING)


@dataclass(frozen=True)
class Verdict:
    state: JobState
    reason: str


class RoleScheduler:
    def __init__(self, spec: JobSpec, record: JobRecord):
        self.spec = spec
        self.record = record
        self.policy = spec.scheduling.policy

    # --- launching ---

    def roles_to_launch(self) -> list[str]:
        """Roles whose executors should be requested from the backend now.

        gang and dynamic launch everything at once; ordered launches a role
        once every executor of the role before it is running.
        """
        roles = self.record.roles
        pending = [name for name in self.spec.start_order() if not roles[name].launched]
        if self.policy != "ordered":
            return pending
        for name in self.spec.start_order():
            if roles[name].launched and not self._all_running(name):
                return []  # the role before is still starting
            if not roles[name].launched:
                return [name]
        return []

    def _all_running(self, role: str) -> bool:
        return self.record.count(role, ExecutorState.RUNNING) == self.record.count(role)

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

    def waiting_too_long(self, now: float, timeout: float) -> str | None:
        """Why the job cannot start: a role requested ``timeout`` ago is still not released."""
        for name, role in self.record.roles.items():
            if role.launched and not role.released and role.launched_at is not None \
                    and now - role.launched_at > timeout:
                up = self._up_count(name)
                needed = self._needed(name)
                return (f"start barrier of role {name} timed out after {timeout:g}s ({self.policy} scheduling): "
                        f"{up} of {needed} executors registered; check resources and the executor logs")
        return None

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
