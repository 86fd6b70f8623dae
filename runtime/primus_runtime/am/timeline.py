"""The job's life in samples, for the page's charts, and the event log that outlives the AM.

``Timeline`` samples the counters the charts draw (records and tasks done, executors by state,
restarts) every ``interval`` seconds. A long job must not grow it without bound: once it holds
``MAX_SAMPLES``, every other sample is dropped and the interval doubles, so it always spans the
whole life at an even spacing.

``EventLog`` appends the job's events and samples, as JSON lines, to ``events.jsonl`` beside the
status file, a few times a second: what the history page (``primus ui APP``) reads after the AM
is gone, and what is left of a job whose AM died.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

from .state import JobRecord

log = logging.getLogger("primus.am")

MAX_SAMPLES = 2000
FIRST_INTERVAL = 2.0
EVENT_LOG = "events.jsonl"


class Timeline:
    def __init__(self, record: JobRecord, interval: float = FIRST_INTERVAL, max_samples: int = MAX_SAMPLES):
        self.record = record
        self.interval = interval
        self.max_samples = max_samples
        self.samples: list[dict[str, Any]] = []
        self._last = 0.0

    def maybe_sample(self, now: float | None = None) -> dict[str, Any] | None:
        """Take a sample if one is due; the sample taken, else None."""
        now = time.time() if now is None else now
        if now - self._last < self.interval:
            return None
        self._last = now
        sample = self.sample(now)
        self.samples.append(sample)
        if len(self.samples) >= self.max_samples:
            self.samples = self.samples[::2]
            self.interval *= 2
        return sample

    def sample(self, now: float) -> dict[str, Any]:
        record = self.record
        executors: Counter = Counter()
        for counts in record.counts.values():
            executors.update({state.value: n for state, n in counts.items() if n})
        data = record.data_view() if record.data_view is not None else None
        tasks = data["tasks"] if data else {}
        return {
            "time": round(now, 3),
            "records_done": data["records_done"] if data else 0,
            "bytes_done": data["bytes"]["done"] if data else 0,
            "tasks_done": tasks.get("done", 0),
            "tasks_quarantined": tasks.get("quarantined", 0),
            "executors": dict(executors),
            "ready": sum(record.ready_counts.values()),
            "restarts": sum(role.restarts for role in record.roles.values()),
        }

    def since(self, time_: float) -> list[dict[str, Any]]:
        return [s for s in self.samples if s["time"] > time_]


class EventLog:
    """Appends what happened to ``path`` (JSON lines: ``{"kind": "event", ...}``, ``{"kind":
    "sample", ...}``). Writes are batched: one ``write`` per flush."""

    def __init__(self, path: Path, record: JobRecord):
        self.path = path
        self.record = record
        self._written = 0  # events already in the file
        self._pending: list[str] = []
        self._broken = False

    def resume(self) -> None:
        """A restarted AM appends after the events its predecessor wrote (its journal has them all)."""
        self._written = len(self._read()[0])

    def samples(self) -> list[dict[str, Any]]:
        """The samples written so far (a restarted AM's charts start from them)."""
        return self._read()[1]

    def _read(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        try:
            return read_event_log(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return [], []

    def add_sample(self, sample: dict[str, Any]) -> None:
        self._pending.append(json.dumps({"kind": "sample", **sample}, separators=(",", ":")))

    def flush(self) -> None:
        events = self.record.events
        lines = [json.dumps({"kind": "event", **e.__dict__}, separators=(",", ":")) for e in events[self._written:]]
        self._written = len(events)
        lines += self._pending
        self._pending = []
        if not lines or self._broken:
            return
        try:
            with self.path.open("a", encoding="utf-8") as out:
                out.write("\n".join(lines) + "\n")
        except OSError:
            # A full disk must not stop the job: the status file still says what happened.
            self._broken = True
            log.exception("cannot append to the event log %s; it stops here", self.path)


def read_event_log(text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(events, samples) of an event log; a torn last line (the AM died mid-write) is skipped."""
    events, samples = [], []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        kind = entry.pop("kind", None)
        if kind == "event":
            events.append(entry)
        elif kind == "sample":
            samples.append(entry)
    return events, samples
