"""The AM's data plane as one component: scanner + dispatcher + journal.

The AM makes exactly these calls: ``start()`` once, ``heartbeat()`` for each report of
a consuming executor, ``release()`` when one ends, ``suspend()``/``resume()`` on request,
``status()`` for the API, ``finish()`` and ``close()`` at the end. What the data plane
has to say goes back through ``DataEvents`` (an event for the job's log, or the job
must fail).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..spec import InputSpec
from .dispatcher import DataEvents, Dispatcher
from .journal import TaskJournal
from .source import Scanner

log = logging.getLogger("primus.data")


class DataPlane:
    def __init__(self, spec: InputSpec, events: DataEvents):
        self.spec = spec
        self.journal: TaskJournal | None = None
        recovered = None
        if spec.work_preserve_dir is not None:
            from ..spec import local_path

            self.journal = TaskJournal(local_path(spec.work_preserve_dir))
            recovered = self.journal.state
            done = sum(1 for t in recovered.values() if t.get("state") == "done")
            log.info("work preserved in %s: %d task(s) known, %d done", spec.work_preserve_dir, len(recovered), done)
        self.dispatcher = Dispatcher(spec, events, self.journal, recovered)
        self.scanner = Scanner(spec, self.dispatcher)
        self._tasks: list[asyncio.Task] = []

    @property
    def limit(self) -> int:
        return self.dispatcher.limit

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self.scanner.run()), asyncio.ensure_future(self._flush_forever())]

    def heartbeat(self, holder: str, report: dict[str, Any]) -> dict[str, Any]:
        return self.dispatcher.heartbeat(holder, report)

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

    def finish(self, succeeded: bool) -> None:
        self.dispatcher.finish(succeeded)
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
