"""The AM's data plane as one component: scanner + dispatcher + journal.

The AM makes exactly these calls: ``start()`` once, ``heartbeat()`` for each report of
a consuming executor, ``release()`` when one ends, ``suspend()``/``resume()``/``savepoint()`` on request,
``status()`` for the API, ``finish()`` and ``close()`` at the end. What the data plane
has to say goes back through ``DataEvents`` (an event for the job's log, or the job
must fail).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..spec import InputSpec, local_path
from .dispatcher import DataEvents, Dispatcher
from .journal import TaskJournal, read_checkpoints, recover, write_snapshot
from .source import Scanner

log = logging.getLogger("primus.data")


class DataPlane:
    def __init__(self, spec: InputSpec, events: DataEvents):
        self.spec = spec
        self.journal: TaskJournal | None = None
        self._problem: str | None = None  # found before start: the job fails at once
        recovered: dict[str, dict[str, Any]] = {}
        checkpoints: dict[str, str] = {}
        if spec.work_preserve_dir is not None:
            self.journal = TaskJournal(local_path(spec.work_preserve_dir))
            recovered, checkpoints = self.journal.state, dict(self.journal.checkpoints)
        if spec.restore_from is not None and not recovered:
            recovered = recover(local_path(spec.restore_from))
            checkpoints = read_checkpoints(local_path(spec.restore_from))
            if not recovered:
                self._problem = f"restore_from: no saved task positions in {spec.restore_from}"
            elif self.journal is not None:  # this job's own journal starts from the savepoint
                write_snapshot(self.journal.dir, recovered, checkpoints)
                self.journal.state, self.journal.checkpoints = dict(recovered), dict(checkpoints)
            log.info("restored from %s", spec.restore_from)
        if recovered:
            done = sum(1 for t in recovered.values() if t.get("state") == "done")
            log.info("earlier progress: %d task(s) known, %d done", len(recovered), done)
        self.dispatcher = Dispatcher(spec, events, self.journal, recovered)
        self.dispatcher.checkpoints.update(checkpoints)
        self.scanner = Scanner(spec, self.dispatcher)
        self._tasks: list[asyncio.Task] = []

    @property
    def limit(self) -> int:
        return self.dispatcher.limit

    def start(self) -> None:
        if self._problem is not None:
            self.dispatcher.fail(self._problem)
            return
        self._tasks = [asyncio.ensure_future(self.scanner.run()), asyncio.ensure_future(self._flush_forever())]

    def heartbeat(self, holder: str, report: dict[str, Any], slot: str | None = None) -> dict[str, Any]:
        return self.dispatcher.heartbeat(holder, report, slot)

    def checkpoint(self, slot: str) -> str | None:
        """Exactly-once: the checkpoint the last trainer of ``slot`` (an executor id) committed."""
        return self.dispatcher.checkpoints.get(slot)

    def release(self, holder: str, charge: bool, reason: str) -> None:
        self.dispatcher.release(holder, charge, reason)

    def suspend(self) -> dict[str, Any]:
        self.dispatcher.suspend()
        return self.status()

    def resume(self) -> dict[str, Any]:
        self.dispatcher.resume()
        return self.status()

    def status(self) -> dict[str, Any]:
        return self.dispatcher.status()

    async def savepoint(self, directory: str) -> dict[str, Any]:
        """Every task's position, written to ``directory`` (a job started with ``restore_from`` there
        resumes from it); what was saved."""
        state = self.dispatcher.saved_state()
        await asyncio.to_thread(write_snapshot, local_path(directory), state, dict(self.dispatcher.checkpoints))
        done = sum(1 for t in state.values() if t["state"] == "done")
        return {"dir": directory, "tasks": len(state), "done": done,
                "records": sum(t["records"] for t in state.values())}

    def finish(self, job_state: str) -> None:
        self.dispatcher.finish(job_state)
        for task in self._tasks:
            task.cancel()
        if self.journal is not None:
            self.journal.flush()

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.journal is not None:
            self.journal.close()
            self.journal = None

    async def _flush_forever(self) -> None:
        while self.journal is not None:
            await asyncio.sleep(0.25)
            try:
                self.journal.maybe_flush()
            except OSError:
                log.exception("cannot write the task journal in %s", self.spec.work_preserve_dir)
