"""Job and executor states: the one spelling the AM, the clients, the CLI and the provider share.

Standard library only (the executor may import it). Both enums subclass ``str``, so a member
equals its value (``"running" in JOB_ACTIVE``), and print as it (``f"job is {state}"``: ``job is running``).
"""

from __future__ import annotations

import enum


class _Spelled(str, enum.Enum):
    """A member prints as its value: what users read in messages and logs."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class JobState(_Spelled):
    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    KILLED = "killed"  # killed on request (user, Airflow, a signal to the AM)
    #: Client-side only, never recorded by an AM: the AM is gone without a final status
    #: (it crashed or was SIGKILLed), so the job's outcome is unknown.
    LOST = "lost"

    @property
    def terminal(self) -> bool:
        """The AM recorded this outcome."""
        return self in JOB_OUTCOMES

    @property
    def finished(self) -> bool:
        """Nothing about the job will change any more (an outcome, or ``lost``)."""
        return self in JOB_FINISHED


class ExecutorState(_Spelled):
    NEW = "new"  # wanted, not launched yet (start order, resources)
    STARTING = "starting"  # launched by the backend, not registered yet
    REGISTERED = "registered"  # registered, waiting for its start command
    RUNNING = "running"  # trainer launched
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LOST = "lost"  # heartbeats stopped
    #: The AM stopped it (the job ended, a scale-down, a kill request): not a failure of its own.
    #: Its ``reason`` says why ("job succeeded", "scaled down to 1", ...).
    STOPPED = "stopped"

    @property
    def terminal(self) -> bool:
        return self in EXECUTOR_TERMINAL

    @property
    def alive(self) -> bool:
        return self in (ExecutorState.STARTING, ExecutorState.REGISTERED, ExecutorState.RUNNING)


JOB_OUTCOMES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED})
JOB_FINISHED = JOB_OUTCOMES | {JobState.LOST}
#: A job in one of these states may still change (and can be reattached to).
JOB_ACTIVE = frozenset({JobState.PENDING, JobState.STARTING, JobState.RUNNING})
EXECUTOR_TERMINAL = frozenset(
    {ExecutorState.SUCCEEDED, ExecutorState.FAILED, ExecutorState.LOST, ExecutorState.STOPPED}
)
