"""Goodput: where the executors' time goes, and the job's effective training time ratio (ETTR).

Every executor incarnation not ended is in one cause (``models.GoodputCause``) from a moment on:
``Executor.goodput`` and ``Executor.goodput_since`` (wall-clock seconds: they are journaled, and a
restarted AM, maybe on another node, carries them on). The accountant keeps, per cause, the seconds
of periods already over (``closed``), how many executors are in it now (``open``) and the sum of
their ``since``: the seconds of a cause at ``now`` are ``closed + open * now - sum(since)``. A
change costs O(1) and a read O(causes), whatever the number of executors (the heartbeat path must not
scan them). Which cause an executor is in is the AM's to say (``ApplicationMaster.account``); this
module only counts.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

PRODUCTIVE = "productive"
PENDING_RESOURCES = "pending_resources"
RESTARTING = "restarting"
WAITING_FOR_DATA = "waiting_for_data"
DRAINING = "draining"
CAUSES = (PRODUCTIVE, PENDING_RESOURCES, RESTARTING, WAITING_FOR_DATA, DRAINING)  # models.GoodputCause's order
#: Seconds a status' goodput is kept while no executor changes cause. Open periods grow at every read;
#: counted afresh each time, they made every status differ from the one before, and the pages that
#: poll the status revalidating it by ETag (a 304 when nothing changed) got a full answer every time.
VIEW_EVERY = 5.0


class Accounted(Protocol):
    """What of an executor the accountant reads and writes (``state.Executor``)."""

    goodput: str | None
    goodput_since: float | None


class GoodputAccountant:
    def __init__(self, origin: float | None = None):
        # Times are kept relative to ``origin`` inside the sums: 10,000 executors' epoch seconds summed
        # would leave a float only milliseconds of precision.
        self.origin = time.time() if origin is None else origin
        self.closed = dict.fromkeys(CAUSES, 0.0)  # seconds of periods over
        self.open = dict.fromkeys(CAUSES, 0)  # executors in the cause now
        self._since = dict.fromkeys(CAUSES, 0.0)  # sum of their (since - origin)
        self._view: dict[str, Any] | None = None  # the last view() counted at the current time
        self._view_at = 0.0

    def enter(self, ex: Accounted, cause: str | None, at: float | None = None) -> bool:
        """``ex`` is in ``cause`` from ``at`` (default now; None: it ended, it accrues no more). Whether
        its cause changed (the caller journals the executor then)."""
        old = ex.goodput
        if old == cause:
            return False
        now = time.time() if at is None else at
        if old is not None:
            since = ex.goodput_since if ex.goodput_since is not None else now
            now = max(now, since)  # a change dated before the period began: no second counted twice
            self.open[old] -= 1
            self._since[old] -= since - self.origin
            self.closed[old] += now - since
        if cause is not None:
            self.open[cause] += 1
            self._since[cause] += now - self.origin
        ex.goodput, ex.goodput_since = cause, now
        self._view = None
        return True

    def reopen(self, ex: Accounted) -> None:
        """``ex`` comes back from the journal in its cause since its ``since`` (a restarted AM)."""
        if ex.goodput is None or ex.goodput not in self.open:
            ex.goodput = None
            return
        if ex.goodput_since is None:
            ex.goodput_since = time.time()
        self.open[ex.goodput] += 1
        self._since[ex.goodput] += ex.goodput_since - self.origin
        self._view = None

    def restore_closed(self, closed: dict[str, Any] | None) -> None:
        """The closed seconds an earlier AM attempt journaled."""
        for cause, seconds in (closed or {}).items():
            if cause in self.closed:
                self.closed[cause] = float(seconds)
        self._view = None

    def seconds(self, now: float | None = None) -> dict[str, float]:
        relative = (time.time() if now is None else now) - self.origin
        return {cause: max(0.0, self.closed[cause] + self.open[cause] * relative - self._since[cause])
                for cause in CAUSES}

    def view(self, now: float | None = None) -> dict[str, Any]:
        """``models.Goodput`` as the status has it: the ETTR (null before any second), seconds by cause,
        and when they were counted (``as_of``). Without ``now``: counted now, or the figures counted
        less than ``VIEW_EVERY`` seconds ago if no executor changed cause since (see ``VIEW_EVERY``)."""
        if now is not None:
            return self._counted(now)
        current = time.time()
        if self._view is None or current - self._view_at >= VIEW_EVERY:
            self._view, self._view_at = self._counted(current), current
        return self._view

    def _counted(self, now: float) -> dict[str, Any]:
        seconds = self.seconds(now)
        total = sum(seconds.values())
        return {"ratio": round(seconds[PRODUCTIVE] / total, 6) if total > 0 else None,
                "seconds": {cause: round(value, 3) for cause, value in seconds.items()}, "as_of": round(now, 3)}
