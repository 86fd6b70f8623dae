"""The AM's side of the executor protocol (``protocol.py``): register, heartbeat, unregister.

Heartbeats are the hot path (thousands a second): a reply is NONE_REPLY unless there is a command
(start, kill, drain, a new cluster membership) or input tasks for the executor. A registered
executor waiting for its start command long-polls: its heartbeat is answered when the command is
sent, or after ``long_poll`` seconds.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Protocol

from .. import protocol
from ..backends.base import ExecutorBackend
from ..data.dispatcher import Ending
from ..models import HeartbeatRequest, RegisterRequest, UnregisterRequest
from ..spec import JobSpec
from .adoption import Recovery
from .fleet import Fleet
from .group_commit import GroupCommit
from .membership import Membership
from .metrics import AMMetrics
from .publishing import Publisher
from .scheduler import RoleScheduler
from .state import Executor, ExecutorState, JobRecord
from .trainer_env import tensorflow_task, trainer_env

if TYPE_CHECKING:
    from ..data.plane import DataPlane

NONE_REPLY: dict[str, Any] = {"command": protocol.CMD_NONE}
NONE_BYTES = json.dumps(NONE_REPLY).encode()


class Reporting(Protocol):
    """What of the AM the executor protocol uses."""

    record: JobRecord
    spec: JobSpec
    address: str
    data: DataPlane | None
    fleet: Fleet
    recovery: Recovery
    membership: Membership
    scheduler: RoleScheduler
    publisher: Publisher
    metrics: AMMetrics
    fed_roles: set[str]
    backend: ExecutorBackend  # for the credentials it renews

    def set_state(self, ex: Executor, state: ExecutorState, reason: str, exit_code: int | None = None) -> None: ...

    def ended(self, ex: Executor, state: ExecutorState, reason: str, exit_code: int | None,
              preempted: bool = False) -> None: ...

    def reconcile(self) -> None: ...

    def reconcile_now(self) -> None: ...

    def account(self, ex: Executor) -> None: ...


class ExecutorProtocol:
    def __init__(self, am: Reporting, interval: float, timeout: float):
        self.am = am
        self.long_poll = protocol.long_poll_seconds(interval, timeout)
        self.registered = {"ok": True, "heartbeat_interval": interval, "heartbeat_timeout": timeout}
        self._commit = GroupCommit(am.publisher.write_journals)  # the heartbeats' journal writes, one per loop turn

    def register(self, report: RegisterRequest) -> dict[str, Any]:
        am = self.am
        ex = am.fleet.get(report.incarnation)
        if ex is not None and ex.state is ExecutorState.REGISTERED and ex.incarnation in am.recovery.adopting:
            # It registered with the last attempt, which died before answering: the answer is the same.
            am.recovery.heard_from(ex)
            ex.last_seen, ex.heartbeat_at = time.monotonic(), time.time()
            return self.registered
        if ex is None or ex.stop_reason is not None or ex.state not in (ExecutorState.STARTING, ExecutorState.NEW):
            reason = ex.stop_reason if ex is not None and ex.stop_reason else "unknown or stale incarnation"
            return {"ok": False, "command": protocol.CMD_KILL, "reason": reason}
        ex.host = report.host
        ex.ports = list(report.ports)
        ex.pid = report.pid
        ex.gpus = list(report.gpus)  # what the backend gave it, as it saw them
        ex.last_seen, ex.heartbeat_at = time.monotonic(), time.time()
        if ex.state is ExecutorState.NEW:  # registered before the backend's launch callback ran
            am.set_state(ex, ExecutorState.STARTING, "launched")
        am.recovery.heard_from(ex)
        am.set_state(ex, ExecutorState.REGISTERED, f"registered from {ex.host} ports {ex.ports}")
        am.fleet.awaiting_start.add(ex.incarnation)
        am.membership.changed(ex)
        am.reconcile()
        return self.registered

    async def heartbeat(self, report: HeartbeatRequest) -> dict[str, Any]:
        """The reply to a heartbeat: NONE_REPLY, or a command; a membership in it is pre-encoded bytes
        (``Membership``), which ``encode_reply`` splices in."""
        started = time.perf_counter()
        am = self.am
        ex = am.fleet.get(report.incarnation)
        if ex is None:
            return {"command": protocol.CMD_KILL, "reason": "unknown or stale incarnation"}
        ex.last_seen, ex.heartbeat_at = time.monotonic(), time.time()
        if am.recovery.adopting:
            am.recovery.heard_from(ex)
        if ex.stop_reason is not None:
            return self._stopping(ex, report)
        if report.draining is not None and self._drained(ex, report):
            am.publisher.write_journals()
            return NONE_REPLY
        changed = self._note_progress(ex, report)
        reply = am.fleet.take_command(ex)
        if reply is None and report.wait and ex.state is ExecutorState.REGISTERED:
            if ex.incarnation in am.fleet.start_sent:
                reply = self.start_command(ex)  # still waiting: the earlier reply was lost
            else:
                waiting = time.perf_counter()
                reply = await am.fleet.wait_for_command(ex, self.long_poll)
                started += time.perf_counter() - waiting  # the long poll waits: that is no handling time
        if reply is None and ex.state is ExecutorState.RUNNING \
                and report.cluster_version < am.membership.version(ex.role):
            reply = {"command": protocol.CMD_CLUSTER, "cluster": am.membership.encoded(ex.role)[1]}
        fed = am.data is not None and ex.state is ExecutorState.RUNNING and ex.role in am.fed_roles \
            and (reply is None or reply["command"] not in (protocol.CMD_KILL, protocol.CMD_DRAIN))
        if fed:
            assert am.data is not None
            data = am.data.heartbeat(ex.incarnation, report, slot=ex.id)
            if data:
                reply = {**(reply or NONE_REPLY), **data}
            # Goodput: whether it holds a task (productive) or waits for one may have changed with this
            # report. Tasks it loses otherwise (a skip, the input exhausted) count from its next one.
            am.account(ex)
        if report.credentials_version < am.backend.credentials_version:  # renewed since it last heard
            reply = {**(reply or NONE_REPLY), "credentials": {"version": am.backend.credentials_version,
                                                              "env": am.backend.credentials()}}
        am.metrics.observe_heartbeat(time.perf_counter() - started)
        if (changed or fed or reply is not None or am.record.dirty) and am.publisher.journaling():
            await self._commit.wait()  # written with the other heartbeats of this loop turn
        return NONE_REPLY if reply is None else reply

    def _stopping(self, ex: Executor, report: HeartbeatRequest) -> dict[str, Any]:
        """The heartbeat of an executor being stopped: told again to stop."""
        am = self.am
        if am.data is not None and ex.role in am.fed_roles and ex.state is ExecutorState.RUNNING:
            am.data.heartbeat(ex.incarnation, report.model_copy(update={"need_tasks": 0}), slot=ex.id)  # its last positions
            am.publisher.write_journals()
        return {"command": protocol.CMD_KILL, "reason": ex.stop_reason}

    def _note_progress(self, ex: Executor, report: HeartbeatRequest) -> bool:
        """Its trainer started, or passed its readiness probe: whether that changed its state."""
        am = self.am
        changed = report.state == protocol.REPORT_RUNNING and ex.state is ExecutorState.REGISTERED
        if changed:
            am.set_state(ex, ExecutorState.RUNNING, "trainer started")
        if report.ready and ex.state is ExecutorState.RUNNING and not ex.ready:
            am.record.mark_ready(ex, am.scheduler.ready_reason(ex))
            changed = True
        if changed:
            am.reconcile_now()  # journaled after, with this loop turn's other heartbeats
        return changed

    def _drained(self, ex: Executor, report: HeartbeatRequest) -> bool:
        """A draining executor's report (a preemption notice): noted once; once it says it drained, its
        trainer is gone and its tasks go back now, at this report's positions, before it exits. Whether
        it has drained."""
        am = self.am
        if ex.draining is None:
            ex.draining = report.draining
            am.record.touch(ex)
            am.record.add_event(ex.id, ex.state.value, "draining", f"draining: {report.draining}",
                                incarnation=ex.incarnation)
            am.account(ex)  # draining (goodput) until it exits
        if not report.drained:
            return False
        if am.data is not None and ex.role in am.fed_roles and ex.state is ExecutorState.RUNNING:
            am.data.heartbeat(ex.incarnation, report, slot=ex.id)
            am.data.release(ex.incarnation, Ending.DRAINED, f"{ex.id} drained: {ex.draining}", slot=ex.id)
        return True

    def unregister(self, report: UnregisterRequest) -> dict[str, Any]:
        ex = self.am.fleet.get(report.incarnation)
        if ex is not None:
            code = report.exit_code
            message = report.message[:500]
            state = ExecutorState.SUCCEEDED if code == 0 else ExecutorState.FAILED
            self.am.ended(ex, state, message or f"trainer exited {code}", code)
        return {"ok": True}

    def start_command(self, ex: Executor) -> dict[str, Any]:
        """The command that starts ``ex``'s trainer: its argv, environment, cluster and readiness probe,
        and for a consuming role how it is fed."""
        am = self.am
        start: dict[str, Any] = {
            "command": am.spec.role(ex.role).argv(),
            "env": trainer_env(am.spec, am.record, ex, am.address),
            "cluster": am.membership.encoded(ex.role)[1],  # shared by every start of this version
            "readiness": am.spec.readiness_probe(ex.role),
        }
        tensorflow = tensorflow_task(am.spec, ex)
        if tensorflow is not None:
            start["tensorflow"] = tensorflow
        if am.data is not None and ex.role in am.fed_roles:
            start["feed"] = {"max_tasks": am.data.limit, "readers": am.data.spec.max_tasks_per_executor,
                             "exit_grace": am.data.spec.exit_grace, "delivery": am.data.spec.delivery,
                             "trainer_buffer": am.data.spec.trainer_buffer,
                             "restore_checkpoint": am.data.checkpoint(ex.id)}
        return {"command": protocol.CMD_START, "start": start}
