"""PrimusRoleSensor: wait until a role of a Primus job reaches a state (poke mode)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowException

from airflow_provider_primus.hooks.primus import FINISHED, PrimusHook

if TYPE_CHECKING:
    from airflow.sdk import Context

EXECUTOR_STATES = ("new", "starting", "registered", "running", "succeeded", "failed", "lost", "killed")


class PrimusRoleSensor(BaseSensorOperator):
    """True once at least ``count`` executors of ``role`` are in ``state``, e.g. the workers all
    running, or the evaluator succeeded. Fails at once if the job ends without getting there.

    :param app_id: the job (templated; e.g. the ``app_id`` XCom of the submitting task).
    :param role: the role to watch (templated).
    :param state: an executor state (``running``, ``succeeded``, ...).
    :param count: how many executors must be in it; default: all of the role's replicas.
    """

    template_fields: Sequence[str] = ("app_id", "role", "primus_conn_id")

    def __init__(self, *, app_id: str, role: str, state: str = "running", count: int | None = None,
                 primus_conn_id: str = PrimusHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if state not in EXECUTOR_STATES:
            raise ValueError(f"state must be one of {list(EXECUTOR_STATES)}, got {state!r}")
        if count is not None and count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        self.app_id, self.role, self.state, self.count = app_id, role, state, count
        self.primus_conn_id = primus_conn_id

    def poke(self, context: Context) -> bool:
        status = PrimusHook(primus_conn_id=self.primus_conn_id).status(self.app_id)
        roles = {role["name"]: role for role in status.get("roles", [])}
        job = status["job"]
        if self.role not in roles:
            if job["state"] in FINISHED:
                raise AirflowException(f"Primus job {self.app_id} {job['state']} before role {self.role} "
                                       f"appeared: {job.get('reason') or 'no reason'}")
            return False  # the AM is still starting
        role = roles[self.role]
        wanted = role["replicas"] if self.count is None else self.count
        have = role["states"].get(self.state, 0)
        self.log.info("Primus job %s role %s: %d of %d %s", self.app_id, self.role, have, wanted, self.state)
        if have >= wanted:
            return True
        if job["state"] in FINISHED:
            raise AirflowException(f"Primus job {self.app_id} {job['state']} with role {self.role} at {have} of "
                                   f"{wanted} {self.state}: {job.get('reason') or 'no reason'}")
        return False
