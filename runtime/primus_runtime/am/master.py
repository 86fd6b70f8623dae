"""The Application Master: one per job.

It owns the ``JobRecord`` and meets three sources of events on one asyncio
loop (so no locks): executor reports (register / heartbeat / unregister),
backend events (launched / exited), and user requests (kill, succeed,
scale, data suspend/resume). After each state change ``_reconcile()`` asks the RoleScheduler what
to launch and start next and whether the job is decided; failures go through
the FailoverEngine. Input data is the DataPlane's: the AM passes it the data
part of consuming executors' heartbeats and says when an executor ended; the data
plane answers with tasks and, through ``data_event``/``data_failed``, with events
and a failed job. The AM itself never decides policy.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import protocol
from ..backends.base import Adoption, BackendEvents, ExecutorBackend, Exited, Launched, LaunchRequest, launch_env
from ..data.dispatcher import Ending, Task, TaskActionRefused
from ..hadoop import HadoopConfigError
from ..models import (
    DrainReply,
    HeartbeatRequest,
    RegisterRequest,
    RestartReply,
    SavepointReply,
    ScaleReply,
    UnregisterRequest,
)
from ..spec import JobSpec
from .autoscaler import Autoscaler, Backlog
from .errors import Conflict, ControlRefused, Invalid, NotFound
from .failover import Action, FailoverEngine
from .group_commit import GroupCommit
from .journal import JOURNAL, AMJournal, Recovered, restore
from .membership import Membership
from .metrics import AMMetrics
from .scheduler import RoleScheduler, Verdict
from .state import Executor, ExecutorState, JobRecord, JobState, RoleState
from .timeline import EVENT_LOG, EventLog, Timeline
from .trainer_env import tensorflow_task, trainer_env

if TYPE_CHECKING:
    from ..data.plane import DataPlane

log = logging.getLogger("primus.am")

NONE_REPLY: dict[str, Any] = {"command": protocol.CMD_NONE}
NONE_BYTES = json.dumps(NONE_REPLY).encode()
# How often, at most, the status file is rewritten while the job runs: what a post-mortem
# (`primus status` after the AM died) reads. A big job's snapshot is written less often: at
# least STATUS_SNAPSHOT_COST times the time the last one took.
STATUS_SNAPSHOT_SECONDS = 2.0
STATUS_SNAPSHOT_COST = 20
# Executors that may still run a trainer (or are about to).
_NOT_ENDED = tuple(state for state in ExecutorState if not state.terminal)
AUTOSCALER = "autoscaler"  # the actor of the scaling events Role.autoscale makes


class ApplicationMaster(BackendEvents):
    def __init__(self, spec: JobSpec, app_id: str, backend: ExecutorBackend,
                 status_path: Path | None = None, attempt: int = 1, recovered: Recovered | None = None):
        self.spec = spec
        self.backend = backend
        self.status_path = status_path
        self.record = JobRecord(app_id=app_id, name=spec.name, attempt=attempt, tags=dict(spec.tags))
        self.record.roles = {r.name: RoleState(r.name, r.replicas) for r in spec.roles}
        # Roles sized on the input's backlog, evaluated by the sweep (see _autoscale).
        self.autoscalers = {r.name: Autoscaler(r.name, r.autoscale) for r in spec.roles if r.autoscale is not None}
        self._autoscale_due: dict[str, float] = {}
        for name, scaler in self.autoscalers.items():
            self.record.roles[name].autoscale = {**scaler.policy.model_dump(mode="json"), "last_decision": None}
        self.scheduler = RoleScheduler(spec, self.record)
        self.membership = Membership(self.record, spec.peer_views())
        self.failover = FailoverEngine(spec)
        self.address = ""  # host:port of the API, set once it listens
        self.done = asyncio.Event()
        self._timeout = spec.am.heartbeat_timeout
        self._interval = heartbeat_interval(spec)
        self._long_poll = protocol.long_poll_seconds(self._interval, self._timeout)
        self._registered = {"ok": True, "heartbeat_interval": self._interval, "heartbeat_timeout": self._timeout}
        self._grace = spec.am.shutdown_grace
        self._live: dict[str, Executor] = {}  # incarnation -> executor not yet ended
        self._to_launch: dict[str, None] = {}  # NEW incarnations not yet asked of the backend, in order
        self._awaiting_start: set[str] = set()  # registered incarnations without a start command
        self._start_sent: set[str] = set()  # incarnations whose start command is queued or delivered
        self._commands: dict[str, dict[str, Any]] = {}  # incarnation -> next heartbeat reply
        self._wakeups: dict[str, asyncio.Event] = {}  # incarnation -> long-poll waiting for a command
        self._finish_reason = ""
        self._tasks: set[asyncio.Task] = set()
        self._snapshot = (0.0, 0)  # (monotonic time, events) of the last status file written
        self._snapshot_every = STATUS_SNAPSHOT_SECONDS
        self._snapshotting: asyncio.Task | None = None  # a periodic status snapshot being written
        self._status_writes = 0  # every write of the status file: a snapshot never replaces a later one
        self._launching: set[asyncio.Task] = set()
        self.data: DataPlane | None = None
        self._fed_roles = {r.name for r in spec.roles if r.consumes_input}
        self.recovered = recovered  # the journal of an earlier attempt, put back in start()
        self._adopting: set[str] = set()  # incarnations kept from an earlier attempt, not heard from yet
        if spec.input is not None:
            from ..data.plane import DataPlane  # imported by jobs with input only (fsspec, Kafka...)

            # The data plane's own journal: the work-preserve directory, else one beside the status
            # (what a restarted AM resumes from).
            private = status_path.parent / "data-journal" if status_path is not None else None
            self.data = DataPlane(spec.input, self, private_journal=private, recovering=recovered is not None,
                                  job_name=spec.name)
            self.record.data_view = self.data.status
        self.timeline = Timeline(self.record)
        self.event_log = EventLog(status_path.parent / EVENT_LOG, self.record) if status_path is not None else None
        self.journal = AMJournal(status_path.parent / JOURNAL, self.record) if status_path is not None else None
        self.metrics = AMMetrics(self)
        self._commit = GroupCommit(self._journal)  # the heartbeats' journal writes, one per loop turn

    # --- life cycle -------------------------------------------------------------

    async def start(self, address: str) -> None:
        self.address = address
        await self.backend.start(self)
        if self.recovered is not None:
            await self._take_over(self.recovered)
            return
        if self.record.attempt > 1:  # restarted with no journal to carry on from: nothing to adopt
            now = time.time()
            self.record.am_attempts.append({"attempt": self.record.attempt, "started_at": now,
                                            "down_since": _float_env(protocol.ENV_AM_DOWN_SINCE),
                                            "recovered_at": now, "adopted": 0, "gone": 0})
        self._set_job(JobState.STARTING, "AM started" if self.record.attempt == 1 else
                      f"AM attempt {self.record.attempt} started afresh: nothing of the earlier attempt to adopt "
                      f"(its journal is not here; on YARN its containers ended with it); every executor starts "
                      f"again" + (", the input resumes from input.work_preserve_dir"
                                         if self.spec.input is not None and self.spec.input.work_preserve_dir else ""))
        if self._interval > self.spec.am.heartbeat_interval:
            executors = sum(role.replicas for role in self.spec.roles)
            self.record.add_event("job", JobState.STARTING.value, JobState.STARTING.value,
                                  f"heartbeat interval {self._interval:g}s for {executors:,} executors (asked: "
                                  f"am.heartbeat_interval {self.spec.am.heartbeat_interval:g}s): one AM answers "
                                  f"~{HEARTBEATS_PER_SECOND:,} heartbeats a second")
        for role in self.spec.roles:
            why = self.backend.check_fits(role.name, role.resources)
            if why:
                self.finish(JobState.FAILED, why)
                return
            for index in range(role.replicas):
                self._new_incarnation(role.name, index, attempt=0)
        self._spawn(self._sweep_forever())
        if self.data is not None:
            self.data.start()
        self._reconcile()
        if self._launching:  # the first executors are on their way before start() returns
            await asyncio.wait(list(self._launching))

    def cannot_start(self, reason: str) -> None:
        """The job fails before anything of it ran (its AM cannot serve its API): the outcome, now."""
        self._set_job(JobState.FAILED, reason)
        self._log_history()
        self.done.set()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.data is not None:
            self.data.close()
        if self.journal is not None:
            self.journal.close()
        await self.backend.close()

    # --- a new AM attempt takes over ----------------------------------------------------------

    async def _take_over(self, recovered: Recovered) -> None:
        """Carry on from an earlier attempt's journal: executors still running are adopted (same
        incarnations, trainers untouched), the ones gone meanwhile go through failover uncharged,
        the ones never launched are launched now."""
        record = self.record
        self._finish_reason = restore(record, recovered)
        self.membership.rebuild()
        if self.journal is not None:
            self.journal.adopt_written()
            self.journal.finish_reason = self._finish_reason
        if self.event_log is not None:
            self.event_log.resume()
            self.timeline.samples = self.event_log.samples()
        now = time.time()
        attempt: dict[str, Any] = {"attempt": self.record.attempt, "started_at": now,
                   "down_since": _float_env(protocol.ENV_AM_DOWN_SINCE), "recovered_at": None,
                   "adopted": 0, "gone": 0}
        record.am_attempts.append(attempt)
        if record.state.terminal:  # it died saving the outcome: save it again
            record.add_event("job", record.state.value, record.state.value,
                             f"AM attempt {record.attempt} took over after the job ended")
            attempt["recovered_at"] = now
            self._write_status()
            self.done.set()
            return
        kept = [ex for ex in [*record.history, *record.executors.values()] if not ex.state.terminal]
        found = await self.backend.adopt([self._adoption(ex) for ex in kept])
        # Executors that may report late get the recovery grace, not the heartbeat timeout.
        patience = time.monotonic() + max(0.0, self.spec.am.grace - self._timeout)
        for ex in kept:
            self._live[ex.incarnation] = ex
            ex.last_seen = patience
            if ex.incarnation in found:
                self._adopting.add(ex.incarnation)
            elif ex.state is ExecutorState.NEW:
                self._to_launch[ex.incarnation] = None  # never launched
        attempt["adopted"] = len(self._adopting)
        record.add_event("job", record.state.value, record.state.value,
                         f"AM attempt {record.attempt} took over: {len(self._adopting)} executor(s) still running "
                         f"adopted, {len(kept) - len(self._adopting)} gone or never launched")
        log.info("AM attempt %d: adopting %d executor(s)", record.attempt, len(self._adopting))
        if self.data is not None:
            self.data.adopt({ex.incarnation for ex in kept if ex.incarnation in found and ex.role in self._fed_roles})
            if _input_suspended(record):
                self.data.dispatcher.suspended = True  # a user suspended handing out tasks: still so
        for ex in kept:
            if ex.incarnation in found or ex.state is ExecutorState.NEW:
                self._resume(ex)
            else:
                attempt["gone"] += 1
                self._ended(ex, ExecutorState.FAILED, "ended while no AM was running (exit status unknown)",
                            None, preempted=True)
        self._spawn(self._sweep_forever())
        if self.data is not None:
            self.data.start()
        self._check_adopted()
        self._reconcile()
        self._write_status()

    def _adoption(self, ex: Executor) -> Adoption:
        return Adoption(ex.role, ex.index, ex.incarnation, ex.attempt, ex.pid,
                        self.spec.role(ex.role).resources, list(ex.gpus), dict(ex.logs))

    def _resume(self, ex: Executor) -> None:
        """Pick up an adopted executor where the last attempt left it."""
        if ex.stop_reason is not None:
            reason, ex.stop_reason = ex.stop_reason, None
            self._stop(ex, reason)  # asked to stop before: ask again
        elif ex.state is ExecutorState.REGISTERED:
            self._awaiting_start.add(ex.incarnation)  # a start command sent twice is ignored
        elif ex.draining is not None:
            self._send(ex, {"command": protocol.CMD_DRAIN, "reason": ex.draining})  # a drain asked twice is one

    def _heard_from(self, ex: Executor) -> None:
        if ex.incarnation in self._adopting:
            self._adopting.discard(ex.incarnation)
            self._check_adopted()

    def _check_adopted(self) -> None:
        """Once every kept executor has reported or ended, the recovery is over."""
        self._adopting &= set(self._live)
        attempt = self.record.am_attempts[-1] if self.record.am_attempts else None
        if not self._adopting and attempt is not None and attempt["recovered_at"] is None:
            attempt["recovered_at"] = time.time()
            took = attempt["recovered_at"] - (attempt["down_since"] or attempt["started_at"])
            self.record.add_event("job", self.record.state.value, self.record.state.value,
                                  f"AM attempt {attempt['attempt']} recovered the job in {took:.2f}s "
                                  f"({attempt['adopted']} executor(s) adopted, {attempt['gone']} gone)")
            log.info("recovered in %.2fs", took)

    def finish(self, state: JobState, reason: str, actor: str | None = None) -> None:
        """Decide the job's outcome; it is recorded once every executor has stopped."""
        if self.record.finishing is not None or self.record.state.terminal:
            return
        log.info("job %s: %s", state.value, reason)
        self.record.finishing = state
        # The verdict, when it is reached: the final state follows once every executor has stopped.
        self.record.add_event("job", self.record.state.value, "stopping", f"{state.value}: {reason}", actor=actor)
        self._finish_reason = reason
        for ex in list(self._live.values()):
            self._stop(ex, f"job {state.value}")
        self._reconcile()

    # --- user requests (REST API) ---------------------------------------------------

    def request_kill(self, reason: str = "", actor: str | None = None) -> None:
        self._check_not_finished("it cannot be killed")
        self.finish(JobState.KILLED, reason or "killed on request", actor)

    def request_succeed(self, reason: str = "", actor: str | None = None) -> None:
        self._check_not_finished("it cannot be marked succeeded")
        self.finish(JobState.SUCCEEDED, reason or "marked succeeded on request", actor)

    def request_restart(self, executor_id: str, reason: str = "", actor: str | None = None) -> RestartReply:
        """Stop one executor and start a new incarnation of its index once it stopped (uncharged)."""
        ex = self._executor_to_act_on(executor_id, "restarted")
        why = reason or "restart requested"
        self.record.add_event(ex.id, ex.state.value, "restarting", why, incarnation=ex.incarnation, actor=actor)
        self._restart(ex, why)
        self._reconcile()
        return RestartReply(executor=ex.id, incarnation=ex.incarnation)

    def request_drain(self, executor_id: str, reason: str = "", actor: str | None = None) -> DrainReply:
        """Drain one running executor as on a preemption notice: its tasks move at their final positions
        and a new incarnation follows it, uncharged."""
        ex = self._executor_to_act_on(executor_id, "drained")
        if ex.state is not ExecutorState.RUNNING or ex.draining is not None:
            doing = f" and draining: {ex.draining}" if ex.draining is not None else ""
            raise Conflict(f"{executor_id} is {ex.state.value}{doing}: only a running executor that is "
                                    f"not draining can be drained (restart it instead)")
        ex.draining = f"drain requested{': ' + reason if reason else ''}"
        self.record.touch(ex)
        self.record.add_event(ex.id, ex.state.value, "draining", ex.draining, incarnation=ex.incarnation,
                              actor=actor)
        self._send(ex, {"command": protocol.CMD_DRAIN, "reason": ex.draining})
        self._journal()
        return DrainReply(executor=ex.id, incarnation=ex.incarnation)

    def _executor_to_act_on(self, executor_id: str, done: str) -> Executor:
        """The live executor a user's request names (404 if none, 409 if it ended or is stopping), for
        it to be ``done`` (``restarted``)."""
        self._check_not_finished(f"its executors cannot be {done}")
        ex = self.record.executors.get(executor_id)
        if ex is None:
            raise NotFound(f"no executor {executor_id!r} (executors: "
                                    f"{', '.join(sorted(self.record.executors)[:20])})")
        if ex.state.terminal:
            raise Conflict(f"{executor_id} has ended ({ex.state.value}): it cannot be {done}")
        if ex.stop_reason is not None:
            raise Conflict(f"{executor_id} is stopping ({ex.stop_reason}): it cannot be {done}")
        return ex

    def _restart(self, ex: Executor, why: str) -> None:
        ex.replace_when_stopped = True
        self.record.touch(ex)
        self._stop(ex, why)

    def request_task(self, action: str, task_id: str, reason: str = "", actor: str | None = None,
                     expected_holder: str | None = None) -> Task:
        """A user's ``requeue`` or ``skip`` of one input task; the task as it is now. Skipping a task an
        executor reads restarts that executor: its trainer must stop getting the task's records.
        ``expected_holder``: the executor id the user was told reads it ('' none); a skip is refused if
        that is no longer so (the task was handed out or handed back meanwhile)."""
        if self.data is None:
            raise NotFound("this job has no input")
        self._check_not_finished(f"its tasks cannot be {'re-queued' if action == 'requeue' else 'skipped'}")
        dispatcher = self.data.dispatcher
        if action == "skip" and expected_holder is not None and task_id in dispatcher.tasks:
            incarnation = dispatcher.tasks[task_id].holder
            ex = self._live.get(incarnation) if incarnation is not None else None
            now = ex.id if ex is not None else ""
            if now != expected_holder:
                will = f"skipping it now restarts {now}" if now else "skipping it now restarts nobody"
                raise Conflict(f"task {task_id} is read by {now or 'no executor'} now, not by "
                                        f"{expected_holder or 'no executor'} as you were told: {will}; look again "
                                        f"and confirm")
        try:
            if action == "requeue":
                return dispatcher.requeue(task_id, f"re-queued on request{': ' + reason if reason else ''}", actor)
            task, holder = dispatcher.skip(task_id, f"skipped on request{': ' + reason if reason else ''}", actor)
        except TaskActionRefused as exc:
            raise (NotFound if exc.status == 404 else Conflict)(str(exc)) from None
        ex = self._live.get(holder) if holder is not None else None
        if ex is not None and ex.stop_reason is None:
            self._restart(ex, f"it was reading task {task_id}, skipped on request")
        self._reconcile()
        return task

    def request_scale(self, role_name: str, replicas: int, actor: str | None = None,
                      reason: str | None = None) -> ScaleReply:
        self._check_not_finished("it cannot be scaled")
        if role_name not in self.record.roles:
            raise NotFound(f"no role {role_name!r} (roles: {sorted(self.record.roles)})")
        if replicas < 0:
            raise Invalid(f"replicas must be >= 0, got {replicas}")
        if replicas == 0 and (self.spec.role(role_name).success_percent or 0) > 0:
            raise Conflict(f"role {role_name} must keep at least 1 replica: the job waits for it to "
                                    f"succeed (success_percent {self.spec.role(role_name).success_percent:g})")
        if self.spec.role(role_name).framework == "pytorch":
            raise Conflict(f"role {role_name} is a pytorch role: WORLD_SIZE is fixed at start")
        role = self.record.roles[role_name]
        old = role.replicas
        if replicas == old:
            return ScaleReply(role=role_name, replicas=old)
        role.replicas = replicas
        self.record.add_event(f"role/{role_name}", str(old), str(replicas),
                              reason or f"scaled from {old} to {replicas}", actor=actor)
        log.info("role %s scaled %d -> %d%s", role_name, old, replicas, f": {reason}" if reason else "")
        for index in range(replicas, old):
            ex = self.record.drop_executor(f"{role_name}-{index}")
            self.record.history.append(ex)
            self._stop(ex, f"scaled down to {replicas}")
        for index in range(old, replicas):
            self._new_incarnation(role_name, index, attempt=0)
        self.membership.resized(role_name)
        self._reconcile()
        return ScaleReply(role=role_name, replicas=replicas)

    def request_data(self, action: str, actor: str | None = None) -> dict[str, Any]:
        """``suspend`` or ``resume`` handing out input tasks; the data status."""
        if self.data is None:
            raise NotFound("this job has no input")
        if action != "status":
            self._check_not_finished(f"its input cannot be {'suspended' if action == 'suspend' else 'resumed'}")
        if action == "suspend":
            status = self.data.suspend(actor)
        elif action == "resume":
            status = self.data.resume(actor)
        else:
            return self.data.status()
        self._journal()
        return status

    async def request_savepoint(self, directory: str) -> SavepointReply:
        """Write every input task's position to ``directory``; what was saved."""
        if self.data is None:
            raise NotFound("this job has no input")
        if not directory.startswith(("/", "file://", "hdfs://", "webhdfs://")):
            raise Invalid(f"dir must be an absolute path, a file://, hdfs:// or webhdfs://host:port URL, "
                                    f"got {directory!r}")
        try:
            saved = await self.data.savepoint(directory)
        except (OSError, ValueError, HadoopConfigError) as exc:
            raise Invalid(f"cannot write a savepoint to {directory}: {exc}") from None
        self.record.add_event("data", None, "savepoint", f"{saved['tasks']} task positions saved to {directory}")
        self._journal()
        return SavepointReply(**saved)

    # --- the data plane's reports (DataEvents) ---------------------------------------

    def data_event(self, subject: str, old: str | None, new: str, reason: str, actor: str | None = None) -> None:
        log.info("%s: %s%s", subject, reason, f" (by {actor})" if actor else "")
        self.record.add_event(subject, old, new, reason, actor=actor)

    def data_failed(self, reason: str) -> None:
        # Called from inside the data plane: decide once it has returned.
        asyncio.get_running_loop().call_soon(self.finish, JobState.FAILED, reason)

    def _check_not_finished(self, cannot: str) -> None:
        """A 409 once the job's outcome is decided: ``job APP has ended (succeeded): it cannot be
        scaled``, or while its executors stop, ``job APP is already stopping (killed): ...``."""
        if self.record.state.terminal:
            raise Conflict(f"job {self.record.app_id} has ended ({self.record.state.value}): {cannot}")
        if self.record.finishing is not None:
            raise Conflict(f"job {self.record.app_id} is already stopping ({self.record.finishing.value}): "
                                    f"{cannot}")

    # --- executor protocol --------------------------------------------------------

    def register(self, report: RegisterRequest) -> dict[str, Any]:
        ex = self._current(report.incarnation)
        if ex is not None and ex.state is ExecutorState.REGISTERED and ex.incarnation in self._adopting:
            # It registered with the last attempt, which died before answering: the answer is the same.
            self._heard_from(ex)
            ex.last_seen, ex.heartbeat_at = time.monotonic(), time.time()
            return self._registered
        if ex is None or ex.stop_reason is not None or ex.state not in (ExecutorState.STARTING, ExecutorState.NEW):
            reason = ex.stop_reason if ex is not None and ex.stop_reason else "unknown or stale incarnation"
            return {"ok": False, "command": protocol.CMD_KILL, "reason": reason}
        ex.host = report.host
        ex.ports = list(report.ports)
        ex.pid = report.pid
        ex.gpus = list(report.gpus)  # what the backend gave it, as it saw them
        ex.last_seen, ex.heartbeat_at = time.monotonic(), time.time()
        if ex.state is ExecutorState.NEW:  # registered before the backend's launch callback ran
            self._set(ex, ExecutorState.STARTING, "launched")
        self._heard_from(ex)
        self._set(ex, ExecutorState.REGISTERED, f"registered from {ex.host} ports {ex.ports}")
        self._awaiting_start.add(ex.incarnation)
        self.membership.changed(ex)
        self._reconcile()
        return self._registered

    async def heartbeat(self, report: HeartbeatRequest) -> dict[str, Any]:
        """The reply to a heartbeat: NONE_REPLY, or a command; a membership in it is pre-encoded bytes
        (``Membership``), which ``encode_reply`` splices in."""
        started = time.perf_counter()
        ex = self._current(report.incarnation)
        if ex is None:
            return {"command": protocol.CMD_KILL, "reason": "unknown or stale incarnation"}
        ex.last_seen, ex.heartbeat_at = time.monotonic(), time.time()
        if self._adopting:
            self._heard_from(ex)
        if ex.stop_reason is not None:
            if self.data is not None and ex.role in self._fed_roles and ex.state is ExecutorState.RUNNING:
                self.data.heartbeat(ex.incarnation, report.model_copy(update={"need_tasks": 0}), slot=ex.id)  # its last positions
                self._journal()
            return {"command": protocol.CMD_KILL, "reason": ex.stop_reason}
        if report.draining is not None and self._drained(ex, report):
            self._journal()
            return NONE_REPLY
        changed = report.state == protocol.REPORT_RUNNING and ex.state is ExecutorState.REGISTERED
        if changed:
            self._set(ex, ExecutorState.RUNNING, "trainer started")
        if report.ready and ex.state is ExecutorState.RUNNING and not ex.ready:
            self.record.mark_ready(ex, self.scheduler.ready_reason(ex))
            changed = True
        if changed:
            self._reconcile_now()  # journaled below, with this loop turn's other heartbeats
        reply = self._commands.pop(ex.incarnation, None)
        if reply is None and report.wait and ex.state is ExecutorState.REGISTERED:
            if ex.incarnation in self._start_sent:
                reply = self._start_command(ex)  # still waiting: the earlier reply was lost
            else:
                waiting = time.perf_counter()
                reply = await self._wait_for_command(ex)
                started += time.perf_counter() - waiting  # the long poll waits: that is no handling time
        if reply is None and ex.state is ExecutorState.RUNNING \
                and report.cluster_version < self.membership.version(ex.role):
            reply = {"command": protocol.CMD_CLUSTER, "cluster": self.membership.encoded(ex.role)[1]}
        fed = self.data is not None and ex.state is ExecutorState.RUNNING and ex.role in self._fed_roles \
            and (reply is None or reply["command"] not in (protocol.CMD_KILL, protocol.CMD_DRAIN))
        if fed:
            assert self.data is not None
            data = self.data.heartbeat(ex.incarnation, report, slot=ex.id)
            if data:
                reply = {**(reply or NONE_REPLY), **data}
        self.metrics.observe_heartbeat(time.perf_counter() - started)
        if (changed or fed or reply is not None or self.record.dirty) and self._journaling():
            await self._commit.wait()  # written with the other heartbeats of this loop turn
        return NONE_REPLY if reply is None else reply

    def _drained(self, ex: Executor, report: HeartbeatRequest) -> bool:
        """A draining executor's report (a preemption notice): noted once; once it says it drained, its
        trainer is gone and its tasks go back now, at this report's positions, before it exits. Whether
        it has drained."""
        if ex.draining is None:
            ex.draining = report.draining
            self.record.touch(ex)
            self.record.add_event(ex.id, ex.state.value, "draining", f"draining: {report.draining}",
                                  incarnation=ex.incarnation)
        if not report.drained:
            return False
        if self.data is not None and ex.role in self._fed_roles and ex.state is ExecutorState.RUNNING:
            self.data.heartbeat(ex.incarnation, report, slot=ex.id)
            self.data.release(ex.incarnation, Ending.DRAINED, f"{ex.id} drained: {ex.draining}", slot=ex.id)
        return True

    def unregister(self, report: UnregisterRequest) -> dict[str, Any]:
        ex = self._current(report.incarnation)
        if ex is not None:
            code = report.exit_code
            message = report.message[:500]
            state = ExecutorState.SUCCEEDED if code == 0 else ExecutorState.FAILED
            self._ended(ex, state, message or f"trainer exited {code}", code)
        return {"ok": True}

    def _current(self, incarnation: str) -> Executor | None:
        """The live executor a report is from; None for zombies (ended or unknown incarnations)."""
        return self._live.get(incarnation)

    async def _wait_for_command(self, ex: Executor) -> dict[str, Any] | None:
        wake = self._wakeups.setdefault(ex.incarnation, asyncio.Event())
        try:
            await asyncio.wait_for(wake.wait(), self._long_poll)
        except asyncio.TimeoutError:
            pass
        finally:
            self._wakeups.pop(ex.incarnation, None)
            ex.last_seen = time.monotonic()  # it was there all along (a long poll is shorter than the timeout)
        return self._commands.pop(ex.incarnation, None)

    def _send(self, ex: Executor, reply: dict[str, Any]) -> None:
        self._commands[ex.incarnation] = reply
        wake = self._wakeups.get(ex.incarnation)
        if wake is not None:
            wake.set()

    # --- backend events --------------------------------------------------------------

    def on_launched(self, launched: Launched) -> None:
        ex = self._live.get(launched.incarnation)
        if ex is None:
            return
        ex.host = ex.host or launched.host
        ex.gpus = ex.gpus or list(launched.gpus)
        ex.logs = dict(launched.logs)
        ex.pid = ex.pid or launched.pid
        self.record.touch(ex)
        if ex.state is ExecutorState.NEW:
            ex.last_seen = time.monotonic()
            self._set(ex, ExecutorState.STARTING, f"launched on {launched.host}")
        self._journal()

    def on_exited(self, exited: Exited) -> None:
        ex = self._live.get(exited.incarnation)
        if ex is None:
            return  # already ended through unregister, loss, or a forced stop
        state = ExecutorState.SUCCEEDED if exited.exit_code == 0 else ExecutorState.FAILED
        self._ended(ex, state, exited.reason, exited.exit_code, exited.preempted)

    # --- the decisions -------------------------------------------------------------------

    def _ended(self, ex: Executor, state: ExecutorState, reason: str, exit_code: int | None,
               preempted: bool = False) -> None:
        if ex.stop_reason is not None:
            state, reason = ExecutorState.STOPPED, ex.stop_reason
        policy = self.spec.role(ex.role).failover
        ex.preempted = state is ExecutorState.FAILED and (
            preempted or exit_code == protocol.EXIT_PREEMPTED or (policy is not None and policy.is_preemption(exit_code)))
        self._set(ex, state, reason, exit_code)
        self._forget(ex)
        if self.data is not None and ex.role in self._fed_roles:
            self.data.release(ex.incarnation, self._data_ending(ex), f"{ex.id} {ex.state.value}: {reason}",
                              slot=ex.id)
        self.membership.changed(ex)
        if self.record.finishing is None and self.record.executors.get(ex.id) is ex and ex.replace_when_stopped:
            log.info("%s: restarting on request", ex.id)
            self.record.history.append(ex)
            self.record.roles[ex.role].restarts += 1
            self._new_incarnation(ex.role, ex.index, ex.attempt + 1)
        elif self.record.finishing is None and self.record.executors.get(ex.id) is ex:
            decision = self.failover.decide(self.record.roles[ex.role], ex, ex.preempted)
            if decision.action is Action.RESTART:
                log.info("%s: restarting (%s)", ex.id, decision.reason)
                self.record.history.append(ex)
                self._new_incarnation(ex.role, ex.index, ex.attempt + 1)
            elif decision.action is Action.FAIL_JOB:
                self.finish(JobState.FAILED, decision.reason)
            elif decision.action is Action.IGNORE_ROLE:
                self.record.add_event(f"role/{ex.role}", None, "ignored", decision.reason)
                log.warning("%s", decision.reason)
        self._reconcile()

    def _data_ending(self, ex: Executor) -> Ending:
        """How a consuming executor's end bears on the tasks it held (the dispatcher charges them)."""
        if ex.state is ExecutorState.SUCCEEDED:
            return Ending.SUCCEEDED
        if ex.state is ExecutorState.LOST:
            return Ending.LOST
        if ex.state is not ExecutorState.FAILED:
            return Ending.STOPPED
        return Ending.PREEMPTED if ex.preempted else Ending.CRASHED

    def _verdict(self) -> Verdict | None:
        """The roles' verdict (scheduler), held back or overturned by the input: a job never succeeds on
        data it did not read (``input.early_exit: requeue``), and fails once nobody is left to read it."""
        verdict = self.scheduler.verdict()
        data = self.data
        if data is None or data.consumed or data.spec.early_exit == "accept" \
                or (verdict is not None and verdict.state is not JobState.SUCCEEDED):
            return verdict
        if any(self.record.count(role, *_NOT_ENDED) for role in self._fed_roles):
            return None  # consumers still read (or are being replaced): success waits for the input
        if not any(self.record.roles[role].replicas for role in self._fed_roles):
            return None  # every consuming role scaled to 0: paused on purpose, it may be scaled up again
        return Verdict(JobState.FAILED, f"input not consumed: {data.left()}; every consuming trainer exited "
                                        f"before the end of its input (input.early_exit: requeue)")

    def _reconcile(self) -> None:
        self._reconcile_now()
        self._journal()

    def _journaling(self) -> bool:
        return self.journal is not None or (self.data is not None and self.data.journal is not None)

    def _journal(self) -> None:
        """Write what changed to the AM's and the data plane's journals: called at the end of every
        step, before any answer leaves, so that a restarted AM knows whatever an executor was told."""
        if self.journal is not None:
            self.journal.finish_reason = self._finish_reason
            self.journal.flush()
        if self.data is not None:
            self.data.journal_write()

    def _reconcile_now(self) -> None:
        record = self.record
        if record.state.terminal:
            return
        if self.data is not None and self.data.kafka is not None:
            self.data.consumers(sum(record.count(role, ExecutorState.REGISTERED, ExecutorState.RUNNING)
                                    for role in self._fed_roles))
        if record.finishing is not None:
            if not self._live:
                if self.data is not None:
                    try:
                        self.data.finish(record.finishing.value)
                    except Exception:  # noqa: BLE001 - saving the positions failed: the job still ends
                        log.exception("finishing the data plane failed")
                self._set_job(record.finishing, self._finish_reason)
                self.timeline.interval = 0.0  # the last sample shows the end
                self._log_history()
                self._write_status()
                self.done.set()
            return
        for role in self.scheduler.roles_to_launch():
            record.roles[role].launched = True
            record.roles[role].launched_at = time.monotonic()
        for incarnation in list(self._to_launch):
            ex = self._live[incarnation]
            if record.roles[ex.role].launched:
                del self._to_launch[incarnation]
                task = self._spawn(self._launch(ex))
                self._launching.add(task)
                task.add_done_callback(self._launching.discard)
        self.scheduler.release_roles()
        released = {name for name, role in record.roles.items() if role.released}
        for incarnation in list(self._awaiting_start) if released else ():
            ex = self._live[incarnation]
            if ex.role in released and self.scheduler.may_start(ex):
                self._awaiting_start.discard(incarnation)
                self._start_sent.add(incarnation)
                self._send(ex, self._start_command(ex))
        if record.state is JobState.STARTING and self.scheduler.job_running():
            self._set_job(JobState.RUNNING, "every executor is running and ready")
            # What the start made (executors, their events) lives as long as the job: out of the
            # collector's sight, or at 10,000 executors each full collection holds heartbeats.
            gc.freeze()
        verdict = self._verdict()
        if verdict is not None:
            self.finish(verdict.state, verdict.reason)

    def _start_command(self, ex: Executor) -> dict[str, Any]:
        start: dict[str, Any] = {
            "command": self.spec.role(ex.role).argv(),
            "env": trainer_env(self.spec, self.record, ex, self.address),
            "cluster": self.membership.encoded(ex.role)[1],  # shared by every start of this version
            "readiness": self.spec.readiness_probe(ex.role),
        }
        tensorflow = tensorflow_task(self.spec, ex)
        if tensorflow is not None:
            start["tensorflow"] = tensorflow
        if self.data is not None and ex.role in self._fed_roles:
            start["feed"] = {"max_tasks": self.data.limit, "readers": self.data.spec.max_tasks_per_executor,
                             "exit_grace": self.data.spec.exit_grace, "delivery": self.data.spec.delivery,
                             "trainer_buffer": self.data.spec.trainer_buffer,
                             "restore_checkpoint": self.data.checkpoint(ex.id)}
        return {"command": protocol.CMD_START, "start": start}

    # --- executors: create, launch, stop -----------------------------------------------

    def _new_incarnation(self, role: str, index: int, attempt: int) -> Executor:
        incarnation = (attempt == 0 and self.backend.incarnation_for(role, index)) or uuid.uuid4().hex[:12]
        ex = Executor(role=role, index=index, incarnation=incarnation, attempt=attempt)
        self.record.put_executor(ex)
        self._live[ex.incarnation] = ex
        self._to_launch[ex.incarnation] = None
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
            if ex.incarnation in self._live:
                self._ended(ex, ExecutorState.FAILED, f"launch failed: {exc}", None)

    def _stop(self, ex: Executor, reason: str) -> None:
        if ex.stop_reason is not None or ex.state.terminal:
            return
        ex.stop_reason = reason
        self.record.touch(ex)
        if ex.incarnation in self._to_launch:  # never launched: nothing to stop
            self._ended(ex, ExecutorState.STOPPED, reason, None)
            return
        ex.stop_deadline = time.monotonic() + self._grace + 2 * self._interval
        self._send(ex, {"command": protocol.CMD_KILL, "reason": reason})
        self._spawn(self.backend.stop(ex.role, ex.index, ex.incarnation, force=False))

    def _forget(self, ex: Executor) -> None:
        self._live.pop(ex.incarnation, None)
        self._commands.pop(ex.incarnation, None)
        self._start_sent.discard(ex.incarnation)
        self._to_launch.pop(ex.incarnation, None)
        self._awaiting_start.discard(ex.incarnation)

    # --- periodic checks ------------------------------------------------------------------

    async def _sweep_forever(self) -> None:
        while not self.done.is_set():
            await asyncio.sleep(min(self._interval / 2, 0.5))
            try:
                self.sweep()
            except Exception:  # noqa: BLE001 - the sweep must keep running
                log.exception("sweep failed")

    def sweep(self) -> None:
        """Heartbeat expiry, forced stops past their grace, start barriers that never opened."""
        now = time.monotonic()
        for ex in list(self._live.values()):
            if ex.stop_deadline is not None and now > ex.stop_deadline:
                self._spawn(self.backend.stop(ex.role, ex.index, ex.incarnation, force=True))
                self._ended(ex, ExecutorState.STOPPED, f"{ex.stop_reason}; force-killed after the grace period",
                            None)
            elif ex.state in (ExecutorState.REGISTERED, ExecutorState.RUNNING) \
                    and ex.stop_reason is None and now - ex.last_seen > self._timeout:
                silent = now - ex.last_seen
                self._spawn(self.backend.stop(ex.role, ex.index, ex.incarnation, force=True))
                self._ended(ex, ExecutorState.LOST, f"no heartbeat for {silent:.1f}s "
                                                    f"(timeout {self._timeout:g}s)", None)
        stuck = self.scheduler.waiting_too_long(now, self.spec.scheduling.start_timeout, self.backend.pending_reason) \
            or self.scheduler.not_ready(now)
        if stuck:
            self.finish(JobState.FAILED, stuck)
        self._autoscale(now)
        self._journal()
        written_at, events = self._snapshot
        if len(self.record.events) != events and now - written_at >= self._snapshot_every \
                and self.status_path is not None and self._snapshotting is None:
            self._snapshotting = self._spawn(self._write_snapshot())
        self._log_history()

    def _autoscale(self, now: float) -> None:
        """Each autoscaled role's policy, every ``interval`` while the job runs and input is handed out.
        A change goes through request_scale, as a user's does (membership pushed to the executors,
        tasks of removed ones handed back): one ``role/NAME`` event with the policy's reason."""
        data = self.data
        if not self.autoscalers or data is None:
            return
        if self.record.state is not JobState.RUNNING or self.record.finishing is not None or not data.handing_out:
            for scaler in self.autoscalers.values():
                scaler.pause()
            return
        backlog: Backlog | None = None
        for name, scaler in self.autoscalers.items():
            role = self.record.roles[name]
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
                self.request_scale(name, decision.replicas, actor=AUTOSCALER, reason=decision.reason)
            except ControlRefused as exc:
                log.warning("autoscaler: cannot scale role %s to %d: %s", name, decision.replicas, exc)
                continue
            role.autoscale = {**(role.autoscale or {}), "last_decision": {
                "time": time.time(), "from_replicas": old, "to_replicas": decision.replicas,
                "reason": decision.reason}}

    def _log_history(self) -> None:
        sample = self.timeline.maybe_sample()
        if self.event_log is not None:
            if sample is not None:
                self.event_log.add_sample(sample)
            self.event_log.flush()

    # --- helpers ------------------------------------------------------------------------------

    def _set(self, ex: Executor, state: ExecutorState, reason: str, exit_code: int | None = None) -> None:
        old = ex.state
        self.record.set_executor_state(ex, state, reason, exit_code)
        log.info("%s [%s] %s -> %s%s: %s", ex.id, ex.incarnation, old.value, state.value,
                 f" (exit {exit_code})" if exit_code is not None else "", reason)

    def _set_job(self, state: JobState, reason: str) -> None:
        old = self.record.state
        self.record.set_job_state(state, reason)
        log.info("job %s -> %s: %s", old.value, state.value, reason)
        self._write_status()

    def _write_status(self) -> None:
        """The status file, now (a change of the job's state, the outcome)."""
        if self.status_path is None:
            return
        # The journal first: a status file never shows what a restarted AM would not know (an AM
        # killed right after writing the outcome must find it in the journal too).
        self._journal()
        self._status_writes += 1
        tmp = self.status_path.with_suffix(".tmp")
        tmp.write_text("".join(self.record.json_parts()))
        os.replace(tmp, self.status_path)  # atomic: a reader never sees half a file
        self._snapshot = (time.monotonic(), len(self.record.events))

    async def _write_snapshot(self) -> None:
        """The periodic status file, written a part at a time between requests: at 10,000 executors it
        is megabytes, which written at once held heartbeats for a second."""
        assert self.status_path is not None
        try:
            self._journal()
            writes, events, started = self._status_writes, len(self.record.events), time.monotonic()
            tmp = self.status_path.with_suffix(".snapshot")
            with tmp.open("w") as f:
                for part in self.record.json_parts():
                    f.write(part)
                    await asyncio.sleep(0)
            if writes == self._status_writes:  # no write of the state since: this one is newer
                os.replace(tmp, self.status_path)
                self._snapshot = (time.monotonic(), events)
            took = time.monotonic() - started
            self._snapshot_every = max(STATUS_SNAPSHOT_SECONDS, STATUS_SNAPSHOT_COST * took)
        except OSError:
            log.exception("writing the status snapshot failed")
        finally:
            self._snapshotting = None

    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


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


def _float_env(name: str) -> float | None:
    try:
        return float(os.environ[name])
    except (KeyError, ValueError):
        return None


def _input_suspended(record: JobRecord) -> bool:
    """Whether the input was suspended on request when the journal ends (its last suspend or resume)."""
    for event in reversed(record.events):
        if event.subject == "data" and "suspended" in (event.to_state, event.from_state):
            return event.to_state == "suspended"
    return False
