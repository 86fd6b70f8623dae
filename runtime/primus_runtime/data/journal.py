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
writes a new snapshot and then keeps only the journal's lines written since it was taken; a crash
between the two leaves a journal that replays onto the new snapshot harmlessly (its older lines end
where the snapshot starts). Recovery ignores a torn last line (a crash in the middle of a write).

The AM's loop only renders and appends: the periodic ``fsync`` and a snapshot's writing, ``fsync``
and rename run in a thread (``_Chore``) while it goes on; the journal is cut to its new lines once
the snapshot is in place, and ``flush``, ``compact`` and ``close`` wait for what is under way.

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
from collections.abc import Callable
from functools import partial
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
        # What the directory held when opened (the snapshot, then the journal): the dispatcher resumes
        # from it. Read only; the journal's own view is ``_entries``.
        self.state: dict[str, dict[str, Any]] = self.recover()
        self.checkpoints: dict[str, str] = read_checkpoints(self.dir)  # executor id -> committed checkpoint
        self._pending: list[str] = []
        self._dirty: dict[str, Task] = {}
        # Task id -> its entry as last journaled, as the snapshot writes it (``"<id>": {<_body>}``, or
        # _QUEUED for a listed task that never changed): a write compares texts to find what changed,
        # and a snapshot only joins them. Tasks of ``state`` join it when first snapshotted (``_merged``).
        self._entries: dict[str, str] = {}
        self._merged: dict[str, dict[str, Any]] | None = None  # the ``state`` already in _entries
        self._flushed_at = 0.0
        self._unsynced = False
        self._syncing: _Chore | None = None  # the periodic fsync, in a thread
        # A snapshot being written in a thread, with the journal's size and lines it holds.
        self._compaction: tuple[_Chore, int, int] | None = None
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
        if self.keep_listing and task.id not in self._entries and task.id not in self.state:
            self._entries[task.id] = _QUEUED
            self._pending.append(json.dumps({"op": "add", "task": task.to_dict()}))

    def changed(self, task: Task) -> None:
        self._dirty[task.id] = task

    def checkpoint(self, slot: str, checkpoint: str) -> None:
        if self.checkpoints.get(slot) != checkpoint:
            self.checkpoints[slot] = checkpoint
            self._pending.append(json.dumps({"op": "checkpoint", "slot": slot, "id": checkpoint}))

    # --- writing ---

    def maybe_flush(self) -> None:
        """``write``, and at most every ``FLUSH_SECONDS`` an ``fsync`` in a thread. A failed fsync is
        raised by the call after it (the lines are synced again then)."""
        if time.monotonic() - self._flushed_at < FLUSH_SECONDS:
            return
        self.write()
        self._flushed_at = time.monotonic()
        self._check_compaction()
        if self._syncing is not None:
            if not self._syncing.done:
                return  # a slow disk: the next round syncs what this one would have
            failed, self._syncing = self._syncing.error, None
            if failed is not None:
                self._unsynced = True
                raise failed
        self._sync_in_background()

    def _sync_in_background(self) -> None:
        if self._unsynced and self._syncing is None:
            self._syncing = _Chore(partial(_fsync_and_close, os.dup(self._file.fileno())))
            self._unsynced = False

    def write(self) -> None:
        """Write what changed since the last write (no ``fsync``); compact when the journal is long.
        The AM calls this at the end of every step, so it is lean: each changed task rendered once as
        JSON text (compared with what was written last, kept for the next snapshot), one ``os.write``."""
        if self._dirty:
            self._render_changes()
        if not self._pending:
            return
        self._append("\n".join(self._pending) + "\n")
        self._unsynced = True
        self._lines += len(self._pending)
        self._pending.clear()
        self._check_compaction()
        if self._compaction is None and self._lines >= max(COMPACT_LINES, self._entry_count()):  # amortized: O(tasks)
            self._start_compaction()

    def _render_changes(self) -> None:
        entries, append = self._entries, self._pending.append
        for task_id, task in self._dirty.items():
            body, quoted = _body(task), _quote(task_id)
            entry = f"{quoted}: {{{body}}}"
            if entries.get(task_id) != entry:
                entries[task_id] = entry
                append(f'{{"op": "set", "id": {quoted}, {body}}}')
        self._dirty.clear()

    def _entry_count(self) -> int:
        """Tasks a snapshot would hold (about: a task both recovered and changed counts twice)."""
        return len(self._entries) + (len(self.state) if self._merged is not self.state else 0)

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
        """``write``, then ``fsync``, once what runs in threads is done."""
        self.write()
        self._settle()
        self._flushed_at = time.monotonic()
        if self._unsynced:
            os.fsync(self._file.fileno())
            self._unsynced = False

    # --- snapshots ---

    def _start_compaction(self) -> None:
        """Take a snapshot of what the journal says now; a thread writes it (the AM goes on appending)."""
        text = _snapshot_text(self._all_entries(), self.checkpoints)
        self._compaction = (_Chore(partial(_write_snapshot_text, self.dir, text)), self._size, self._lines)

    def _check_compaction(self, wait: bool = False) -> None:
        """Once the snapshot is in place, keep only the journal's lines written since it was taken."""
        if self._compaction is None or not (wait or self._compaction[0].done):
            return
        chore, size, lines = self._compaction
        chore.wait()
        self._compaction = None
        if chore.error is not None:  # the journal holds every position: only its length suffers
            log.warning("cannot compact the task journal in %s (%s); it keeps growing", self.dir, chore.error)
            return
        try:
            self._keep_lines_after(size)
        except OSError as exc:  # the whole journal replays onto the new snapshot as well
            log.warning("cannot shorten the task journal in %s (%s); it keeps growing", self.dir, exc)
            return
        self._lines -= lines

    def _keep_lines_after(self, size: int) -> None:
        """Replace the journal by its bytes from ``size`` on (renamed into place), synced in a thread
        at once: its lines stay within the flush interval's reach."""
        path, tmp = self.dir / JOURNAL, self.dir / (JOURNAL + ".tmp")
        with open(path, "rb") as f:
            f.seek(size)
            tail = f.read()
        try:
            with open(tmp, "wb") as f:
                f.write(tail)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, path)
        self._file.close()
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for appends
        self._size = len(tail)
        self._unsynced = True
        self._sync_in_background()

    def _settle(self) -> None:
        """Wait for the fsync and the snapshot under way (a failed fsync is synced again by the caller)."""
        if self._syncing is not None:
            self._syncing.wait()
            if self._syncing.error is not None:
                self._unsynced = True
            self._syncing = None
        self._check_compaction(wait=True)

    def _all_entries(self) -> dict[str, str]:
        if self._merged is not self.state:  # recovered tasks not journaled since: rendered once, kept
            for task_id, entry in self.state.items():
                if task_id not in self._entries:
                    self._entries[task_id] = f"{_quote(task_id)}: {json.dumps(entry)}"
            self._merged = self.state
        return self._entries

    def compact(self) -> None:
        """A new snapshot of every task (changes not written yet included), then an empty journal."""
        self._settle()
        self._render_changes()
        _write_snapshot_text(self.dir, _snapshot_text(self._all_entries(), self.checkpoints))
        self._pending.clear()  # in the snapshot
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


class _Chore:
    """One piece of file work (an fsync, a snapshot) done in a thread while the AM's loop goes on."""

    def __init__(self, work: Callable[[], None]):
        self.error: OSError | None = None
        self._thread = threading.Thread(target=self._run, args=(work,), name="task-journal", daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], None]) -> None:
        try:
            work()
        except OSError as exc:
            self.error = exc

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self) -> None:
        self._thread.join()


def _fsync_and_close(fd: int) -> None:
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# A task's entry as the snapshot and ``set`` lines write it (``"state": ..., "records": ...``), JSON
# text built by hand: it is rendered for every task that changed, at every AM step.
_STATE_FIELD = {state: f'"state": "{state.value}"' for state in TaskState}
_QUEUED = '"state": "queued", "records": 0, "bytes": 0, "attempts": 0'  # (a body)
_NO_ERROR = '""'


def _body(task: Task) -> str:
    state = task.state
    body = (f'{_STATE_FIELD[state]}, "records": {task.records}, "bytes": {task.bytes_done}, '
            f'"attempts": {task.attempts}, "error": {_quote(task.error) if task.error else _NO_ERROR}')
    if state is TaskState.RUNNING and task.holder is not None:
        body += f', "holder": {_quote(task.holder)}'
    if task.offset >= 0:
        body += f', "offset": {task.offset}, "time": {task.event_time}'
    return body


def _snapshot_text(entries: dict[str, str], checkpoints: dict[str, str]) -> str:
    tasks = ", ".join([entry if entry is not _QUEUED else f"{_quote(task_id)}: {{{_QUEUED}}}"
                       for task_id, entry in entries.items()])
    return (f'{{"version": 1, "written_at": {time.time()!r}, "tasks": {{{tasks}}}, '
            f'"checkpoints": {json.dumps(checkpoints)}}}')


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
    _write_snapshot_text(directory, json.dumps({"version": 1, "written_at": time.time(), "tasks": state,
                                                "checkpoints": checkpoints or {}}))


def _write_snapshot_text(directory: str | Path, text: str) -> None:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (SNAPSHOT + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
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
