"""Failover engine: what to do when an executor ends.

Each role's ``Failover`` policy is data; this engine is the one place that
applies it. Input: the executor that ended and how; output: a ``Decision``
(restart or give up, charged or not). It only updates the role's failure
budget; launching replacements is the AM's job.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..spec import JobSpec
from .state import Executor, ExecutorState, RoleState


class Action(str, enum.Enum):
    NOTHING = "nothing"  # ended as wanted (success, or stopped by the AM)
    RESTART = "restart"  # launch a new incarnation of the same index
    FAIL_JOB = "fail_job"
    IGNORE_ROLE = "ignore_role"


@dataclass(frozen=True)
class Decision:
    action: Action
    charged: bool
    reason: str


class FailoverEngine:
    def __init__(self, spec: JobSpec):
        self.spec = spec

    def decide(self, role: RoleState, ex: Executor, preempted: bool = False) -> Decision:
        """Decide for an executor that reached a terminal state."""
        policy = self.spec.role(ex.role).failover
        assert policy is not None  # filled in by Role's validator
        if ex.state is ExecutorState.STOPPED:
            return Decision(Action.NOTHING, False, ex.reason)
        if ex.state is ExecutorState.SUCCEEDED:
            if policy.restart == "always":
                return Decision(Action.RESTART, False, f"{ex.id} exited 0, restart policy 'always'")
            return Decision(Action.NOTHING, False, "succeeded")

        preempted = preempted or policy.is_preemption(ex.exit_code)
        what = _describe(ex, preempted)
        if policy.restart == "never":
            return self._exhausted(role, ex, f"{what}; restart policy 'never'")
        if preempted:
            role.restarts += 1
            return Decision(Action.RESTART, False, f"{what}; not charged")

        used = role.failures_by_index.get(ex.index, 0) + 1
        role.failures_by_index[ex.index] = used
        role.failures += 1
        if policy.is_permanent(ex.exit_code):
            why = ("is in permanent_exit_codes" if ex.exit_code in policy.permanent_exit_codes
                   else f"is not in retryable_exit_codes {policy.retryable_exit_codes}")
            return self._exhausted(role, ex, f"{what}; exit {ex.exit_code} {why}: a restart cannot succeed, "
                                             f"{ex.id} is not restarted")
        if used > policy.max_failures_per_index:
            return self._exhausted(role, ex, f"{what}; {ex.id} failed {used} times, "
                                             f"max_failures_per_index is {policy.max_failures_per_index}")
        if policy.max_failures_per_role is not None and role.failures > policy.max_failures_per_role:
            return self._exhausted(role, ex, f"{what}; role {ex.role} failed {role.failures} times, "
                                             f"max_failures_per_role is {policy.max_failures_per_role}")
        role.restarts += 1
        return Decision(Action.RESTART, True, f"{what}; failure {used} of {policy.max_failures_per_index} "
                                              f"allowed for {ex.id}")

    def _exhausted(self, role: RoleState, ex: Executor, reason: str) -> Decision:
        policy = self.spec.role(ex.role).failover
        assert policy is not None
        if policy.on_exhausted == "ignore_role":
            role.ignored = True
            return Decision(Action.IGNORE_ROLE, True, f"{reason}; role {ex.role} is now ignored")
        return Decision(Action.FAIL_JOB, True, reason)


def _describe(ex: Executor, preempted: bool) -> str:
    if ex.state is ExecutorState.LOST:
        return f"{ex.id} lost ({ex.reason})"
    code = f"exit {ex.exit_code}" if ex.exit_code is not None else "no exit code"
    return f"{ex.id} {'preempted' if preempted else 'failed'} ({code}{': ' + ex.reason if ex.reason else ''})"
