"""What the AM writes down as the job goes: its journals, the status file and the event log.

The journals (the AM's and the data plane's) are written at the end of every step, before any
answer leaves, so that a restarted AM knows whatever an executor was told. The status file is what
a post-mortem (``primus status`` after the AM died) reads: rewritten at once when the job's state
changes, and otherwise as a periodic snapshot.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .journal import AMJournal
from .state import JobRecord
from .timeline import EventLog, Timeline

if TYPE_CHECKING:
    from ..data.plane import DataPlane

log = logging.getLogger("primus.am")

# How often, at most, the status file is rewritten while the job runs. A big job's snapshot is
# written less often: at least STATUS_SNAPSHOT_COST times the time the last one took.
STATUS_SNAPSHOT_SECONDS = 2.0
STATUS_SNAPSHOT_COST = 20

Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]


class Publisher:
    def __init__(self, record: JobRecord, status_path: Path | None, journal: AMJournal | None,
                 event_log: EventLog | None, timeline: Timeline, data: DataPlane | None, spawn: Spawn):
        self.record = record
        self.status_path = status_path
        self.journal = journal
        self.event_log = event_log
        self.timeline = timeline
        self.data = data
        self._spawn = spawn
        self._snapshot = (0.0, 0, 0)  # (monotonic time, events, records read) of the last status file written
        self._snapshot_every = STATUS_SNAPSHOT_SECONDS
        self._snapshotting: asyncio.Task[None] | None = None  # a periodic status snapshot being written
        self._status_writes = 0  # every write of the status file: a snapshot never replaces a later one

    def journaling(self) -> bool:
        return self.journal is not None or (self.data is not None and self.data.journal is not None)

    def write_journals(self) -> None:
        """Write what changed to the AM's and the data plane's journals."""
        if self.journal is not None:
            self.journal.flush()
        if self.data is not None:
            self.data.journal_write()

    def write_status(self) -> None:
        """The status file, now (a change of the job's state, the outcome)."""
        if self.status_path is None:
            return
        # The journal first: a status file never shows what a restarted AM would not know (an AM
        # killed right after writing the outcome must find it in the journal too).
        self.write_journals()
        self._status_writes += 1
        tmp = self.status_path.with_suffix(".tmp")
        tmp.write_text("".join(self.record.json_parts()))
        os.replace(tmp, self.status_path)  # atomic: a reader never sees half a file
        self._snapshot = (time.monotonic(), len(self.record.events), self._records_read())

    def _records_read(self) -> int:
        """Input records read so far: data progress is no event, yet a status read once the AM is gone
        must not show the data where it stood at the last event (issue 35: 0% with half of it read)."""
        return self.data.dispatcher.records_done if self.data is not None else 0

    def snapshot_if_due(self, now: float) -> None:
        """Start writing a periodic status snapshot if events came or records were read since the last
        one, and it is time."""
        written_at, events, records = self._snapshot
        changed = len(self.record.events) != events or self._records_read() != records
        if changed and now - written_at >= self._snapshot_every \
                and self.status_path is not None and self._snapshotting is None:
            self._snapshotting = self._spawn(self._write_snapshot())

    async def _write_snapshot(self) -> None:
        """The periodic status file, written a part at a time between requests: at 10,000 executors it
        is megabytes, which written at once held heartbeats for a second."""
        assert self.status_path is not None
        try:
            self.write_journals()
            writes, events, started = self._status_writes, len(self.record.events), time.monotonic()
            records = self._records_read()
            tmp = self.status_path.with_suffix(".snapshot")
            with tmp.open("w") as f:
                for part in self.record.json_parts():
                    f.write(part)
                    await asyncio.sleep(0)
            if writes == self._status_writes:  # no write of the state since: this one is newer
                os.replace(tmp, self.status_path)
                self._snapshot = (time.monotonic(), events, records)
            took = time.monotonic() - started
            self._snapshot_every = max(STATUS_SNAPSHOT_SECONDS, STATUS_SNAPSHOT_COST * took)
        except OSError:
            log.exception("writing the status snapshot failed")
        finally:
            self._snapshotting = None

    def log_history(self) -> None:
        """A timeline sample when one is due, and the event log's new lines."""
        sample = self.timeline.maybe_sample()
        if self.event_log is not None:
            if sample is not None:
                self.event_log.add_sample(sample)
            self.event_log.flush()
