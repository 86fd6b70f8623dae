"""What the read side of the API and the page show, from a live AM or from a finished job's files.

``JobView`` is the one interface both servers read through: the AM (``LiveView``, its state as
it is now) and the history server of ``primus ui APP`` (``ArchiveView``, the status document,
event log and task table the AM left). Both answer with the same JSON (models.py), so the page
cannot tell them apart, except that only the AM takes actions (``live``).
"""

from __future__ import annotations

import abc
import asyncio
import gzip
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..data.dispatch_views import partition_table, task_page
from ..data.dispatcher import Dispatcher, Task, TaskState
from ..models import EventsQuery, ExecutorsQuery, TasksQuery
from ..spec_types import mask_secrets

if TYPE_CHECKING:
    from ..am.readout import AMReadout
    from ..am.state import Executor

# What a finished job leaves beside its status file for the history page.
TASK_TABLE = "tasks.jsonl.gz"  # every task as the task table shows it
PARTITIONS = "partitions.json"  # the partition table


class NotFound(Exception):
    """Answered with 404 and this message."""


class JobView(abc.ABC):
    live: bool
    app_id: str

    @property
    @abc.abstractmethod
    def ended(self) -> bool:
        """The job's outcome is known (what a live page waits for, to end on it)."""

    @abc.abstractmethod
    def status(self) -> dict[str, Any]:
        """The status document without ``events`` and ``history`` (``JobRecord.to_dict()`` keys)."""

    @abc.abstractmethod
    def summary(self) -> dict[str, Any]:
        """``job``, ``roles``, ``data`` and ``goodput`` of the status: no executor rows, so its cost does not grow
        with the executors."""

    @abc.abstractmethod
    def executor_page(self, query: ExecutorsQuery) -> tuple[int, list[dict[str, Any]]]:
        """How many current executors match ``query``, and the page of them it asks for, in the order of
        their role in the spec, then their index."""

    @abc.abstractmethod
    def executor(self, executor_id: str) -> dict[str, Any] | None:
        """The current incarnation of ``executor_id`` (``<role>-<index>``), None when it has none."""

    @abc.abstractmethod
    def event_count(self) -> int: ...

    @abc.abstractmethod
    def events_from(self, start: int) -> list[dict[str, Any]]:
        """The events after the first ``start`` (the page polls for the new ones: only those are copied)."""

    @abc.abstractmethod
    def history(self) -> list[dict[str, Any]]:
        """Earlier incarnations of executors."""

    @abc.abstractmethod
    def task_page(self, query: TasksQuery) -> dict[str, Any]: ...

    @abc.abstractmethod
    def partitions(self) -> dict[str, Any]: ...

    @abc.abstractmethod
    def timeline(self, since: float) -> dict[str, Any]: ...

    @abc.abstractmethod
    def spec(self) -> dict[str, Any]: ...

    @abc.abstractmethod
    async def log(self, executor_id: str, stream: str, offset: int, limit: int,
                  attempt: int | None = None) -> dict[str, Any]: ...

    def events(self, query: EventsQuery) -> list[dict[str, Any]]:
        events = self.events_from(query.since)
        if query.subject:
            events = [e for e in events if e["subject"].startswith(query.subject)]
        if query.q:
            text = query.q.lower()
            events = [e for e in events if text in " ".join(
                str(e.get(k) or "") for k in ("subject", "from_state", "to_state", "reason", "actor")).lower()]
        return events[:query.limit]

    def executor_logs(self, executor_id: str, stream: str, attempt: int | None = None) -> str:
        """Where ``stream`` of the executor's current (or last) incarnation is, or of its incarnation of
        ``attempt`` (an earlier one, replaced by a restart)."""
        current = self.executor(executor_id)
        found: dict[str, Any] | None = None
        if current is not None and attempt in (None, current.get("attempt")):
            found = current
        else:  # the earlier incarnations only when there is no current one or another is asked for: they may be many
            found = next((ex for ex in reversed(self.history())
                          if ex["id"] == executor_id and attempt in (None, ex.get("attempt"))), None)
        if found is None:
            known = current is not None or any(ex["id"] == executor_id for ex in self.history())
            raise NotFound(f"{executor_id} has no attempt {attempt}" if known else f"no executor {executor_id!r}")
        path = (found.get("logs") or {}).get(stream)
        if not path:
            raise NotFound(f"{executor_id} has no {stream!r} log (logs: {sorted(found.get('logs') or {})})")
        return str(path)


def log_chunk(executor_id: str, stream: str, offset: int, data: bytes, size: int | None) -> dict[str, Any]:
    return {"executor": executor_id, "stream": stream, "offset": offset, "next_offset": offset + len(data),
            "size": size, "text": data.decode("utf-8", errors="replace")}


def executor_row(ex: Executor) -> dict[str, Any]:
    """One executor as the status document lists it (``JobRecord.executors_view``'s rows)."""
    row = ex.to_dict()
    row["restarts"] = ex.attempt
    return row


def task_view(task: Task, holder: str | None) -> dict[str, Any]:
    return {"id": task.id, "partition": task.partition, "source": task.source, "url": task.url,
            "start": task.start, "end": task.end, "size": task.size, "state": task.state.value,
            "attempts": task.attempts, "interruptions": task.interruptions, "records": task.records,
            "bytes_done": task.bytes_done, "holder": holder, "error": task.error,
            "offset": task.offset if task.stream else None}


class LiveView(JobView):
    """The AM's own state, as it is at this moment."""

    live = True

    def __init__(self, am: AMReadout):
        self.am = am
        self.app_id = am.record.app_id

    @property
    def ended(self) -> bool:
        return self.am.record.state.terminal

    def status(self) -> dict[str, Any]:
        return {**self.summary(), "executors": self.am.record.executors_view(), "events": []}

    def summary(self) -> dict[str, Any]:
        record = self.am.record
        return {"job": record.summary(), "roles": record.roles_view(),
                "data": record.data_view() if record.data_view is not None else None,
                "goodput": record.goodput.view()}

    def executor_page(self, query: ExecutorsQuery) -> tuple[int, list[dict[str, Any]]]:
        # Filtered and ordered on the executors themselves: only the page shown is turned into rows.
        matches = query.matcher()
        rank = {name: i for i, name in enumerate(self.am.record.roles)}
        matching = [ex for ex in self.am.record.executors.values() if matches(ex.role, ex.state.value, ex.id)]
        matching.sort(key=lambda ex: (rank.get(ex.role, len(rank)), ex.index))
        return len(matching), [executor_row(ex) for ex in query.window(matching)]

    def executor(self, executor_id: str) -> dict[str, Any] | None:
        ex = self.am.record.executors.get(executor_id)
        return executor_row(ex) if ex is not None else None

    def event_count(self) -> int:
        return len(self.am.record.events)

    def events_from(self, start: int) -> list[dict[str, Any]]:
        return [e.__dict__ for e in self.am.record.events[start:]]

    def history(self) -> list[dict[str, Any]]:
        return [ex.to_dict() for ex in self.am.record.history]

    def _dispatcher(self) -> Dispatcher:
        if self.am.data is None:
            raise NotFound("this job has no input")
        return self.am.data.dispatcher

    def task_page(self, query: TasksQuery) -> dict[str, Any]:
        dispatcher = self._dispatcher()
        state = TaskState(query.state) if query.state else None
        total, tasks = task_page(dispatcher, state, query.q, query.offset, query.limit)
        return {"total": total, "offset": query.offset, "limit": query.limit,
                "tasks": [task_view(t, self.holder_name(t.holder)) for t in tasks]}

    def holder_name(self, incarnation: str | None) -> str | None:
        ex = self.am.executor_of(incarnation)
        return ex.id if ex is not None else incarnation

    def partitions(self) -> dict[str, Any]:
        return partition_table(self._dispatcher())

    def timeline(self, since: float) -> dict[str, Any]:
        # The charts end at this moment, not at the last sample taken.
        timeline = self.am.timeline
        return {"interval": timeline.interval, "samples": [*timeline.since(since), timeline.sample(time.time())]}

    def spec(self) -> dict[str, Any]:
        return mask_secrets(self.am.spec.model_dump(mode="json"))

    async def log(self, executor_id: str, stream: str, offset: int, limit: int,
                  attempt: int | None = None) -> dict[str, Any]:
        path = self.executor_logs(executor_id, stream, attempt)
        data, size = await self.am.read_log(path, offset, limit)
        start = offset if offset >= 0 else max(0, (size or 0) + offset)
        return log_chunk(executor_id, stream, start, data, size)


class ArchiveView(JobView):
    """A finished job, from what its AM left: the status document, the event log (events and the
    timeline's samples) and the final task table. ``read_log(path, offset)`` reads an executor's log
    through the job's cluster client."""

    live = False
    ended = True  # type: ignore[assignment]  # what its AM left is all there will be

    def __init__(self, status: dict[str, Any], spec: dict[str, Any], events: list[dict[str, Any]] | None,
                 samples: list[dict[str, Any]], task_table: bytes | None, partitions: dict[str, Any] | None,
                 read_log: Callable[[str, int], bytes]):
        self._status = {key: value for key, value in status.items() if key not in ("events", "history")}
        self._status["events"] = []
        self.app_id = status["job"]["app_id"]
        self._events = events if events else list(status.get("events") or [])
        self._history = list(status.get("history") or [])
        self._samples = samples
        self._spec = mask_secrets(spec)
        self._partitions = partitions
        self._tasks = [json.loads(line) for line in gzip.decompress(task_table).splitlines()] if task_table else None
        self._read_log = read_log

    def status(self) -> dict[str, Any]:
        return self._status

    def summary(self) -> dict[str, Any]:
        # A status file of an AM before goodput was accounted has none: null, as the model allows.
        return {**{key: self._status[key] for key in ("job", "roles", "data")}, "goodput": self._status.get("goodput")}

    def executor_page(self, query: ExecutorsQuery) -> tuple[int, list[dict[str, Any]]]:
        matches = query.matcher()
        rank = {role["name"]: i for i, role in enumerate(self._status["roles"])}
        matching = [ex for ex in self._status["executors"] if matches(ex["role"], ex["state"], ex["id"])]
        matching.sort(key=lambda ex: (rank.get(ex["role"], len(rank)), ex["index"]))
        return len(matching), query.window(matching)

    def executor(self, executor_id: str) -> dict[str, Any] | None:
        return next((ex for ex in self._status["executors"] if ex["id"] == executor_id), None)

    def event_count(self) -> int:
        return len(self._events)

    def events_from(self, start: int) -> list[dict[str, Any]]:
        return self._events[start:]

    def history(self) -> list[dict[str, Any]]:
        return self._history

    def _task_list(self) -> list[dict[str, Any]]:
        if self._status.get("data") is None:
            raise NotFound("this job has no input")
        if self._tasks is None:
            raise NotFound("this job's task table was not kept (its AM ended before writing it, or its backend "
                           "keeps only the status)")
        return self._tasks

    def task_page(self, query: TasksQuery) -> dict[str, Any]:
        tasks = self._task_list()
        if query.state:
            tasks = [t for t in tasks if t["state"] == query.state]
        if query.q:
            tasks = [t for t in tasks if query.q in t["id"]]
        return {"total": len(tasks), "offset": query.offset, "limit": query.limit,
                "tasks": tasks[query.offset:query.offset + query.limit]}

    def partitions(self) -> dict[str, Any]:
        data = self._status.get("data")
        if data is None:
            raise NotFound("this job has no input")
        return self._partitions or {"partitions": [], "sources": [], "watermark": data.get("watermark"),
                                    "waiting_for": data.get("waiting_for"),
                                    "scan_complete": bool(data.get("scan_complete"))}

    def timeline(self, since: float) -> dict[str, Any]:
        samples = [s for s in self._samples if s["time"] > since]
        interval = samples[-1]["time"] - samples[-2]["time"] if len(samples) > 1 else 0.0
        return {"interval": round(interval, 3), "samples": samples}

    def spec(self) -> dict[str, Any]:
        return self._spec

    async def log(self, executor_id: str, stream: str, offset: int, limit: int,
                  attempt: int | None = None) -> dict[str, Any]:
        path = self.executor_logs(executor_id, stream, attempt)
        data = await asyncio.to_thread(self._read_log, path, 0)
        size = len(data)
        start = offset if offset >= 0 else max(0, size + offset)
        return log_chunk(executor_id, stream, start, data[start:start + limit], size)


def task_table(view: LiveView) -> bytes | None:
    """The whole task table, gzipped JSON lines, for the history (None without input)."""
    if view.am.data is None:
        return None
    lines = (json.dumps(task_view(t, view.holder_name(t.holder)), separators=(",", ":"))
             for t in view.am.data.dispatcher.tasks.values())
    return gzip.compress("\n".join(lines).encode(), compresslevel=3)

