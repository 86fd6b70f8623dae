"""What the status document and the page show of the dispatcher's state: read-only views.

The dispatcher keeps what these read up to date as tasks change (task counts per state, progress
per source and partition), so that a view costs O(partitions) or O(page), never O(tasks).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from .dispatcher import Dispatcher, Task, TaskState


def data_status(d: Dispatcher) -> dict[str, Any]:
    """The status document's ``data``. ``progress`` is the share of bytes done, known only once
    every partition is listed (null before: the total is not known); ``progress_of_discovered`` is
    over the tasks listed so far. Neither counts a quarantined or unread task as done."""
    discovered = d.bytes_done / d.bytes_total if d.bytes_total else 0.0
    rate = d.rate()
    eta = _eta(d, rate)
    return {
        "state": d.state,
        "tasks": {"total": len(d.tasks), **{s.value: d.counts[s] for s in TaskState}},
        "bytes": {"done": d.bytes_done, "total": d.bytes_total},
        "records_done": d.records_done,
        "progress": round(min(discovered, 1.0), 6) if d.scan_complete else None,
        "progress_of_discovered": round(min(discovered, 1.0), 6),
        "partitions_listed": len(d.unresolved),  # every partition label listed, not granularities
        "rate_bytes_per_s": round(rate, 1),
        "eta_seconds": None if eta is None else round(eta, 1),
        "watermark": d.watermark,
        "scan_complete": d.scan_complete,
        "waiting_for": d.waiting_for,
        "quarantined": list(d.quarantined),
        "failure": d.failure,
    }


def _eta(d: Dispatcher, rate: float) -> float | None:
    """Seconds until every byte is read at ``rate``; None while that cannot be known."""
    if d.consumed:
        return 0.0
    if d.scan_complete and rate > 0 and not d.suspended:  # suspended, it would not end then
        return (d.bytes_total - d.bytes_done) / rate
    return None


def task_page(d: Dispatcher, state: TaskState | None, text: str | None, offset: int,
              limit: int) -> tuple[int, list[Task]]:
    """(how many tasks match, the ``limit`` of them after ``offset``), in reading order. Without a
    text filter the count is kept, so a page costs O(offset + limit), not O(tasks)."""
    tasks: Iterable[Task] = d.tasks.values()
    if state is not None:
        tasks = (t for t in tasks if t.state is state)
    if not text:
        total = d.counts[state] if state is not None else len(d.tasks)
        return total, list(itertools.islice(tasks, offset, offset + limit))
    matching = [t for t in tasks if text in t.id]
    return len(matching), matching[offset:offset + limit]


def source_watermarks(d: Dispatcher) -> dict[str, str | None]:
    """Per source, its latest partition consumed completely with every earlier one of its own."""
    marks: dict[str, str | None] = {}
    for labels in d.partitions.values():
        for source in {source for source, _ in d.progress_by_partition}:
            mark = None
            for label in labels:
                part = d.progress_by_partition.get((source, label))
                if part is None:
                    continue  # this source has no files in that partition
                if part.states[TaskState.DONE] + part.states[TaskState.QUARANTINED] < part.tasks:
                    break
                mark = label
            if any((source, label) in d.progress_by_partition for label in labels):
                marks[source] = mark
    return marks


def partition_table(d: Dispatcher) -> dict[str, Any]:
    """The page's partition table: a row per source and partition, each source's watermark."""
    rows = [{"source": source, "partition": label, "tasks": part.tasks,
             "done": part.states[TaskState.DONE], "quarantined": part.states[TaskState.QUARANTINED],
             "running": part.states[TaskState.RUNNING], "bytes": part.bytes, "bytes_done": part.bytes_done}
            for (source, label), part in d.progress_by_partition.items()]
    return {"partitions": rows,
            "sources": [{"name": name, "watermark": mark} for name, mark in source_watermarks(d).items()],
            "watermark": d.watermark, "waiting_for": d.waiting_for, "scan_complete": d.scan_complete}
