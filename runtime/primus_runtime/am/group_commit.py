"""Group commit: one journal write for every heartbeat that ended in the same turn of the AM's loop.

The AM journals a step's changes before its answer leaves, so that a restarted AM knows whatever
an executor was told. Written once per heartbeat, that write (rendering the changed tasks, one
``write`` system call) cost a busy AM a fifth of its heartbeats (``bench/dispatch.py``). Databases
have long answered this with a group commit, and so does the AM: a heartbeat that changed
something waits on the commit of its loop turn; the first one to wait schedules it with
``call_soon``, so it runs once every handler made runnable in that turn has had its step, writes
all of their changes at once, and releases them together. Each answer still leaves only after the
write that holds its changes, and the wait is one loop turn, not a timer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class GroupCommit:
    def __init__(self, write: Callable[[], None]):
        self._write = write
        self._pending: asyncio.Future[None] | None = None
        self.commits = 0  # writes made, and the steps that waited on them (what a batch holds)
        self.waits = 0

    async def wait(self) -> None:
        """Return once everything changed before this call is written (raise what the write raised)."""
        pending = self._pending
        if pending is None:
            loop = asyncio.get_running_loop()
            pending = self._pending = loop.create_future()
            loop.call_soon(self._commit)
        self.waits += 1
        # Shielded: a waiter cancelled (its client gone) must not cancel the commit the others wait on.
        await asyncio.shield(pending)

    def _commit(self) -> None:
        pending, self._pending = self._pending, None
        assert pending is not None
        self.commits += 1
        try:
            self._write()
        except Exception as exc:  # noqa: BLE001 - handed to every step that waits on this write
            pending.set_exception(exc)
            pending.exception()  # marked retrieved: with every waiter gone, asyncio would log it again
        else:
            pending.set_result(None)
