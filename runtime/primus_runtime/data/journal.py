"""The work-preserve task store: what was read, so that a new job resumes where the last stopped.

Kept in ``work_preserve_dir`` as two files:

``tasks.snapshot.json``
    ``{"version": 1, "tasks": {task_id: {"state", "records", "bytes", "attempts", "error"}}}``,
    replaced atomically (write a temporary file, fsync, ``os.replace``).
``tasks.journal``
    one JSON object per line, appended after the snapshot was taken:
    ``{"op": "add", "task": {...}}``, ``{"op": "set", "id", "state", "records", "bytes",
    "attempts", "error"}`` and ``{"op": "checkpoint", "slot", "id"}`` (exactly-once: the
    checkpoint an executor index last committed). Every line carries absolute values, so replaying a line twice
    changes nothing.

Changes are buffered and written with one ``write`` + ``fsync`` at most every
``FLUSH_SECONDS``; the last second of progress may be lost in a crash, which only means
those records are read again (at-least-once). Once the journal holds more lines than
``COMPACT_LINES`` and than there are tasks (so snapshots cost O(1) per line), the store
writes a new snapshot and starts an empty journal; a crash between the two leaves a
journal that replays onto the new snapshot harmlessly.
Recovery ignores a torn last line (a crash in the middle of a write).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from .dispatcher import Task

log = logging.getLogger("primus.data")

SNAPSHOT = "tasks.snapshot.json"
JOURNAL = "tasks.journal"
FLUSH_SECONDS = 1.0
COMPACT_LINES = 10_000


class TaskJournal:
    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state: dict[str, dict[str, Any]] = self.recover()
        self.checkpoints: dict[str, str] = read_checkpoints(self.dir)  # executor id -> committed checkpoint
        self._pending: list[str] = []
        self._dirty: dict[str, Task] = {}
        self._flushed_at = 0.0
        self._lines = self._cut_torn_line()
        self._file = open(self.dir / JOURNAL, "a", encoding="utf-8")  # noqa: SIM115 - kept open for appends

    # --- recovery ---

    def recover(self) -> dict[str, dict[str, Any]]:
        """Task id -> last known {state, records, bytes, attempts, error}: the snapshot, then the journal."""
        return recover(self.dir)

    def _cut_torn_line(self) -> int:
        """Drop a torn last line, so that new lines are not glued to it; the lines left."""
        path = self.dir / JOURNAL
        if not path.exists():
            return 0
        data = path.read_bytes()
        keep = data.rfind(b"\n") + 1
        if keep != len(data):
            with open(path, "r+b") as f:
                f.truncate(keep)
        return data.count(b"\n")

    # --- TaskStore ---

    def added(self, task: Task) -> None:
        if task.id not in self.state:
            self.state[task.id] = {"state": "queued", "records": 0, "bytes": 0, "attempts": 0}
            self._pending.append(json.dumps({"op": "add", "task": task.to_dict()}))

    def changed(self, task: Task) -> None:
        self._dirty[task.id] = task

    def checkpoint(self, slot: str, checkpoint: str) -> None:
        if self.checkpoints.get(slot) != checkpoint:
            self.checkpoints[slot] = checkpoint
            self._pending.append(json.dumps({"op": "checkpoint", "slot": slot, "id": checkpoint}))

    # --- writing ---

    def maybe_flush(self) -> None:
        if time.monotonic() - self._flushed_at >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Write what changed since the last flush, fsync it; compact when the journal is long."""
        for task in self._dirty.values():
            entry = {"state": task.state.value, "records": task.records, "bytes": task.bytes_done,
                     "attempts": task.attempts, "error": task.error}
            if self.state.get(task.id) != entry:
                self.state[task.id] = entry
                self._pending.append(json.dumps({"op": "set", "id": task.id, **entry}))
        self._dirty.clear()
        self._flushed_at = time.monotonic()
        if not self._pending:
            return
        self._file.write("\n".join(self._pending) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._lines += len(self._pending)
        self._pending.clear()
        if self._lines >= max(COMPACT_LINES, len(self.state)):  # amortized: a snapshot costs O(tasks)
            self.compact()

    def compact(self) -> None:
        """A new snapshot of every task, then an empty journal."""
        write_snapshot(self.dir, self.state, self.checkpoints)
        self._file.close()
        self._file = open(self.dir / JOURNAL, "w", encoding="utf-8")  # noqa: SIM115
        os.fsync(self._file.fileno())
        self._lines = 0

    def close(self) -> None:
        self.flush()
        self._file.close()


def recover(directory: str | Path) -> dict[str, dict[str, Any]]:
    """The task states kept in ``directory`` (a work-preserve dir or a savepoint): snapshot + journal."""
    directory = Path(directory)
    state: dict[str, dict[str, Any]] = {}
    snapshot = directory / SNAPSHOT
    if snapshot.exists():
        state = json.loads(snapshot.read_text())["tasks"]
    journal = directory / JOURNAL
    if journal.exists():
        lines = journal.read_bytes().split(b"\n")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                if number < len(lines):  # not the torn last line of a crash in the middle of a write
                    log.warning("%s line %d is damaged; skipped", journal, number)
                continue
            if entry.get("op") == "set":
                state[entry["id"]] = {k: entry[k] for k in ("state", "records", "bytes", "attempts", "error")
                                      if k in entry}
            elif entry.get("op") == "add":
                state.setdefault(entry["task"]["id"], {"state": "queued", "records": 0, "bytes": 0, "attempts": 0})
    return state


def read_checkpoints(directory: str | Path) -> dict[str, str]:
    """Exactly-once: executor id -> the checkpoint its trainer last committed, as kept in ``directory``."""
    directory = Path(directory)
    checkpoints: dict[str, str] = {}
    snapshot = directory / SNAPSHOT
    if snapshot.exists():
        checkpoints = dict(json.loads(snapshot.read_text()).get("checkpoints", {}))
    journal = directory / JOURNAL
    if journal.exists():
        for line in journal.read_bytes().splitlines():
            if b'"checkpoint"' not in line:
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("op") == "checkpoint":
                checkpoints[str(entry["slot"])] = str(entry["id"])
    return checkpoints


def write_snapshot(directory: str | Path, state: dict[str, dict[str, Any]],
                   checkpoints: dict[str, str] | None = None) -> None:
    """``tasks.snapshot.json`` in ``directory``, replaced atomically (tmp file, fsync, rename)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (SNAPSHOT + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"version": 1, "written_at": time.time(), "tasks": state, "checkpoints": checkpoints or {}}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / SNAPSHOT)
