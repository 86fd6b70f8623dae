"""The AM journal: what a new AM attempt needs to carry on the job without restarting its executors.

``am-journal.jsonl`` beside the status file holds JSON lines, each an absolute value (so that
replaying one twice changes nothing):

``{"k": "job", ...}``
    the job's summary, the outcome being finished (``finishing``) and the AM attempts;
``{"k": "role", ...}``
    one role's run-time state (replicas, failures, restarts...);
``{"k": "ex", "current": bool, ...}``
    one executor incarnation as it is now (the last line of an incarnation wins; ``current``:
    it is its index's incarnation, not an earlier one or one scaled away);
``{"k": "ev", ...}``
    one event, in order;
``{"k": "goodput", "closed": {cause: seconds}}``
    the goodput's seconds of periods over (``goodput.py``); the open ones are each executor's
    ``goodput``/``goodput_since`` in its line.

The AM writes what changed at the end of each of its steps (a report handled, a backend callback,
a request, a sweep), before it answers: whatever an executor was told is in the journal. A write is
one ``write()`` without ``fsync``: a killed AM loses nothing (the kernel has the data); a machine
crash ends its executors too. Once the journal holds many more lines than there are executors
and events, it is rewritten as one line per object (``compact``, atomically).
The data plane keeps its own journal (``data/journal.py``) the same way.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..states import ExecutorState, JobState
from .state import Event, Executor, JobRecord, RoleState

log = logging.getLogger("primus.am")

JOURNAL = "am-journal.jsonl"
COMPACT_LINES = 20_000
_EXECUTOR_FIELDS = {f.name for f in fields(Executor)} - {"last_seen", "stop_deadline"}
_ROLE_FIELDS = [f.name for f in fields(RoleState)]


def _role_line(role: RoleState) -> dict[str, Any]:
    line = {name: getattr(role, name) for name in _ROLE_FIELDS}
    line["failures_by_index"] = {str(k): v for k, v in role.failures_by_index.items()}
    return line


def _job_line(record: JobRecord, finish_reason: str) -> dict[str, Any]:
    line = record.summary()
    line["finishing"] = record.finishing.value if record.finishing is not None else None
    line["finish_reason"] = finish_reason
    return line


def _executor_line(record: JobRecord, ex: Executor) -> dict[str, Any]:
    line = ex.to_dict()
    line["replace_when_stopped"] = ex.replace_when_stopped
    line["goodput"], line["goodput_since"] = ex.goodput, ex.goodput_since
    line["current"] = record.executors.get(ex.id) is ex
    return line


class AMJournal:
    def __init__(self, path: Path, record: JobRecord):
        self.path = path
        self.record = record
        self.finish_reason = ""  # the AM's reason for the outcome it is finishing
        self._events = 0  # events already written
        self._roles: dict[str, dict[str, Any]] = {}
        self._job: dict[str, Any] = {}
        self._goodput: dict[str, float] = {}  # the closed goodput seconds last written
        self._lines = 0
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for appends
        self._broken = False

    def adopt_written(self) -> None:
        """The record was just rebuilt from this journal: it is all written already."""
        self._events = len(self.record.events)
        self.record.dirty.clear()
        self._lines = sum(1 for _ in self.path.open("rb"))

    def flush(self) -> None:
        """Write what changed since the last flush (nothing to do costs a few comparisons)."""
        record = self.record
        if self._file.closed:  # the AM closed: a heartbeat's commit that comes after has nothing to add
            return
        if not record.dirty and self._events == len(record.events) \
                and record.cluster_version == self._job.get("cluster_version"):
            return
        lines = [_executor_line(record, ex) | {"k": "ex"} for ex in record.dirty.values()]
        record.dirty.clear()
        lines += [{"k": "ev", **e.__dict__} for e in record.events[self._events:]]
        self._events = len(record.events)
        for role in record.roles.values():
            line = _role_line(role)
            if self._roles.get(role.name) != line:
                self._roles[role.name] = line
                lines.append({"k": "role", **line})
        job = _job_line(record, self.finish_reason)
        if job != self._job:
            self._job = job
            lines.append({"k": "job", **job})
        # Closed goodput seconds move only when an executor changes cause, which touches it: a
        # step that changed none found nothing dirty above and returned early.
        if record.goodput.closed != self._goodput:
            self._goodput = dict(record.goodput.closed)
            lines.append({"k": "goodput", "closed": self._goodput})
        self._write(lines)
        if self._lines > max(COMPACT_LINES, 4 * (len(record.executors) + len(record.history) + len(record.events))):
            self.compact()

    def _write(self, lines: list[dict[str, Any]]) -> None:
        if self._broken or not lines:
            return
        try:
            self._file.write("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
            self._file.flush()
        except OSError:
            # A full disk must not stop the job; the AM just cannot be recovered past this point.
            self._broken = True
            log.exception("cannot write the AM journal %s: a restarted AM would start from its last "
                          "complete line", self.path)
        self._lines += len(lines)

    def compacted(self) -> tuple[str, int]:
        """The journal as one line per object (earlier incarnations first, in order), and its lines."""
        record = self.record
        lines = [{"k": "job", **_job_line(record, self.finish_reason)}]
        lines += [{"k": "role", **_role_line(role)} for role in record.roles.values()]
        lines += [{"k": "ex", **_executor_line(record, ex)} for ex in [*record.history, *record.executors.values()]]
        lines += [{"k": "ev", **e.__dict__} for e in record.events]
        lines.append({"k": "goodput", "closed": dict(record.goodput.closed)})
        return "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines), len(lines)

    def compact(self) -> None:
        """Rewrite the journal as ``compacted`` says, atomically."""
        text, count = self.compacted()
        tmp = self.path.with_suffix(".tmp")
        try:
            with tmp.open("w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except OSError:
            log.exception("cannot compact the AM journal %s; it keeps growing", self.path)
            return
        self._file.close()
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._lines = count

    def close(self) -> None:
        self.flush()
        self._file.close()


@dataclass
class Recovered:
    """What a journal says, ready to put back into a JobRecord."""

    job: dict[str, Any]
    roles: dict[str, dict[str, Any]]
    executors: dict[str, dict[str, Any]]  # incarnation -> last line, in order of first appearance
    events: list[dict[str, Any]] = field(default_factory=list)
    goodput: dict[str, float] | None = None  # the closed goodput seconds
    written_at: float | None = None  # when the journal was last written (its mtime): the AM's last step


def load(path: Path) -> Recovered | None:
    """The journal at ``path`` replayed; None when there is none (or it holds no job line). A torn
    last line (the AM died in the middle of a write) is skipped."""
    try:
        text = path.read_text(encoding="utf-8")
        written_at: float | None = path.stat().st_mtime
    except FileNotFoundError:
        return None
    job: dict[str, Any] = {}
    roles: dict[str, dict[str, Any]] = {}
    executors: dict[str, dict[str, Any]] = {}
    events: list[dict[str, Any]] = []
    goodput: dict[str, float] | None = None
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        kind = line.pop("k", None)
        if kind == "job":
            job = line
        elif kind == "role":
            roles[line["name"]] = line
        elif kind == "ex":
            executors[line["incarnation"]] = line
        elif kind == "ev":
            if not events or line["seq"] > events[-1]["seq"]:  # compaction may have rewritten some
                events.append(line)
        elif kind == "goodput":
            goodput = line["closed"]
    if not job:
        return None
    return Recovered(job, roles, executors, events, goodput, written_at)


def restore(record: JobRecord, recovered: Recovered) -> str:
    """Put the journal's state into a fresh ``record`` (its roles already made from the spec);
    the reason of the outcome being finished, if any."""
    job = recovered.job
    record.state = JobState(job["state"])
    record.reason = job["reason"]
    record.created_at, record.started_at, record.finished_at = job["created_at"], job["started_at"], job["finished_at"]
    record.cluster_version = job["cluster_version"]
    record.am_attempts = list(job.get("am_attempts", []))
    record.finishing = JobState(job["finishing"]) if job.get("finishing") else None
    for name, line in recovered.roles.items():
        role = record.roles.get(name)
        if role is None:
            continue
        for key in _ROLE_FIELDS:
            if key in line:
                setattr(role, key, line[key])
        role.failures_by_index = {int(k): v for k, v in line.get("failures_by_index", {}).items()}
    record.executors.clear()
    record.counts.clear()
    record.ready_counts.clear()
    for line in recovered.executors.values():
        ex = Executor(**{k: v for k, v in line.items() if k in _EXECUTOR_FIELDS})
        ex.state = ExecutorState(line["state"])
        if line.get("current"):
            record.put_executor(ex)
        else:
            record.history.append(ex)
    record.events = [Event(**e) for e in recovered.events]
    # Goodput carries on: the closed seconds, and each executor not ended in its cause since its
    # ``since`` (the time the AM was down goes to that cause; adoption.py corrects the ones found gone).
    record.goodput.restore_closed(recovered.goodput)
    for ex in (*record.history, *record.executors.values()):
        if ex.state.terminal:
            ex.goodput = None
        else:
            record.goodput.reopen(ex)
    record.dirty.clear()
    return str(job.get("finish_reason", ""))
