"""The work-preserve task store: what was read, so that a new job resumes where the last stopped.

Kept in ``work_preserve_dir`` as two files:

``tasks.snapshot.json``
    ``{"version": 1, "tasks": {task_id: {"state", "records", "bytes", "attempts", "error"}}}``,
    replaced atomically (write a temporary file, fsync, ``os.replace``).
``tasks.journal``
    one JSON object per line, appended after the snapshot was taken:
    ``{"op": "add", "task": {...}}``, ``{"op": "set", "id", "state", "records", "bytes",
    "attempts", "error"[, "holder"][, "offset", "time"]}`` (``offset`` and ``time``: a Kafka partition's next
    offset and last record's timestamp; ``holder``: the executor incarnation reading a running task,
    which a restarted AM of the same job gives it back to) and ``{"op": "checkpoint", "slot", "id"}`` (exactly-once: the
    checkpoint an executor index last committed). Every line carries absolute values, so replaying a line twice
    changes nothing.

The AM writes changes at the end of each of its steps (``write``: one ``write`` call, no
``fsync``), before it answers an executor, so a killed AM loses nothing it told anyone; an
``fsync`` follows at most every ``FLUSH_SECONDS``, so a machine crash may lose the last second
of progress, which only means those records are read again (at-least-once). Once the journal holds more lines than
``COMPACT_LINES`` and than there are tasks (so snapshots cost O(1) per line), the store
writes a new snapshot and starts an empty journal; a crash between the two leaves a
journal that replays onto the new snapshot harmlessly.
Recovery ignores a torn last line (a crash in the middle of a write).

On HDFS (``hdfs://`` or ``webhdfs://`` directories) there is no journal: ``HdfsSnapshots``
keeps numbered whole snapshots instead (see there for why and for what a crash can lose).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any

from .. import hadoop
from .dispatcher import Task, TaskState

_quote = encode_basestring_ascii  # a JSON string literal (C speed)

log = logging.getLogger("primus.data")

SNAPSHOT = "tasks.snapshot.json"
JOURNAL = "tasks.journal"
FLUSH_SECONDS = 1.0
COMPACT_LINES = 10_000
UPLOAD_SECONDS = 2.0  # HDFS: a snapshot is uploaded at most this often (when something changed)
_NUMBERED = re.compile(r"tasks\.snapshot\.(\d+)\.json")


class TaskJournal:
    def __init__(self, directory: str | Path, keep_listing: bool = True):
        """``keep_listing``: journal every task the scan lists (what a later job resuming from this
        directory needs); without it only tasks that changed are kept, which is all a restarted AM of
        the same job needs (its scan lists the tasks again) and costs nothing per listed task."""
        self.keep_listing = keep_listing
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state: dict[str, dict[str, Any]] = self.recover()
        self.checkpoints: dict[str, str] = read_checkpoints(self.dir)  # executor id -> committed checkpoint
        self._pending: list[str] = []
        self._dirty: dict[str, Task] = {}
        # What the journal says of each task changed since the snapshot: (state, records, bytes,
        # attempts, error, holder), compared at each write so that only changes are written.
        self._written: dict[str, _Entry] = {}
        self._flushed_at = 0.0
        self._unsynced = False
        self._lines = self._cut_torn_line()
        self._file = open(self.dir / JOURNAL, "a", encoding="utf-8")  # noqa: SIM115 - kept open for appends
        self._size = os.fstat(self._file.fileno()).st_size  # what a failed append is cut back to

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
        if self.keep_listing and task.id not in self.state:
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

    def write(self) -> None:
        """Write what changed since the last write (no ``fsync``); compact when the journal is long.
        The AM calls this at the end of every step, so it is lean: tuples to compare, lines built by
        hand, one ``os.write``."""
        for task in self._dirty.values():
            entry = (task.state.value, task.records, task.bytes_done, task.attempts, task.error,
                     task.holder if task.state is TaskState.RUNNING else None, task.offset, task.event_time)
            if self._written.get(task.id) != entry:
                self._written[task.id] = entry
                self._pending.append(_set_line(task.id, entry))
        self._dirty.clear()
        if not self._pending:
            return
        self._append("\n".join(self._pending) + "\n")
        self._unsynced = True
        self._lines += len(self._pending)
        self._pending.clear()
        if self._lines >= max(COMPACT_LINES, len(self.state) + len(self._written)):  # amortized: O(tasks) each
            try:
                self.compact()
            except OSError as exc:  # the journal holds every position: only its length suffers
                log.warning("cannot compact the task journal in %s (%s); it keeps growing", self.dir, exc)

    def _append(self, text: str) -> None:
        """Append ``text`` (``flush`` makes it durable), or leave the journal as it was and raise (e.g.
        ENOSPC): the lines stay pending for the next write, and a half-written line cannot be glued to them."""
        size = self._size
        data = text.encode()
        try:
            written = 0
            while written < len(data):
                written += os.write(self._file.fileno(), data[written:])
            self._size += len(data)
        except OSError:
            try:
                self._file.close()
            except OSError:
                pass  # closing flushes the buffer again, which fails the same way; the file is closed
            os.truncate(self.dir / JOURNAL, size)
            self._file = open(self.dir / JOURNAL, "a", encoding="utf-8")  # noqa: SIM115 - kept open for appends
            raise

    def flush(self) -> None:
        """``write``, then ``fsync``."""
        self.write()
        self._flushed_at = time.monotonic()
        if self._unsynced:
            os.fsync(self._file.fileno())
            self._unsynced = False

    def compact(self) -> None:
        """A new snapshot of every task, then an empty journal."""
        self.state.update((task_id, _entry(values)) for task_id, values in self._written.items())
        self._written.clear()
        write_snapshot(self.dir, self.state, self.checkpoints)
        self._file.close()
        self._file = open(self.dir / JOURNAL, "w", encoding="utf-8")  # noqa: SIM115
        os.fsync(self._file.fileno())
        self._lines = 0
        self._size = 0
        self._unsynced = False

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._file.close()


# (state, records, bytes, attempts, error, holder, offset, time) of a task, as journaled
_Entry = tuple[str, int, int, int, str, "str | None", int, int]


def _set_line(task_id: str, entry: _Entry) -> str:
    """``{"op": "set", ...}`` as ``json.dumps`` would write it, built by hand (it is hot)."""
    state, records, nbytes, attempts, error, holder, offset, event_time = entry
    line = (f'{{"op": "set", "id": {_quote(task_id)}, "state": "{state}", "records": {records}, '
            f'"bytes": {nbytes}, "attempts": {attempts}, "error": {_quote(error)}')
    if holder is not None:
        line += f', "holder": {_quote(holder)}'
    if offset >= 0:
        line += f', "offset": {offset}, "time": {event_time}'
    return line + "}"


def _entry(values: _Entry) -> dict[str, Any]:
    state, records, nbytes, attempts, error, holder, offset, event_time = values
    entry: dict[str, Any] = {"state": state, "records": records, "bytes": nbytes, "attempts": attempts, "error": error}
    if holder is not None:
        entry["holder"] = holder
    if offset >= 0:
        entry.update(offset=offset, time=event_time)
    return entry


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
                state[entry["id"]] = {k: entry[k] for k in ("state", "records", "bytes", "attempts", "error",
                                                            "holder", "offset", "time") if k in entry}
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
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps({"version": 1, "written_at": time.time(), "tasks": state, "checkpoints": checkpoints or {}}))
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        tmp.unlink(missing_ok=True)  # on a full disk, a partial copy would only take more of the space
        raise
    os.replace(tmp, directory / SNAPSHOT)


class HdfsSnapshots:
    """A work-preserve dir (or a savepoint) on HDFS: ``tasks.snapshot.<n>.json``, each a whole snapshot
    (``{"version", "tasks", "checkpoints"}`` as in ``tasks.snapshot.json``).

    WebHDFS has no fsync'ed append to build a journal on, and its RENAME never replaces a file.
    So a save writes the next numbered snapshot under a temporary name (``_tasks.snapshot.<n>.tmp``),
    renames it into place (one atomic NameNode operation) and only then deletes the older ones:
    at every moment a complete snapshot is there, and recovery takes the highest number. A crash
    mid-save leaves at most a temporary file, which recovery ignores and the next save removes.

    The AM saves at most every ``UPLOAD_SECONDS`` when a position changed, and once more when
    the job ends. An AM that dies (SIGKILL, its node lost) therefore loses at most the progress
    of the last ``UPLOAD_SECONDS`` plus the upload under way (each request times out after
    ``hadoop.WEBHDFS_TIMEOUT``): those records are read again by the next job, never skipped
    (at-least-once), as with the local journal's flush interval.
    """

    def __init__(self, url: str):
        self.url = url
        self.fs = hadoop.hdfs_filesystem(url)
        self.dir = hadoop.hdfs_path(url).rstrip("/") or "/"
        self._lock = threading.Lock()  # a periodic save in a thread and the final one may overlap
        self._saved = b""  # what the last save wrote: unchanged state is not uploaded again
        self._taken = 0.0  # when the state it wrote was read

    def prepare(self) -> None:
        """Create the directory (the NameNode refuses bad names and missing permissions here)."""
        self.fs.makedirs(self.dir, exist_ok=True)

    def recover(self) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        """Task id -> position, and the exactly-once checkpoints, of the newest snapshot ({} if none)."""
        with self._lock:
            for _, path in self._snapshots():
                try:
                    data = json.loads(self.fs.cat_file(path))
                    return dict(data["tasks"]), dict(data.get("checkpoints", {}))
                except (ValueError, KeyError, TypeError) as exc:  # not ours: fall back to the one before
                    log.warning("%s: not a task snapshot (%s); trying an older one", path, exc)
            return {}, {}

    def save(self, state: dict[str, dict[str, Any]], checkpoints: dict[str, str], taken: float = 0.0) -> bool:
        """Upload ``state`` as the next snapshot unless it is what the last save wrote, or older than it
        (``taken``: ``time.monotonic()`` when the state was read; a periodic upload still under way when
        the final one comes must not follow it); whether it did."""
        payload = json.dumps({"version": 1, "tasks": state, "checkpoints": checkpoints}).encode()
        with self._lock:
            if payload == self._saved or taken < self._taken:
                return False
            older = self._snapshots()
            number = older[0][0] + 1 if older else 0
            final = f"{self.dir}/tasks.snapshot.{number}.json"
            tmp = f"{self.dir}/_tasks.snapshot.{number}.tmp"
            self.fs.makedirs(self.dir, exist_ok=True)
            self.fs.pipe_file(tmp, payload)
            self.fs.mv(tmp, final)
            if not self.fs.exists(final):  # WebHDFS reports a refused rename as {"boolean": false} only
                raise OSError(f"could not rename {tmp} to {final} on HDFS")
            for path in [p for _, p in older] + self._leftovers():
                self.fs.rm(path)
            self._saved, self._taken = payload, taken
            return True

    def _snapshots(self) -> list[tuple[int, str]]:
        """(number, path) of the numbered snapshots, newest first."""
        found = []
        for path in self._listing():
            match = _NUMBERED.fullmatch(path.rsplit("/", 1)[-1])
            if match:
                found.append((int(match.group(1)), path))
        return sorted(found, reverse=True)

    def _leftovers(self) -> list[str]:
        return [p for p in self._listing() if p.rsplit("/", 1)[-1].startswith("_tasks.snapshot.")]

    def _listing(self) -> list[str]:
        try:
            return [str(p) for p in self.fs.ls(self.dir, detail=False)]
        except FileNotFoundError:
            return []
