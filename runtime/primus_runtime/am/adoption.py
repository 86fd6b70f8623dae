"""A new AM attempt takes over the job from the journal of the one that died.

Executors still running are adopted (same incarnations, trainers untouched), the ones gone
meanwhile go through failover uncharged, the ones never launched are launched now. The recovery
is over once every adopted executor has reported or ended (``Recovery``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Protocol

from .. import protocol
from ..backends.base import Adoption, ExecutorBackend
from ..spec import JobSpec
from .fleet import Fleet
from .goodput import RESTARTING
from .journal import Recovered, restore
from .membership import Membership
from .publishing import Publisher
from .state import Executor, ExecutorState, JobRecord

if TYPE_CHECKING:
    from ..data.plane import DataPlane

log = logging.getLogger("primus.am")


class Recovery:
    """The incarnations kept from an earlier attempt that have not been heard from yet."""

    def __init__(self, record: JobRecord, fleet: Fleet):
        self.record = record
        self.fleet = fleet
        self.adopting: set[str] = set()

    def heard_from(self, ex: Executor) -> None:
        if ex.incarnation in self.adopting:
            self.adopting.discard(ex.incarnation)
            self.check()

    def check(self) -> None:
        """Once every kept executor has reported or ended, the recovery is over."""
        self.adopting &= set(self.fleet.live)
        attempt = self.record.am_attempts[-1] if self.record.am_attempts else None
        if self.adopting or attempt is None or attempt["recovered_at"] is not None:
            return
        attempt["recovered_at"] = time.time()
        took = attempt["recovered_at"] - (attempt["down_since"] or attempt["started_at"])
        self.record.add_event("job", self.record.state.value, self.record.state.value,
                              f"AM attempt {attempt['attempt']} recovered the job in {took:.2f}s "
                              f"({attempt['adopted']} executor(s) adopted, {attempt['gone']} gone)")
        log.info("recovered in %.2fs", took)


class TakingOver(Protocol):
    """What of the AM a take-over uses."""

    record: JobRecord
    spec: JobSpec
    backend: ExecutorBackend
    data: DataPlane | None
    fleet: Fleet
    recovery: Recovery
    membership: Membership
    publisher: Publisher
    fed_roles: set[str]
    done: asyncio.Event
    finish_reason: str

    def stop(self, ex: Executor, reason: str) -> None: ...

    def ended(self, ex: Executor, state: ExecutorState, reason: str, exit_code: int | None,
              preempted: bool = False) -> None: ...

    def run(self) -> None: ...

    def reconcile(self) -> None: ...

    def account(self, ex: Executor) -> None: ...


def new_attempt(record: JobRecord) -> dict[str, Any]:
    """This attempt's entry in ``am_attempts`` (recovered once every adopted executor reported)."""
    attempt: dict[str, Any] = {"attempt": record.attempt, "started_at": time.time(),
                               "down_since": _float_env(protocol.ENV_AM_DOWN_SINCE), "recovered_at": None,
                               "adopted": 0, "gone": 0,
                               "cause": os.environ.get(protocol.ENV_AM_DOWN_CAUSE, "")[:300] or None}
    record.am_attempts.append(attempt)
    return attempt


async def take_over(am: TakingOver, recovered: Recovered) -> None:
    """Carry on from an earlier attempt's journal."""
    record = am.record
    am.finish_reason = restore(record, recovered)
    am.membership.rebuild()
    _resume_history(am.publisher)
    attempt = new_attempt(record)
    if record.state.terminal:  # it died saving the outcome: save it again
        record.add_event("job", record.state.value, record.state.value,
                         f"AM attempt {record.attempt} took over after the job ended")
        attempt["recovered_at"] = attempt["started_at"]
        am.publisher.write_status()
        am.done.set()
        return
    kept = [ex for ex in [*record.history, *record.executors.values()] if not ex.state.terminal]
    found = await am.backend.adopt([adoption(am.spec, ex) for ex in kept])
    _keep(am, kept, found)
    attempt["adopted"] = len(am.recovery.adopting)
    cause = f" ({attempt['cause']})" if attempt.get("cause") else ""
    record.add_event("job", record.state.value, record.state.value,
                     f"AM attempt {record.attempt} took over{cause}: {len(am.recovery.adopting)} executor(s) "
                     f"still running adopted, {len(kept) - len(am.recovery.adopting)} gone or never launched")
    log.info("AM attempt %d: adopting %d executor(s)", record.attempt, len(am.recovery.adopting))
    if am.data is not None:
        am.data.adopt({ex.incarnation for ex in kept if ex.incarnation in found and ex.role in am.fed_roles})
        if input_suspended(record):
            am.data.dispatcher.suspended = True  # a user suspended handing out tasks: still so
    last_seen = _last_seen(recovered, attempt)
    for ex in kept:
        if ex.incarnation in found or (ex.state is ExecutorState.NEW and am.backend.executors_outlive_am):
            resume(am, ex)
            am.account(ex)  # goodput: its journaled cause carries on (a journal without one: from now)
        else:
            attempt["gone"] += 1
            # Goodput: when it ended while no AM ran is unknown; from when an AM last saw it, its index
            # was restarting (its replacement goes on restarting from now).
            record.goodput.enter(ex, RESTARTING, at=last_seen)
            am.ended(ex, ExecutorState.FAILED, "ended while no AM was running (exit status unknown)",
                     None, preempted=True)
    am.run()
    am.recovery.check()
    am.reconcile()
    am.publisher.write_status()


def _last_seen(recovered: Recovered, attempt: dict[str, Any]) -> float:
    """When the dead attempt last saw its executors, as best known: its journal's last write (the end of
    its last step), or when its supervisor found it dead. Approximate: an executor may have been heard
    from later than its last journaled change; on Kubernetes the journal is a copy made at start (its
    time is now), and the down time then counts as the cause each executor was in."""
    known = [t for t in (recovered.written_at, attempt.get("down_since")) if t is not None]
    return min(known) if known else time.time()


def _resume_history(publisher: Publisher) -> None:
    """The journal and the event log carry on from what the earlier attempt wrote."""
    if publisher.journal is not None:
        publisher.journal.adopt_written()
    if publisher.event_log is not None:
        publisher.event_log.resume()
        publisher.timeline.samples = publisher.event_log.samples()


def _keep(am: TakingOver, kept: list[Executor], found: set[str]) -> None:
    """The kept executors are live again: the ones the backend found are being adopted, the ones never
    launched are to be launched."""
    # Executors that may report late get the recovery grace, not the heartbeat timeout.
    patience = time.monotonic() + max(0.0, am.spec.am.grace - am.spec.am.heartbeat_timeout)
    for ex in kept:
        am.fleet.live[ex.incarnation] = ex
        ex.last_seen = patience
        if ex.incarnation in found:
            am.recovery.adopting.add(ex.incarnation)
        elif ex.state is ExecutorState.NEW and am.backend.executors_outlive_am:
            am.fleet.to_launch[ex.incarnation] = None  # never launched


def adoption(spec: JobSpec, ex: Executor) -> Adoption:
    """What the backend needs to find a kept executor."""
    return Adoption(ex.role, ex.index, ex.incarnation, ex.attempt, ex.pid,
                    spec.role(ex.role).resources, list(ex.gpus), dict(ex.logs))


def resume(am: TakingOver, ex: Executor) -> None:
    """Pick up an adopted executor where the last attempt left it."""
    if ex.stop_reason is not None:
        reason, ex.stop_reason = ex.stop_reason, None
        am.stop(ex, reason)  # asked to stop before: ask again
    elif ex.state is ExecutorState.REGISTERED:
        am.fleet.awaiting_start.add(ex.incarnation)  # a start command sent twice is ignored
    elif ex.draining is not None:
        am.fleet.send(ex, {"command": protocol.CMD_DRAIN, "reason": ex.draining})  # a drain asked twice is one


def input_suspended(record: JobRecord) -> bool:
    """Whether the input was suspended on request when the journal ends (its last suspend or resume)."""
    for event in reversed(record.events):
        if event.subject == "data" and "suspended" in (event.to_state, event.from_state):
            return event.to_state == "suspended"
    return False


def _float_env(name: str) -> float | None:
    try:
        return float(os.environ[name])
    except (KeyError, ValueError):
        return None
