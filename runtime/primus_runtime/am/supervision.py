"""The AM's periodic checks, every half heartbeat interval (at most 0.5 s): heartbeats that stopped,
stops past their grace, start barriers that never opened, the autoscaled roles' policies, and the
status snapshot and event log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

from ..backends.base import ExecutorBackend
from ..spec import JobSpec
from .autoscaler import Autoscaler, Backlog
from .controls import Controls
from .errors import ControlRefused
from .fleet import Fleet
from .goodput import RESTARTING
from .publishing import Publisher
from .scheduler import RoleScheduler
from .state import Executor, ExecutorState, JobRecord, JobState

if TYPE_CHECKING:
    from ..data.plane import DataPlane

log = logging.getLogger("primus.am")

AUTOSCALER = "autoscaler"  # the actor of the scaling events Role.autoscale makes


class Supervised(Protocol):
    """What of the AM the periodic checks use."""

    record: JobRecord
    spec: JobSpec
    backend: ExecutorBackend
    data: DataPlane | None
    fleet: Fleet
    scheduler: RoleScheduler
    controls: Controls
    publisher: Publisher
    done: asyncio.Event

    def finish(self, state: JobState, reason: str, actor: str | None = None) -> None: ...

    def ended(self, ex: Executor, state: ExecutorState, reason: str, exit_code: int | None,
              preempted: bool = False) -> None: ...

    def spawn(self, coro: Any) -> asyncio.Task: ...


class Supervisor:
    def __init__(self, am: Supervised, interval: float, timeout: float):
        self.am = am
        self.interval = interval
        self.timeout = timeout
        # Roles sized on the input's backlog, evaluated by the sweep (see autoscale).
        self.autoscalers = {r.name: Autoscaler(r.name, r.autoscale) for r in am.spec.roles if r.autoscale is not None}
        self._autoscale_due: dict[str, float] = {}
        for name, scaler in self.autoscalers.items():
            am.record.roles[name].autoscale = {**scaler.policy.model_dump(mode="json"), "last_decision": None}

    async def run_forever(self) -> None:
        while not self.am.done.is_set():
            await asyncio.sleep(min(self.interval / 2, 0.5))
            try:
                self.sweep()
            except Exception:  # noqa: BLE001 - the sweep must keep running
                log.exception("sweep failed")

    def sweep(self) -> None:
        """Heartbeat expiry, forced stops past their grace, start barriers that never opened."""
        am = self.am
        now = time.monotonic()
        for ex in list(am.fleet.live.values()):
            self._check(ex, now)
        stuck = am.scheduler.waiting_too_long(now, am.spec.scheduling.start_timeout, am.backend.pending_reason) \
            or am.scheduler.not_ready(now)
        if stuck:
            am.finish(JobState.FAILED, stuck)
        self.autoscale(now)
        am.publisher.write_journals()
        am.publisher.snapshot_if_due(now)
        am.publisher.log_history()

    def _check(self, ex: Executor, now: float) -> None:
        """Force-stop an executor past its stop's grace, or one silent past the heartbeat timeout."""
        am = self.am
        if ex.stop_deadline is not None and now > ex.stop_deadline:
            am.spawn(am.backend.stop(ex.role, ex.index, ex.incarnation, force=True))
            am.ended(ex, ExecutorState.STOPPED, f"{ex.stop_reason}; force-killed after the grace period", None)
        elif ex.state in (ExecutorState.REGISTERED, ExecutorState.RUNNING) \
                and ex.stop_reason is None and now - ex.last_seen > self.timeout:
            silent = now - ex.last_seen
            if ex.heartbeat_at is not None:
                # Goodput: silent since its last report, so its trainer was not known to train since:
                # its index counts as restarting from then, not as what it last was.
                am.record.goodput.enter(ex, RESTARTING, at=ex.heartbeat_at)
            am.spawn(am.backend.stop(ex.role, ex.index, ex.incarnation, force=True))
            am.ended(ex, ExecutorState.LOST, f"no heartbeat for {silent:.1f}s (timeout {self.timeout:g}s)", None)

    def autoscale(self, now: float) -> None:
        """Each autoscaled role's policy, every ``interval`` while the job runs and input is handed out.
        A change goes through the scale control, as a user's does (membership pushed to the executors,
        tasks of removed ones handed back): one ``role/NAME`` event with the policy's reason."""
        data, record = self.am.data, self.am.record
        if not self.autoscalers or data is None:
            return
        if record.state is not JobState.RUNNING or record.finishing is not None or not data.handing_out:
            for scaler in self.autoscalers.values():
                scaler.pause()
            return
        backlog: Backlog | None = None
        for name, scaler in self.autoscalers.items():
            role = record.roles[name]
            if now < self._autoscale_due.get(name, 0.0) or role.ignored:
                continue
            self._autoscale_due[name] = now + scaler.policy.interval
            if backlog is None:
                backlog = data.backlog()
            decision = scaler.decide(now, role.replicas, backlog)
            if decision is None:
                continue
            old = role.replicas
            try:
                self.am.controls.scale(name, decision.replicas, actor=AUTOSCALER, reason=decision.reason)
            except ControlRefused as exc:
                log.warning("autoscaler: cannot scale role %s to %d: %s", name, decision.replicas, exc)
                continue
            role.autoscale = {**(role.autoscale or {}), "last_decision": {
                "time": time.time(), "from_replicas": old, "to_replicas": decision.replicas,
                "reason": decision.reason}}
