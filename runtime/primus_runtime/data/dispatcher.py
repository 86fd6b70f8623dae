"""Tasks, attempts, pull dispatch, progress and the watermark: the AM's data state.

The dispatcher is a plain object driven by three kinds of calls, all from the AM's
event loop: the scanner adds partitions of tasks (``add_partition``,
``scan_finished``), executors report on heartbeats (``heartbeat``), and the AM says
when an executor ended (``release``). It never looks at executors or roles; the AM
never looks at tasks. Decisions go out through ``DataEvents``: an event line for the
job's log, and ``failed`` when the stop policy says the job cannot go on.

A task moves ``queued -> running -> done``; a running task whose executor ended goes
back to the front of the queue with the position it last reported (records already
delivered, skipped on the next attempt), uncharged: a trainer killed by a signal, out of
memory, preempted or lost says nothing about the data. Attempts are charged only for
failures the task is at fault for: its reader failed (unreadable or corrupt data), or
trainers on two different executors died while reading it at the same position (a poison
record). Out of ``max_task_attempts`` (or interrupted ``max_task_interruptions`` times, the
backstop for a task that takes down every executor reading it), ``on_bad_data`` decides:
``fail`` the job, or ``quarantined`` (skipped, listed in the status).
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from ..models import DataReport
from ..partitions import DAY_LABEL, HOUR_LABEL, label_end, label_granularity
from ..spec import InputSpec

# How far back the transfer rate looks.
RATE_WINDOW_SECONDS = 30.0


class Ending(str, Enum):
    """How a consuming executor ended, as far as its tasks are concerned."""

    SUCCEEDED = "succeeded"  # the trainer exited 0
    CRASHED = "crashed"  # the trainer failed: non-zero exit or a signal (OOM kills are SIGKILL)
    PREEMPTED = "preempted"
    LOST = "lost"  # no heartbeat, or its node went away
    # It drained on a preemption notice and handed its tasks back at their final positions: the
    # trainer was told to leave, so even the task it was reading is not counted as interrupted.
    DRAINED = "drained"
    STOPPED = "stopped"  # the AM stopped it (job end, scale-down, user)


class TaskState(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    QUARANTINED = "quarantined"

    @property
    def resolved(self) -> bool:
        return self in (TaskState.DONE, TaskState.QUARANTINED)


@dataclass(slots=True)  # a job may hold millions of them
class Task:
    """A byte range (row-group range for parquet) of one file, read by one executor at a time."""

    id: str
    partition: str  # partition label ("" without a time range)
    source: str
    url: str
    format: str
    compression: str
    start: int
    end: int
    size: int  # bytes this task stands for (progress and ETA)
    state: TaskState = TaskState.QUEUED
    attempts: int = 0  # attempts charged (reader failures, executor failures)
    records: int = 0  # records delivered so far (the position a retry resumes from)
    bytes_done: int = 0
    holder: str | None = None  # executor incarnation holding it
    error: str = ""
    interruptions: int = 0  # times the executor reading it ended (uncharged)
    crashed_on: str = ""  # executor id of the last trainer that died reading it
    crashed_at: int = -1  # and the task's position then
    # A Kafka partition (a stream: `end` -1 when unbounded): the next offset to read, >= 0 (-1 for a file),
    # and the timestamp (ms) of the last record delivered.
    offset: int = -1
    event_time: int = -1
    interrupted_at: int = -1  # the position (records) at its last interruption

    @property
    def stream(self) -> bool:
        return self.offset >= 0

    def assignment(self) -> dict[str, Any]:
        return {"task_id": self.id, "url": self.url, "format": self.format, "compression": self.compression,
                "start": self.offset if self.offset >= 0 else self.start, "end": self.end, "skip": self.records}

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "partition": self.partition, "source": self.source, "url": self.url,
                "format": self.format, "compression": self.compression, "start": self.start, "end": self.end,
                "size": self.size}


@dataclass(slots=True)
class PartitionProgress:
    """One source's share of one partition: what the page's partition table shows, kept as tasks
    change so that showing it costs O(partitions), not O(tasks)."""

    tasks: int = 0
    bytes: int = 0
    bytes_done: int = 0
    states: Counter = field(default_factory=Counter)


class TaskActionRefused(Exception):
    """A user's re-queue or skip that cannot be done now; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class DataEvents(Protocol):
    """What the dispatcher tells the AM."""

    def data_event(self, subject: str, old: str | None, new: str, reason: str, actor: str | None = None) -> None:
        """``actor``: who asked, for a change a user requested."""

    def data_failed(self, reason: str) -> None: ...


class TaskStore(Protocol):
    """Where task changes are kept (the work-preserve journal)."""

    def added(self, task: Task) -> None: ...

    def changed(self, task: Task) -> None: ...

    def checkpoint(self, slot: str, checkpoint: str) -> None: ...


class Dispatcher:
    def __init__(self, spec: InputSpec, events: DataEvents, store: TaskStore | None = None,
                 recovered: dict[str, dict[str, Any]] | None = None):
        self.spec = spec
        self.events = events
        self.store = store
        self.tasks: dict[str, Task] = {}
        self.queue: deque[str] = deque()
        # Kafka partitions, handed out once no file task is queued (files first, then the stream), at
        # most a fair share per consuming executor (streams never end: see _kafka_share).
        self.stream_queue: deque[str] = deque()
        self.stream_tasks = 0
        self.revoking: dict[str, str] = {}  # Kafka task -> the holder told to hand it back
        self.expected_consumers = 0  # consuming executors registered or running (the AM says)
        self.held: dict[str, dict[str, None]] = {}  # holder -> task ids, in assignment order
        self.reading: dict[str, str] = {}  # holder -> the task its trainer was reading, as last reported
        self.recovered = recovered or {}  # task id -> {state, records, bytes, attempts} of an earlier job
        # A restarted AM: incarnations of executors it adopted, whose running tasks stay theirs, and
        # what they reported about tasks the scan has not listed again yet (applied once it has).
        self.adopted: set[str] = set()
        self._early: dict[str, dict[str, Any]] = {}  # task id -> {"holder", "progress", "done", "failed"}
        self.state = "scanning"
        self.scan_complete = False
        self.waiting_for: str | None = None
        self.suspended = False
        self.enough = False  # success_percent reached: nothing more is handed out
        self.counts = {s: 0 for s in TaskState}
        self.bytes_total = 0
        self.bytes_done = 0
        self.records_done = 0
        self.unresolved: dict[str, int] = {}  # partition -> tasks not done yet
        self.progress_by_partition: dict[tuple[str, str], PartitionProgress] = {}  # (source, partition) -> ...
        # Per granularity of the sources (day, hour): its partitions in time order, and how many of the
        # first ones are fully consumed.
        granularities = {s.granularity for s in spec.sources} if spec.time_range is not None else set()
        self.partitions: dict[str, list[str]] = {g: [] for g in granularities if g is not None}
        self._consumed = dict.fromkeys(self.partitions, 0)
        self._rate: deque[tuple[float, int]] = deque()
        self.ended = False  # the job ended (``finish``)
        self.limit = spec.max_tasks_per_executor + spec.prefetch
        self.failure: str | None = None
        self.quarantined: list[str] = []
        self.exactly_once = spec.delivery == "exactly_once"
        self.checkpoints: dict[str, str] = {}  # executor id -> last committed checkpoint (exactly-once)

    # --- from the scanner ---

    def add_partition(self, label: str, tasks: Iterable[Task]) -> int:
        """A fully listed partition's tasks, in reading order; returns how many were new."""
        if label not in self.unresolved:
            if label:
                self.partitions[label_granularity(label)].append(label)
            self.unresolved[label] = 0
        added = 0
        reported: list[Task] = []  # adopted tasks with reports that came before this listing
        for task in tasks:
            if task.id in self.tasks:
                continue
            added += 1
            self.tasks[task.id] = task
            self.bytes_total += task.size
            earlier = self.recovered.get(task.id)
            if task.stream:
                self.stream_tasks += 1
            if earlier is not None:  # work preserved by an earlier job
                if task.stream and int(earlier.get("offset", -1)) >= 0:
                    task.offset = int(earlier["offset"])
                    task.event_time = int(earlier.get("time", -1))
                task.attempts = int(earlier.get("attempts", 0))
                task.records = int(earlier.get("records", 0))
                task.bytes_done = min(int(earlier.get("bytes", 0)), task.size)
                task.error = str(earlier.get("error", ""))
                old = TaskState(earlier.get("state", "queued"))
                if old.resolved:
                    task.state = old
                    if old is TaskState.QUARANTINED:
                        self.quarantined.append(task.id)
                    task.bytes_done = task.size if old is TaskState.DONE else task.bytes_done
                elif old is TaskState.RUNNING and (earlier.get("holder") in self.adopted or
                                                   self._early.get(task.id, {}).get("holder") == earlier.get("holder")):
                    # Still being read by an adopted executor; or by one that reported on it, then ended,
                    # before this listing: what it said (done, say) holds all the same.
                    task.state, task.holder = old, str(earlier["holder"])
                    self.held.setdefault(task.holder, {})[task.id] = None
                    if task.id in self._early:
                        reported.append(task)
            self.counts[task.state] += 1
            self.bytes_done += task.bytes_done
            part = self.progress_by_partition.setdefault((task.source, label), PartitionProgress())
            part.tasks += 1
            part.bytes += task.size
            part.bytes_done += task.bytes_done
            part.states[task.state] += 1
            self.records_done += task.records
            if task.state.resolved:
                continue
            self.unresolved[label] += 1
            if task.state is TaskState.QUEUED:
                self._queue_of(task).append(task.id)
            if self.store is not None:
                self.store.added(task)
                if task.stream:  # its first offset, resolved once (start: latest must not move on a restart)
                    self.store.changed(task)
        for task in reported:
            self._apply_early(task, self._early.pop(task.id))
            if task.state is TaskState.RUNNING and task.holder not in self.adopted:  # its reader ended meanwhile
                self._requeue_unheld(task)
        self._advance_watermark()
        if self.state == "scanning" and self.tasks:
            self.state = "suspended" if self.suspended else "running"
        self._check_complete()
        return added

    def scan_finished(self) -> None:
        self.scan_complete = True
        self.waiting_for = None
        if not self.tasks:
            self._fail("the input has no files: every source and partition is empty")
            return
        self._check_complete()

    def fail(self, reason: str) -> None:
        self._fail(reason)

    def scan_failed(self, reason: str) -> None:
        self._fail(f"scanning failed: {reason}")

    def waiting(self, what: str | None) -> None:
        self.waiting_for = what

    # --- from executors ---

    def heartbeat(self, holder: str, report: DataReport, slot: str | None = None) -> dict[str, Any]:
        """Apply an executor's data report; the data part of the reply. ``slot``: the executor id
        (role-index) whose replacement is told the last committed checkpoint (exactly-once)."""
        held = self.held.setdefault(holder, {})
        if report.reading is not None:
            self.reading[holder] = report.reading
        commit = report.commit
        if slot is not None and commit is not None and commit.checkpoint is not None:
            self.checkpoints[slot] = commit.checkpoint
            if self.store is not None:
                self.store.checkpoint(slot, self.checkpoints[slot])
        if holder in self.adopted:
            self._keep_early(holder, report)
        for task_id, position in report.progress.items():
            task = self.tasks.get(task_id)
            if task is not None and task.holder == holder:
                self._progress(task, position.records, position.bytes)
                if task.stream and position.offset is not None and position.offset > task.offset:
                    task.offset = position.offset
                    if position.time is not None:
                        task.event_time = max(task.event_time, position.time)
        for task_id in report.done:
            task = self.tasks.get(task_id)
            if task is not None and task.holder == holder and task.state is TaskState.RUNNING:
                held.pop(task_id, None)
                self._resolve(task, TaskState.DONE, "read to the end")
        for task_id, error in report.failed.items():
            task = self.tasks.get(task_id)
            if task is not None and task.holder == holder and task.state is TaskState.RUNNING:
                held.pop(task_id, None)
                self._attempt_failed(task, error[:500])
        for task_id in report.released:
            task = self.tasks.get(task_id)
            if task is not None and task.holder == holder and task.state is TaskState.RUNNING:
                held.pop(task_id, None)
                self.revoking.pop(task_id, None)
                task.holder = None
                self._set(task, TaskState.QUEUED)
                self._queue_of(task).appendleft(task.id)  # a revoked stream, or a file task a closed feed refused
        reply: dict[str, Any] = {}
        # Assignments the executor does not know of were lost on the way: send them again.
        known = set(report.held or ()) | set(report.done) | set(report.failed)
        resend = [self.tasks[t].assignment() for t in held if t not in known] if report.held is not None else []
        # At-least-once, every task held counts against the limit, also one whose records all sit in
        # the trainer's pipe: a dead trainer returns all of them, so the limit bounds what one crash
        # disturbs. Exactly-once, a task stays held until the trainer commits, which it may do only
        # after reading more: there the executor counts only the tasks it still feeds.
        streams = sum(1 for t in held if self.tasks[t].stream) if self.stream_tasks else 0
        room = self.limit if self.exactly_once else self.limit - (len(held) - streams)
        need = min(report.need_tasks, room)
        new: list[dict[str, Any]] = []
        handing_out = not self.suspended and not self.enough and self.failure is None
        while need > 0 and self.queue and handing_out:
            task = self.tasks[self.queue.popleft()]
            if task.state is not TaskState.QUEUED:
                continue
            self._hand_out(task, holder, held, new)
            need -= 1
        if self.stream_tasks and report.need_tasks > 0 and handing_out:
            revoke = self._balance_streams(holder, held, streams, new)
            if revoke:
                reply["revoke"] = revoke
        if resend or new:
            reply["tasks"] = resend + new
        if self.state == "exhausted" or (self.enough and not self.counts[TaskState.RUNNING]) or (
                self.exactly_once and self.scan_complete and not self.counts[TaskState.QUEUED]
                and self.failure is None):
            # Exactly-once: nothing is left to hand out, so executors close stdin once they have
            # written what they hold; the trainers commit the rest and exit.
            reply["data_exhausted"] = True
        self._sample_rate()
        return reply

    def _hand_out(self, task: Task, holder: str, held: dict[str, None], new: list[dict[str, Any]]) -> None:
        self._set(task, TaskState.RUNNING)
        task.holder = holder
        held[task.id] = None
        new.append(task.assignment())

    def _balance_streams(self, holder: str, held: dict[str, None], streams: int,
                         new: list[dict[str, Any]]) -> list[str]:
        """Kafka partitions for ``holder``: up to its fair share, once no file task is queued; beyond
        it (more consumers than when it got them), the ones to hand back (``revoke``).

        Streams never end, so pulling as files do would leave the first executor with every partition:
        the partitions are spread evenly instead, ``n // consumers`` each and one more for the first
        ``n % consumers`` of those holding more (by id, so that every executor computes the same)."""
        active = list(self.held)  # every consuming executor that reported and has not ended
        consumers = max(len(active), self.expected_consumers, 1)
        base, extra = divmod(self.stream_tasks, consumers)
        counts = {h: sum(1 for t in self.held[h] if self.tasks[t].stream and t not in self.revoking) for h in active}
        above = sorted(h for h, n in counts.items() if n > base)
        share = base + 1 if (holder in above[:extra] or (holder not in above and len(above) < extra)) else base
        mine = counts[holder]
        while mine < share and self.stream_queue and not self.queue:
            task = self.tasks[self.stream_queue.popleft()]
            if task.state is TaskState.QUEUED:
                self._hand_out(task, holder, held, new)
                mine += 1
        if mine > share:
            keep = [t for t in held if self.tasks[t].stream and t not in self.revoking]
            for task_id in keep[share:]:  # the newest go: the oldest keep their consumers warm
                self.revoking[task_id] = holder
        return [t for t, h in self.revoking.items() if h == holder]

    def _queue_of(self, task: Task) -> deque[str]:
        return self.stream_queue if task.stream else self.queue

    def _keep_early(self, holder: str, report: DataReport) -> None:
        """An adopted executor reports on tasks the restarted AM's scan has not listed again: keep
        what it says (it reports an end only once) until the task is listed."""
        unknown = [t for t in (*report.progress, *report.done, *report.failed) if t not in self.tasks]
        for task_id in unknown:
            early = self._early.setdefault(task_id, {"holder": holder})
            if task_id in report.progress:
                early["progress"] = report.progress[task_id]
            if task_id in report.done:
                early["done"] = True
            if task_id in report.failed:
                early["failed"] = report.failed[task_id][:500]

    def _apply_early(self, task: Task, early: dict[str, Any]) -> None:
        if early["holder"] != task.holder:
            return
        if "progress" in early:
            self._progress(task, early["progress"].records, early["progress"].bytes)
        if early.get("done"):
            self.held[early["holder"]].pop(task.id, None)
            self._resolve(task, TaskState.DONE, "read to the end")
        elif "failed" in early:
            self.held[early["holder"]].pop(task.id, None)
            self._attempt_failed(task, early["failed"])

    def _requeue_unheld(self, task: Task) -> None:
        """``task``, held by an executor that ended before the scan listed it, to the front of the
        queue at its reported position."""
        assert task.holder is not None
        held = self.held.get(task.holder, {})
        held.pop(task.id, None)
        if not held:
            self.held.pop(task.holder, None)
        self._set(task, TaskState.QUEUED)
        task.holder = None
        self._queue_of(task).appendleft(task.id)

    def release(self, holder: str, ending: Ending, reason: str, slot: str = "") -> None:
        """An executor ended: its tasks go back to the front of the queue, at their reported position,
        uncharged. Only the task its trainer was reading when it ended can be charged (see
        ``_interrupted``). ``slot``: the executor id (role-index), to tell executors apart."""
        held = self.held.pop(holder, {})
        reading = self.reading.pop(holder, None)
        self.adopted.discard(holder)  # its tasks the scan lists again go back to the queue
        returned = []
        for task_id in held:
            task = self.tasks[task_id]
            if task.state is not TaskState.RUNNING:
                continue
            if task_id == reading and ending in (Ending.CRASHED, Ending.PREEMPTED, Ending.LOST) \
                    and self._interrupted(task, ending, reason, slot):
                continue
            returned.append(task)
        for task in reversed(returned):
            self._set(task, TaskState.QUEUED)
            task.holder = None
            self.revoking.pop(task.id, None)
            self._queue_of(task).appendleft(task.id)
        if returned:
            why = (f"{reason}; it exited before the end of its input" if ending is Ending.SUCCEEDED else reason)
            self.events.data_event("data", None, "requeued",
                                   f"{len(returned)} task(s) back in the queue at their positions, uncharged "
                                   f"({why}): {', '.join(t.id for t in returned[:5])}")

    def _interrupted(self, task: Task, ending: Ending, reason: str, slot: str) -> bool:
        """The executor reading ``task`` ended: whether that used up the task (it is then resolved or failed).

        A trainer death is charged to the task only when a trainer on another executor died at the same
        position before (no record got through in between): a poison record, not a bad executor."""
        if task.records != task.interrupted_at:
            # Records got through since its last interruption (a file read further, a stream moved on):
            # the backstop counts only interruptions in a row at one position, so that a job whose
            # trainers are killed often (preemptions, an operator, OOM at different places) still ends.
            task.interruptions = 0
        task.interrupted_at = task.records
        task.interruptions += 1
        if ending is Ending.CRASHED:
            if task.crashed_on and task.crashed_on != slot and task.records <= task.crashed_at:
                task.attempts += 1
                task.error = (f"trainers on {task.crashed_on} and {slot} died at record {task.records} of the "
                              f"task; last: {reason}")
                if task.attempts >= self.spec.max_task_attempts:
                    self._out_of_attempts(task)
                    return True
            task.crashed_on, task.crashed_at = slot, task.records
        if task.interruptions >= self.spec.max_task_interruptions:
            task.error = (f"interrupted {task.interruptions} times, max_task_interruptions is "
                          f"{self.spec.max_task_interruptions}; last: {reason}")
            self._give_up(task, f"task {task.id} ({task.url}) {task.error}")
            return True
        return False

    # --- from the user ---

    def suspend(self, actor: str | None = None) -> None:
        if not self.suspended:
            self.suspended = True
            if self.state in ("running", "scanning"):
                self._set_state("suspended", "suspended on request", actor)

    def resume(self, actor: str | None = None) -> None:
        if self.suspended:
            self.suspended = False
            if self.state == "suspended":
                self._set_state("running" if self.tasks else "scanning", "resumed on request", actor)

    def requeue(self, task_id: str, why: str, actor: str | None = None) -> Task:
        """A user puts a quarantined or done task back at the front of the queue, read from its start
        with a fresh attempt budget (a done task's records are fed again)."""
        task = self._task_for_action(task_id, "re-queue")
        if task.stream:
            raise TaskActionRefused(409, f"task {task_id} is a Kafka partition: it cannot be re-read from its "
                                         f"start (resubmit with kafka.start to read it again)")
        if task.state not in (TaskState.QUARANTINED, TaskState.DONE):
            holder = " (being read: restart its executor to move it)" if task.state is TaskState.RUNNING else ""
            raise TaskActionRefused(409, f"task {task_id} is {task.state.value}{holder}: only a quarantined or "
                                         f"done task can be re-queued")
        old = task.state
        if old is TaskState.QUARANTINED:
            self.quarantined.remove(task.id)
        self.records_done -= task.records
        self.bytes_done -= task.bytes_done
        self.progress_by_partition[(task.source, task.partition)].bytes_done -= task.bytes_done
        task.records = task.bytes_done = task.attempts = task.interruptions = 0
        task.error, task.crashed_on, task.crashed_at = "", "", -1
        self._set(task, TaskState.QUEUED)
        self.unresolved[task.partition] += 1
        self._rewind_watermark(task.partition)
        self._queue_of(task).appendleft(task.id)
        self.events.data_event(f"task/{task.id}", old.value, TaskState.QUEUED.value, why, actor)
        return task

    def skip(self, task_id: str, why: str, actor: str | None = None) -> tuple[Task, str | None]:
        """A user quarantines a queued or running task; (the task, the incarnation that was reading it:
        the AM restarts that executor so that its trainer stops getting the task's records)."""
        task = self._task_for_action(task_id, "skip")
        if task.state not in (TaskState.QUEUED, TaskState.RUNNING):
            raise TaskActionRefused(409, f"task {task_id} is {task.state.value}: only a queued or running task "
                                         f"can be skipped")
        holder = task.holder
        if holder is not None:
            self.held.get(holder, {}).pop(task.id, None)
        self.revoking.pop(task.id, None)
        task.error = why
        self._resolve(task, TaskState.QUARANTINED, why, actor)
        return task, holder

    def _task_for_action(self, task_id: str, action: str) -> Task:
        task = self.tasks.get(task_id)
        if task is None:
            raise TaskActionRefused(404, f"no task {task_id!r}")
        if self.state in ("exhausted", "succeeded", "incomplete", "failed"):
            raise TaskActionRefused(409, f"cannot {action} task {task_id}: the input is {self.state}")
        return task

    def _rewind_watermark(self, label: str) -> None:
        """A partition has an unresolved task again: the watermark may not stay past it."""
        if not label:
            return
        granularity = label_granularity(label)
        position = self.partitions[granularity].index(label)
        self._consumed[granularity] = min(self._consumed[granularity], position)

    @property
    def consumed(self) -> bool:
        """Every task is resolved (or enough are, per success_percent, and none is being read)."""
        return self.state in ("exhausted", "succeeded")

    def left(self) -> str:
        """What is not read yet, for a reason: ``20 of 20 tasks left`` (and the partition awaited)."""
        resolved = self.counts[TaskState.DONE] + self.counts[TaskState.QUARANTINED]
        line = f"{len(self.tasks) - resolved} of {len(self.tasks)} tasks left"
        if not self.scan_complete:
            line += f", more partitions awaited (waiting for {self.waiting_for or 'the next partition'})"
        return line

    def finish(self, job_state: str) -> None:
        """The job ended (succeeded, failed or killed): the final data state. A killed job's input
        keeps the state it had (running, suspended...): it can be resumed from its journal. A job
        that succeeded without reading everything (input.early_exit: accept) leaves it ``incomplete``."""
        self.ended = True  # nothing is read any more: no rate, no ETA
        if self.state in ("failed", "succeeded", "incomplete") or job_state == "killed":
            return
        if job_state != "succeeded" or self.failure is not None:
            self.state = "failed"
        elif self.consumed:
            self.state = "succeeded"
        else:
            self._set_state("incomplete", f"the job succeeded with the input not read to the end: {self.left()}")

    # --- what the views, savepoints and metrics read ---

    def saved_state(self) -> dict[str, dict[str, Any]]:
        """Every task's position, as a savepoint keeps it (``journal.write_snapshot``)."""
        state = {t.id: {"state": t.state.value if t.state.resolved else "queued", "records": t.records,
                        "bytes": t.bytes_done, "attempts": t.attempts, "error": t.error}
                 for t in self.tasks.values()}
        for task in self.tasks.values():
            if task.stream:
                state[task.id].update(offset=task.offset, time=task.event_time)
        return state

    @property
    def watermark(self) -> str | None:
        """The latest time up to which every partition of every source is consumed, spelled as the last
        hour (``YYYY-MM-DDTHH``) when a source is hourly, else as the last day (``YYYY-MM-DD``). None
        until every granularity has a fully consumed first partition."""
        if not self.partitions or not all(self._consumed.values()):
            return None
        consumed_until = min(label_end(labels[self._consumed[g] - 1]) for g, labels in self.partitions.items())
        if "hour" in self.partitions:
            return (consumed_until - dt.timedelta(hours=1)).strftime(HOUR_LABEL)
        return (consumed_until - dt.timedelta(days=1)).strftime(DAY_LABEL)

    def rate(self) -> float:
        """Bytes read per second over the last RATE_WINDOW_SECONDS; 0 once the job ended."""
        if self.ended:
            return 0.0
        self._sample_rate()
        if len(self._rate) < 2:
            return 0.0
        (t0, b0), (t1, b1) = self._rate[0], self._rate[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0

    # --- internals ---

    def _progress(self, task: Task, records: int, nbytes: int) -> None:
        if records > task.records:
            self.records_done += records - task.records
            task.records = records
        nbytes = min(nbytes, task.size)
        if nbytes > task.bytes_done:
            self.bytes_done += nbytes - task.bytes_done
            self.progress_by_partition[(task.source, task.partition)].bytes_done += nbytes - task.bytes_done
            task.bytes_done = nbytes
        if self.store is not None:
            self.store.changed(task)

    def _resolve(self, task: Task, state: TaskState, why: str, actor: str | None = None) -> None:
        old = task.state
        if state is TaskState.DONE:
            self.bytes_done += task.size - task.bytes_done
            self.progress_by_partition[(task.source, task.partition)].bytes_done += task.size - task.bytes_done
            task.bytes_done = task.size
        task.holder = None
        self._set(task, state)
        self.unresolved[task.partition] -= 1
        if state is TaskState.QUARANTINED:
            self.quarantined.append(task.id)
            self.events.data_event(f"task/{task.id}", old.value, "quarantined", why, actor)
        self._advance_watermark()
        self._check_complete()

    def _attempt_failed(self, task: Task, error: str) -> None:
        task.attempts += 1
        task.error = error
        if task.attempts >= self.spec.max_task_attempts:
            self._out_of_attempts(task)
            return
        self.events.data_event(f"task/{task.id}", "running", "queued",
                               f"attempt {task.attempts} of {self.spec.max_task_attempts} failed: {error}")
        task.holder = None
        self._set(task, TaskState.QUEUED)
        self._queue_of(task).appendleft(task.id)

    def _out_of_attempts(self, task: Task) -> None:
        self._give_up(task, f"task {task.id} ({task.url}) failed {task.attempts} time(s), max_task_attempts is "
                            f"{self.spec.max_task_attempts}; last error: {task.error}")

    def _give_up(self, task: Task, why: str) -> None:
        """``on_bad_data`` decides about a task that may not be tried again."""
        if self.spec.on_bad_data == "quarantine":
            self._resolve(task, TaskState.QUARANTINED, why)
            quarantined = self.counts[TaskState.QUARANTINED]
            if quarantined * 100 >= self.spec.failed_percent * len(self.tasks):
                self._fail(f"{quarantined} of {len(self.tasks)} tasks quarantined, failed_percent is "
                           f"{self.spec.failed_percent:g}; last: {why}")
        else:
            task.holder = None
            self._set(task, TaskState.FAILED)
            self._fail(why + " (on_bad_data: fail)")

    def _fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
            self._set_state("failed", reason)
            self.events.data_failed(f"input: {reason}")

    def _set(self, task: Task, state: TaskState) -> None:
        self.counts[task.state] -= 1
        self.counts[state] += 1
        states = self.progress_by_partition[(task.source, task.partition)].states
        states[task.state] -= 1
        states[state] += 1
        task.state = state
        if self.store is not None:
            self.store.changed(task)

    def _set_state(self, state: str, reason: str, actor: str | None = None) -> None:
        if state != self.state:
            self.events.data_event("data", self.state, state, reason, actor)
            self.state = state

    def _advance_watermark(self) -> None:
        for granularity, labels in self.partitions.items():
            done = self._consumed[granularity]
            while done < len(labels) and self.unresolved[labels[done]] == 0:
                done += 1
            self._consumed[granularity] = done

    def _check_complete(self) -> None:
        if not self.scan_complete or self.failure is not None or self.state == "exhausted" or not self.tasks:
            return
        resolved = self.counts[TaskState.DONE] + self.counts[TaskState.QUARANTINED]
        if not self.enough and resolved * 100 >= self.spec.success_percent * len(self.tasks) \
                and resolved < len(self.tasks):
            self.enough = True
            self.events.data_event("data", self.state, self.state,
                                   f"{resolved} of {len(self.tasks)} tasks done, success_percent is "
                                   f"{self.spec.success_percent:g}: the rest is not read")
        if resolved == len(self.tasks) or (self.enough and not self.counts[TaskState.RUNNING]):
            self._set_state("exhausted", f"{self.counts[TaskState.DONE]} of {len(self.tasks)} tasks done, "
                                         f"{self.counts[TaskState.QUARANTINED]} quarantined")

    def _sample_rate(self) -> None:
        now = time.monotonic()
        if self._rate and now - self._rate[-1][0] < 0.5:
            return
        self._rate.append((now, self.bytes_done))
        while len(self._rate) > 2 and now - self._rate[0][0] > RATE_WINDOW_SECONDS:
            self._rate.popleft()

