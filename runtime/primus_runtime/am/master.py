"""The Application Master: one per job.

It owns the ``JobRecord`` and meets three sources of events on one asyncio
loop (so no locks): executor reports (``executor_protocol.py``), backend events
(launched / exited, here), and user requests (``controls.py``). After each state change
``reconcile()`` asks the RoleScheduler what to launch and start next and whether the job is
decided; failures go through the FailoverEngine. Input data is the DataPlane's: the AM passes it
the data part of consuming executors' heartbeats and says when an executor ended; the data plane
answers with tasks and, through ``data_event``/``data_failed``, with events and a failed job. The
AM itself never decides policy.

The other parts: ``adoption.py`` (a new AM attempt takes over from the journal), ``supervision.py``
(the periodic sweep and the autoscalers), ``publishing.py`` (journals, status file, event log),
``fleet.py`` (the executors not yet ended and the commands queued for them).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import protocol
from ..backends.base import BackendEvents, ExecutorBackend, Exited, Launched, LaunchRequest, launch_env
from ..data.dispatcher import Ending
from ..models import HeartbeatRequest, RegisterRequest, UnregisterRequest
from ..spec import JobSpec
from .adoption import Recovery, new_attempt, take_over
from .controls import Controls
from .executor_protocol import NONE_BYTES, NONE_REPLY, ExecutorProtocol
from .failover import Action, FailoverEngine
from .fleet import Fleet
from .goodput import DRAINING, PENDING_RESOURCES, PRODUCTIVE, RESTARTING, WAITING_FOR_DATA
from .journal import JOURNAL, AMJournal, Recovered
from .membership import Membership
from .metrics import AMMetrics
from .publishing import Publisher
from .scheduler import RoleScheduler, Verdict
from .state import Executor, ExecutorState, JobRecord, JobState, RoleState
from .supervision import Supervisor
from .timeline import EVENT_LOG, EventLog, Timeline

if TYPE_CHECKING:
    from ..data.plane import DataPlane

__all__ = ["NONE_BYTES", "NONE_REPLY", "ApplicationMaster", "heartbeat_interval"]

log = logging.getLogger("primus.am")

# Executors that may still run a trainer (or are about to).
_NOT_ENDED = tuple(state for state in ExecutorState if not state.terminal)


class ApplicationMaster(BackendEvents):
    def __init__(self, spec: JobSpec, app_id: str, backend: ExecutorBackend,
                 status_path: Path | None = None, attempt: int = 1, recovered: Recovered | None = None):
        self.spec = spec
        self.backend = backend
        self.status_path = status_path
        self.record = JobRecord(app_id=app_id, name=spec.name, attempt=attempt, tags=dict(spec.tags))
        self.record.roles = {r.name: RoleState(r.name, r.replicas) for r in spec.roles}
        self.scheduler = RoleScheduler(spec, self.record)
        self.membership = Membership(self.record, spec.peer_views())
        self.failover = FailoverEngine(spec)
        self.address = ""  # host:port of the API, set once it listens
        self.done = asyncio.Event()
        self.interval = heartbeat_interval(spec)
        self.fleet = Fleet()
        self.recovery = Recovery(self.record, self.fleet)
        self.recovered = recovered  # the journal of an earlier attempt, put back in start()
        self._finish_reason = ""
        self._tasks: set[asyncio.Task] = set()
        self._launching: set[asyncio.Task] = set()
        self.fed_roles = {r.name for r in spec.roles if r.consumes_input}
        self.data: DataPlane | None = self._data_plane()
        self.timeline = Timeline(self.record)
        self.event_log = EventLog(status_path.parent / EVENT_LOG, self.record) if status_path is not None else None
        self.journal = AMJournal(status_path.parent / JOURNAL, self.record) if status_path is not None else None
        self.publisher = Publisher(self.record, status_path, self.journal, self.event_log, self.timeline,
                                   self.data, self.spawn)
        self.metrics = AMMetrics(self)
        self.controls = Controls(self)
        self.executors = ExecutorProtocol(self, self.interval, spec.am.heartbeat_timeout)
        self.supervisor = Supervisor(self, self.interval, spec.am.heartbeat_timeout)

    def _data_plane(self) -> DataPlane | None:
        if self.spec.input is None:
            return None
        from ..data.plane import DataPlane  # imported by jobs with input only (fsspec, Kafka...)

        # The data plane's own journal: the work-preserve directory, else one beside the status
        # (what a restarted AM resumes from).
        private = self.status_path.parent / "data-journal" if self.status_path is not None else None
        data = DataPlane(self.spec.input, self, private_journal=private, recovering=self.recovered is not None,
                         job_name=self.spec.name)
        self.record.data_view = data.status
        return data

    @property
    def finish_reason(self) -> str:
        """Why the job is finishing as it is (journaled: a restarted AM finishes it the same way)."""
        return self._finish_reason

    @finish_reason.setter
    def finish_reason(self, reason: str) -> None:
        self._finish_reason = reason
        if self.journal is not None:
            self.journal.finish_reason = reason

    # --- the executor protocol and the sweep, as the API and tests call them ----------------

    def register(self, report: RegisterRequest) -> dict[str, Any]:
        return self.executors.register(report)

    async def heartbeat(self, report: HeartbeatRequest) -> dict[str, Any]:
        return await self.executors.heartbeat(report)

    def unregister(self, report: UnregisterRequest) -> dict[str, Any]:
        return self.executors.unregister(report)

    def sweep(self) -> None:
        self.supervisor.sweep()

    # --- what the metrics and the read API see (am/readout.py) --------------------------------

    def executor_of(self, incarnation: str | None) -> Executor | None:
        return self.fleet.get(incarnation)

    async def read_log(self, path: str, offset: int, limit: int) -> tuple[bytes, int | None]:
        return await self.backend.read_log(path, offset, limit)

    # --- life cycle -------------------------------------------------------------

    async def start(self, address: str) -> None:
        self.address = address
        await self.backend.start(self)
        if self.recovered is not None:
            await take_over(self, self.recovered)
            return
        if self.record.attempt > 1:  # restarted with no journal to carry on from: nothing to adopt
            attempt = new_attempt(self.record)
            attempt["recovered_at"] = attempt["started_at"]
        self._set_job(JobState.STARTING, self._start_reason())
        self._note_slower_heartbeats()
        for role in self.spec.roles:
            why = self.backend.check_fits(role.name, role.resources)
            if why:
                self.finish(JobState.FAILED, why)
                return
            for index in range(role.replicas):
                self.new_incarnation(role.name, index, attempt=0)
        self.run()
        self.reconcile()
        if self._launching:  # the first executors are on their way before start() returns
            await asyncio.wait(list(self._launching))

    def _start_reason(self) -> str:
        if self.record.attempt == 1:
            return "AM started"
        return (f"AM attempt {self.record.attempt} started afresh: nothing of the earlier attempt to adopt "
                f"(its journal is not here; on YARN its containers ended with it); every executor starts "
                f"again" + (", the input resumes from input.work_preserve_dir"
                            if self.spec.input is not None and self.spec.input.work_preserve_dir else ""))

    def _note_slower_heartbeats(self) -> None:
        if self.interval > self.spec.am.heartbeat_interval:
            executors = sum(role.replicas for role in self.spec.roles)
            self.record.add_event("job", JobState.STARTING.value, JobState.STARTING.value,
                                  f"heartbeat interval {self.interval:g}s for {executors:,} executors (asked: "
                                  f"am.heartbeat_interval {self.spec.am.heartbeat_interval:g}s): one AM answers "
                                  f"~{HEARTBEATS_PER_SECOND:,} heartbeats a second")

    def run(self) -> None:
        """The periodic checks and the input, from now on."""
        self.spawn(self.supervisor.run_forever())
        if self.data is not None:
            self.data.start()

    def cannot_start(self, reason: str) -> None:
        """The job fails before anything of it ran (its AM cannot serve its API): the outcome, now."""
        self._set_job(JobState.FAILED, reason)
        self.publisher.log_history()
        self.done.set()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.data is not None:
            self.data.close()
        if self.journal is not None:
            self.journal.close()
        await self.backend.close()

    def finish(self, state: JobState, reason: str, actor: str | None = None) -> None:
        """Decide the job's outcome; it is recorded once every executor has stopped."""
        if self.record.finishing is not None or self.record.state.terminal:
            return
        log.info("job %s: %s", state.value, reason)
        self.record.finishing = state
        # The verdict, when it is reached: the final state follows once every executor has stopped.
        self.record.add_event("job", self.record.state.value, "stopping", f"{state.value}: {reason}", actor=actor)
        self.finish_reason = reason
        for ex in list(self.fleet.live.values()):
            self.stop(ex, f"job {state.value}")
        self.reconcile()

    # --- the data plane's reports (DataEvents) ---------------------------------------

    def data_event(self, subject: str, old: str | None, new: str, reason: str, actor: str | None = None) -> None:
        log.info("%s: %s%s", subject, reason, f" (by {actor})" if actor else "")
        self.record.add_event(subject, old, new, reason, actor=actor)

    def data_failed(self, reason: str) -> None:
        # Called from inside the data plane: decide once it has returned.
        asyncio.get_running_loop().call_soon(self.finish, JobState.FAILED, reason)

    # --- backend events --------------------------------------------------------------

    def on_launched(self, launched: Launched) -> None:
        ex = self.fleet.get(launched.incarnation)
        if ex is None:
            self._late_launch(launched)
            return
        ex.host = ex.host or launched.host
        ex.gpus = ex.gpus or list(launched.gpus)
        ex.logs = dict(launched.logs)
        ex.pid = ex.pid or launched.pid
        self.record.touch(ex)
        if ex.state is ExecutorState.NEW:
            ex.last_seen = time.monotonic()
            self.set_state(ex, ExecutorState.STARTING, f"launched on {launched.host}")
        self.publisher.write_journals()

    def on_exited(self, exited: Exited) -> None:
        ex = self.fleet.get(exited.incarnation)
        if ex is None:  # already ended through unregister, loss, or a forced stop
            self._late_exit(exited)
            return
        state = ExecutorState.SUCCEEDED if exited.exit_code == 0 else ExecutorState.FAILED
        self.ended(ex, state, exited.reason, exited.exit_code, exited.preempted)

    def _late_launch(self, launched: Launched) -> None:
        """Where an incarnation that already ended ran, as the backend learnt it after the end (a YARN
        container that ran between two polls, its executor unregistered first): its logs, which
        `primus logs`, the failed tails and Airflow's log copy read."""
        ex = self.record.find_incarnation(launched.incarnation)
        if ex is None or ex.logs:
            return
        ex.host = ex.host or launched.host
        ex.logs = dict(launched.logs)
        self.record.touch(ex)
        self.publisher.write_journals()

    def _late_exit(self, exited: Exited) -> None:
        """The end of an incarnation the AM ended already without an exit code (declared lost when it
        stopped answering), as the backend learnt it later (YARN's container status, the local
        supervisor's): its exit code is the cause a user looks for."""
        ex = self.record.find_incarnation(exited.incarnation)
        if ex is None or ex.exit_code is not None or exited.exit_code is None:
            return
        ex.exit_code = exited.exit_code
        self.record.add_event(ex.id, ex.state.value, ex.state.value, f"its process ended later: {exited.reason}",
                              exited.exit_code, ex.incarnation)
        self.record.touch(ex)
        self.publisher.write_journals()

    # --- the decisions -------------------------------------------------------------------

    def ended(self, ex: Executor, state: ExecutorState, reason: str, exit_code: int | None,
              preempted: bool = False) -> None:
        """An incarnation ended: its tasks go back, and it is replaced, or fails the job, as its role's
        failover policy says."""
        if ex.stop_reason is not None:
            state, reason = ExecutorState.STOPPED, ex.stop_reason
        policy = self.spec.role(ex.role).failover
        ex.preempted = state is ExecutorState.FAILED and (
            preempted or exit_code == protocol.EXIT_PREEMPTED or (policy is not None and policy.is_preemption(exit_code)))
        self.set_state(ex, state, reason, exit_code)
        self.fleet.forget(ex)
        if self.data is not None and ex.role in self.fed_roles:
            self.data.release(ex.incarnation, _data_ending(ex), f"{ex.id} {ex.state.value}: {reason}",
                              slot=ex.id)
        self.membership.changed(ex)
        if self.record.finishing is None and self.record.executors.get(ex.id) is ex:
            self._replace_or_fail(ex)
        self.reconcile()

    def _replace_or_fail(self, ex: Executor) -> None:
        if ex.replace_when_stopped:
            log.info("%s: restarting on request", ex.id)
            self.record.history.append(ex)
            self.record.roles[ex.role].restarts += 1
            self.new_incarnation(ex.role, ex.index, ex.attempt + 1)
            return
        decision = self.failover.decide(self.record.roles[ex.role], ex, ex.preempted)
        if decision.action is Action.RESTART:
            log.info("%s: restarting (%s)", ex.id, decision.reason)
            self.record.history.append(ex)
            self.new_incarnation(ex.role, ex.index, ex.attempt + 1)
        elif decision.action is Action.FAIL_JOB:
            self.finish(JobState.FAILED, decision.reason)
        elif decision.action is Action.IGNORE_ROLE:
            self.record.add_event(f"role/{ex.role}", None, "ignored", decision.reason)
            log.warning("%s", decision.reason)

    def _verdict(self) -> Verdict | None:
        """The roles' verdict (scheduler), held back or overturned by the input: a job never succeeds on
        data it did not read (``input.early_exit: requeue``), and fails once nobody is left to read it."""
        verdict = self.scheduler.verdict()
        data = self.data
        if data is None or data.consumed or data.spec.early_exit == "accept" \
                or (verdict is not None and verdict.state is not JobState.SUCCEEDED):
            return verdict
        if any(self.record.count(role, *_NOT_ENDED) for role in self.fed_roles):
            return None  # consumers still read (or are being replaced): success waits for the input
        if not any(self.record.roles[role].replicas for role in self.fed_roles):
            return None  # every consuming role scaled to 0: paused on purpose, it may be scaled up again
        return Verdict(JobState.FAILED, f"input not consumed: {data.left()}; every consuming trainer exited "
                                        f"before the end of its input (input.early_exit: requeue)")

    def reconcile(self) -> None:
        """Act on the state as it is now, then journal it: called at the end of every step, before any
        answer leaves, so that a restarted AM knows whatever an executor was told."""
        self.reconcile_now()
        self.publisher.write_journals()

    def reconcile_now(self) -> None:
        record = self.record
        if record.state.terminal:
            return
        if self.data is not None and self.data.kafka is not None:
            self.data.consumers(sum(record.count(role, ExecutorState.REGISTERED, ExecutorState.RUNNING)
                                    for role in self.fed_roles))
        if record.finishing is not None:
            if not self.fleet.live:
                self._finished(record.finishing)
            return
        self._launch_released()
        self._start_released()
        if record.state is JobState.STARTING and self.scheduler.job_running():
            self._set_job(JobState.RUNNING, "every executor is running and ready")
            # What the start made (executors, their events) lives as long as the job: out of the
            # collector's sight, or at 10,000 executors each full collection holds heartbeats.
            gc.freeze()
        verdict = self._verdict()
        if verdict is not None:
            self.finish(verdict.state, verdict.reason)

    def _finished(self, state: JobState) -> None:
        """Every executor has stopped: the outcome is recorded."""
        if self.data is not None:
            try:
                self.data.finish(state.value)
            except Exception:  # noqa: BLE001 - saving the positions failed: the job still ends
                log.exception("finishing the data plane failed")
        self._set_job(state, self.finish_reason)
        self.timeline.interval = 0.0  # the last sample shows the end
        self.publisher.log_history()
        self.publisher.write_status()
        self.done.set()

    def _launch_released(self) -> None:
        """Launch the new incarnations of the roles the scheduler lets launch."""
        record = self.record
        for role in self.scheduler.roles_to_launch():
            record.roles[role].launched = True
            record.roles[role].launched_at = time.monotonic()
        for incarnation in list(self.fleet.to_launch):
            ex = self.fleet.live[incarnation]
            if record.roles[ex.role].launched:
                del self.fleet.to_launch[incarnation]
                task = self.spawn(self._launch(ex))
                self._launching.add(task)
                task.add_done_callback(self._launching.discard)

    def _start_released(self) -> None:
        """Send the start command to registered executors of the roles the scheduler released."""
        self.scheduler.release_roles()
        released = {name for name, role in self.record.roles.items() if role.released}
        for incarnation in list(self.fleet.awaiting_start) if released else ():
            ex = self.fleet.live[incarnation]
            if ex.role in released and self.scheduler.may_start(ex):
                self.fleet.awaiting_start.discard(incarnation)
                self.fleet.start_sent.add(incarnation)
                self.fleet.send(ex, self.executors.start_command(ex))

    # --- executors: create, launch, stop -----------------------------------------------

    def new_incarnation(self, role: str, index: int, attempt: int) -> Executor:
        incarnation = (attempt == 0 and self.backend.incarnation_for(role, index)) or uuid.uuid4().hex[:12]
        ex = Executor(role=role, index=index, incarnation=incarnation, attempt=attempt)
        self.record.put_executor(ex)
        self.account(ex)  # pending resources, or restarting from the end of the one before (same step)
        self.fleet.add(ex)
        self.record.add_event(ex.id, None, ExecutorState.NEW.value,
                              "created" if attempt == 0 else f"replacement #{attempt}", incarnation=ex.incarnation)
        return ex

    async def _launch(self, ex: Executor) -> None:
        role = self.spec.role(ex.role)
        env = launch_env(self.spec, self.record.app_id, ex.role, ex.index, ex.incarnation, self.address)
        request = LaunchRequest(ex.role, ex.index, ex.incarnation, ex.attempt, role.resources, env, role.files)
        try:
            await self.backend.launch(request)
        except Exception as exc:  # noqa: BLE001 - any backend error ends this incarnation
            log.exception("%s: launch failed", ex.id)
            if ex.incarnation in self.fleet.live:
                self.ended(ex, ExecutorState.FAILED, f"launch failed: {exc}", None)

    def stop(self, ex: Executor, reason: str) -> None:
        """Ask an executor to stop (its trainer gets the shutdown grace), and its backend too."""
        if ex.stop_reason is not None or ex.state.terminal:
            return
        ex.stop_reason = reason
        self.record.touch(ex)
        if ex.incarnation in self.fleet.to_launch:  # never launched: nothing to stop
            self.ended(ex, ExecutorState.STOPPED, reason, None)
            return
        ex.stop_deadline = time.monotonic() + self.spec.am.shutdown_grace + 2 * self.interval
        self.fleet.send(ex, {"command": protocol.CMD_KILL, "reason": reason})
        self.spawn(self.backend.stop(ex.role, ex.index, ex.incarnation, force=False))

    # --- helpers ------------------------------------------------------------------------------

    def set_state(self, ex: Executor, state: ExecutorState, reason: str, exit_code: int | None = None) -> None:
        old = ex.state
        self.record.set_executor_state(ex, state, reason, exit_code)
        self.account(ex)
        log.info("%s [%s] %s -> %s%s: %s", ex.id, ex.incarnation, old.value, state.value,
                 f" (exit {exit_code})" if exit_code is not None else "", reason)

    # --- goodput (am/goodput.py) ----------------------------------------------------------------

    def account(self, ex: Executor) -> None:
        """``ex``'s time goes to the cause it is in now: called where that may change (a state change, a
        drain noted, a consuming executor's heartbeat, which may change the tasks it holds). O(1)."""
        if self.record.goodput.enter(ex, self.goodput_cause(ex)):
            self.record.touch(ex)  # its cause and since are journaled: a restarted AM carries them on

    def goodput_cause(self, ex: Executor) -> str | None:
        """Which cause ``ex``'s time goes to now (models.Goodput); None once it ended."""
        if ex.state.terminal:
            return None
        if ex.draining is not None:
            return DRAINING
        if ex.state is not ExecutorState.RUNNING:
            return PENDING_RESOURCES if ex.attempt == 0 else RESTARTING
        if self.data is None or ex.role not in self.fed_roles:
            return PRODUCTIVE
        dispatcher = self.data.dispatcher
        if dispatcher.held.get(ex.incarnation) or dispatcher.consumed or dispatcher.enough:
            return PRODUCTIVE  # reading, or the input is all read and its trainer finishes (saves, exits)
        if ex.incarnation in dispatcher.adopted and not dispatcher.scan_complete:
            # Adopted: what it holds is known again once the scan lists its tasks; till then, as it was.
            return WAITING_FOR_DATA if ex.goodput == WAITING_FOR_DATA else PRODUCTIVE
        return WAITING_FOR_DATA

    def _set_job(self, state: JobState, reason: str) -> None:
        old = self.record.state
        self.record.set_job_state(state, reason)
        log.info("job %s -> %s: %s", old.value, state.value, reason)
        self.publisher.write_status()

    def spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _data_ending(ex: Executor) -> Ending:
    """How a consuming executor's end bears on the tasks it held (the dispatcher charges them)."""
    if ex.state is ExecutorState.SUCCEEDED:
        return Ending.SUCCEEDED
    if ex.state is ExecutorState.LOST:
        return Ending.LOST
    if ex.state is not ExecutorState.FAILED:
        return Ending.STOPPED
    return Ending.PREEMPTED if ex.preempted else Ending.CRASHED


# Heartbeats one AM is asked to answer per second at most: a bigger job's executors heartbeat less often.
HEARTBEATS_PER_SECOND = 3000
MAX_SCALED_INTERVAL = 3.0


def heartbeat_interval(spec: JobSpec) -> float:
    """The interval the AM asks its executors for: ``am.heartbeat_interval``, longer for a job of more
    than HEARTBEATS_PER_SECOND executors (at most 3 s, and a third of the heartbeat timeout)."""
    asked = spec.am.heartbeat_interval
    executors = sum(role.replicas for role in spec.roles)
    scaled = min(executors / HEARTBEATS_PER_SECOND, MAX_SCALED_INTERVAL, spec.am.heartbeat_timeout / 3)
    return max(asked, scaled)
