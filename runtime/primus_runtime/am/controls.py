"""What a user (or the autoscaler) may ask of a running job: end it, scale a role, restart or drain
an executor, and act on its input (suspend, resume, re-queue or skip a task, a savepoint).

Each control checks it can be done, records who asked, and replies with the API's reply model. A
control that cannot be done raises one of ``errors.py``'s kinds; ``server.py`` maps them to HTTP.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from .. import protocol
from ..data.dispatcher import Task, TaskActionRefused
from ..hadoop import HadoopConfigError
from ..models import DrainReply, RestartReply, SavepointReply, ScaleReply
from ..spec import JobSpec
from .errors import Conflict, Invalid, NotFound
from .fleet import Fleet
from .membership import Membership
from .publishing import Publisher
from .state import Executor, ExecutorState, JobRecord, JobState

if TYPE_CHECKING:
    from ..data.plane import DataPlane

log = logging.getLogger("primus.am")


class Controlled(Protocol):
    """What of the AM the controls use."""

    record: JobRecord
    spec: JobSpec
    data: DataPlane | None
    fleet: Fleet
    membership: Membership
    publisher: Publisher

    def finish(self, state: JobState, reason: str, actor: str | None = None) -> None: ...

    def stop(self, ex: Executor, reason: str) -> None: ...

    def new_incarnation(self, role: str, index: int, attempt: int) -> Executor: ...

    def account(self, ex: Executor) -> None: ...

    def reconcile(self) -> None: ...


class Controls:
    def __init__(self, am: Controlled):
        self.am = am

    def kill(self, reason: str = "", actor: str | None = None) -> None:
        self._check_not_finished("it cannot be killed")
        self.am.finish(JobState.KILLED, reason or "killed on request", actor)

    def succeed(self, reason: str = "", actor: str | None = None) -> None:
        self._check_not_finished("it cannot be marked succeeded")
        self.am.finish(JobState.SUCCEEDED, reason or "marked succeeded on request", actor)

    def restart(self, executor_id: str, reason: str = "", actor: str | None = None) -> RestartReply:
        """Stop one executor and start a new incarnation of its index once it stopped (uncharged)."""
        ex = self._executor_to_act_on(executor_id, "restarted")
        why = reason or "restart requested"
        self.am.record.add_event(ex.id, ex.state.value, "restarting", why, incarnation=ex.incarnation, actor=actor)
        self._restart(ex, why)
        self.am.reconcile()
        return RestartReply(executor=ex.id, incarnation=ex.incarnation)

    def drain(self, executor_id: str, reason: str = "", actor: str | None = None) -> DrainReply:
        """Drain one running executor as on a preemption notice: its tasks move at their final positions
        and a new incarnation follows it, uncharged."""
        ex = self._executor_to_act_on(executor_id, "drained")
        if ex.state is not ExecutorState.RUNNING or ex.draining is not None:
            doing = f" and draining: {ex.draining}" if ex.draining is not None else ""
            raise Conflict(f"{executor_id} is {ex.state.value}{doing}: only a running executor that is "
                           f"not draining can be drained (restart it instead)")
        ex.draining = f"drain requested{': ' + reason if reason else ''}"
        self.am.record.touch(ex)
        self.am.account(ex)  # draining (goodput) from the order on
        self.am.record.add_event(ex.id, ex.state.value, "draining", ex.draining, incarnation=ex.incarnation,
                                 actor=actor)
        self.am.fleet.send(ex, {"command": protocol.CMD_DRAIN, "reason": ex.draining})
        self.am.publisher.write_journals()
        return DrainReply(executor=ex.id, incarnation=ex.incarnation)

    def task(self, action: str, task_id: str, reason: str = "", actor: str | None = None,
             expected_holder: str | None = None) -> Task:
        """A user's ``requeue`` or ``skip`` of one input task; the task as it is now. Skipping a task an
        executor reads restarts that executor: its trainer must stop getting the task's records.
        ``expected_holder``: the executor id the user was told reads it ('' none); a skip is refused if
        that is no longer so (the task was handed out or handed back meanwhile)."""
        data = self._input()
        self._check_not_finished(f"its tasks cannot be {'re-queued' if action == 'requeue' else 'skipped'}")
        if action == "skip" and expected_holder is not None:
            self._check_holder(data, task_id, expected_holder)
        why = f"{'re-queued' if action == 'requeue' else 'skipped'} on request{': ' + reason if reason else ''}"
        try:
            if action == "requeue":
                return data.dispatcher.requeue(task_id, why, actor)
            task, holder = data.dispatcher.skip(task_id, why, actor)
        except TaskActionRefused as exc:
            raise (NotFound if exc.status == 404 else Conflict)(str(exc)) from None
        ex = self.am.fleet.get(holder)
        if ex is not None and ex.stop_reason is None:
            self._restart(ex, f"it was reading task {task_id}, skipped on request")
        self.am.reconcile()
        return task

    def _check_holder(self, data: DataPlane, task_id: str, expected_holder: str) -> None:
        if task_id not in data.dispatcher.tasks:
            return
        ex = self.am.fleet.get(data.dispatcher.tasks[task_id].holder)
        now = ex.id if ex is not None else ""
        if now != expected_holder:
            will = f"skipping it now restarts {now}" if now else "skipping it now restarts nobody"
            raise Conflict(f"task {task_id} is read by {now or 'no executor'} now, not by "
                           f"{expected_holder or 'no executor'} as you were told: {will}; look again "
                           f"and confirm")

    def scale(self, role_name: str, replicas: int, actor: str | None = None,
              reason: str | None = None) -> ScaleReply:
        self._check_scale(role_name, replicas)
        record = self.am.record
        role = record.roles[role_name]
        old = role.replicas
        if replicas == old:
            return ScaleReply(role=role_name, replicas=old)
        role.replicas = replicas
        record.add_event(f"role/{role_name}", str(old), str(replicas),
                         reason or f"scaled from {old} to {replicas}", actor=actor)
        log.info("role %s scaled %d -> %d%s", role_name, old, replicas, f": {reason}" if reason else "")
        for index in range(replicas, old):
            ex = record.drop_executor(f"{role_name}-{index}")
            record.history.append(ex)
            self.am.stop(ex, f"scaled down to {replicas}")
        for index in range(old, replicas):
            self.am.new_incarnation(role_name, index, attempt=0)
        self.am.membership.resized(role_name)
        self.am.reconcile()
        return ScaleReply(role=role_name, replicas=replicas)

    def _check_scale(self, role_name: str, replicas: int) -> None:
        self._check_not_finished("it cannot be scaled")
        if role_name not in self.am.record.roles:
            raise NotFound(f"no role {role_name!r} (roles: {sorted(self.am.record.roles)})")
        if replicas < 0:
            raise Invalid(f"replicas must be >= 0, got {replicas}")
        role = self.am.spec.role(role_name)
        if replicas == 0 and (role.success_percent or 0) > 0:
            raise Conflict(f"role {role_name} must keep at least 1 replica: the job waits for it to "
                           f"succeed (success_percent {role.success_percent:g})")
        if role.framework == "pytorch":
            raise Conflict(f"role {role_name} is a pytorch role: WORLD_SIZE is fixed at start")

    def data(self, action: str, actor: str | None = None) -> dict[str, Any]:
        """``suspend`` or ``resume`` handing out input tasks; the data status."""
        data = self._input()
        if action not in ("suspend", "resume"):
            return data.status()
        self._check_not_finished(f"its input cannot be {'suspended' if action == 'suspend' else 'resumed'}")
        status = data.suspend(actor) if action == "suspend" else data.resume(actor)
        self.am.publisher.write_journals()
        return status

    async def savepoint(self, directory: str) -> SavepointReply:
        """Write every input task's position to ``directory``; what was saved."""
        data = self._input()
        if not directory.startswith(("/", "file://", "hdfs://", "webhdfs://")):
            raise Invalid(f"dir must be an absolute path, a file://, hdfs:// or webhdfs://host:port URL, "
                          f"got {directory!r}")
        try:
            saved = await data.savepoint(directory)
        except (OSError, ValueError, HadoopConfigError) as exc:
            raise Invalid(f"cannot write a savepoint to {directory}: {exc}") from None
        self.am.record.add_event("data", None, "savepoint", f"{saved['tasks']} task positions saved to {directory}")
        self.am.publisher.write_journals()
        return SavepointReply(**saved)

    def _input(self) -> DataPlane:
        if self.am.data is None:
            raise NotFound("this job has no input")
        return self.am.data

    def _executor_to_act_on(self, executor_id: str, done: str) -> Executor:
        """The live executor a user's request names (NotFound if none, Conflict if it ended or is
        stopping), for it to be ``done`` (``restarted``)."""
        self._check_not_finished(f"its executors cannot be {done}")
        ex = self.am.record.executors.get(executor_id)
        if ex is None:
            raise NotFound(f"no executor {executor_id!r} (executors: "
                           f"{', '.join(sorted(self.am.record.executors)[:20])})")
        if ex.state.terminal:
            raise Conflict(f"{executor_id} has ended ({ex.state.value}): it cannot be {done}")
        if ex.stop_reason is not None:
            raise Conflict(f"{executor_id} is stopping ({ex.stop_reason}): it cannot be {done}")
        return ex

    def _restart(self, ex: Executor, why: str) -> None:
        ex.replace_when_stopped = True
        self.am.record.touch(ex)
        self.am.stop(ex, why)

    def _check_not_finished(self, cannot: str) -> None:
        """A Conflict once the job's outcome is decided: ``job APP has ended (succeeded): it cannot be
        scaled``, or while its executors stop, ``job APP is already stopping (killed): ...``."""
        record = self.am.record
        if record.state.terminal:
            raise Conflict(f"job {record.app_id} has ended ({record.state.value}): {cannot}")
        if record.finishing is not None:
            raise Conflict(f"job {record.app_id} is already stopping ({record.finishing.value}): {cannot}")
