"""The executors of a job that have not ended, and what each waits for.

An incarnation is *live* from its creation until it ends. While live it may wait to be launched
(``to_launch``), to be told to start once registered (``awaiting_start``, then ``start_sent``), and
for the next reply to its heartbeat (``send``): a command is queued here and wakes the executor's
long poll if one waits.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .state import Executor


class Fleet:
    def __init__(self) -> None:
        self.live: dict[str, Executor] = {}  # incarnation -> executor not yet ended
        self.to_launch: dict[str, None] = {}  # NEW incarnations not yet asked of the backend, in order
        self.awaiting_start: set[str] = set()  # registered incarnations without a start command
        self.start_sent: set[str] = set()  # incarnations whose start command is queued or delivered
        self._commands: dict[str, dict[str, Any]] = {}  # incarnation -> next heartbeat reply
        self._wakeups: dict[str, asyncio.Event] = {}  # incarnation -> long-poll waiting for a command

    def get(self, incarnation: str | None) -> Executor | None:
        """The live executor a report (or a task's holder) is from; None for zombies (ended or unknown)."""
        return self.live.get(incarnation) if incarnation else None

    def add(self, ex: Executor) -> None:
        """A new incarnation, to be launched."""
        self.live[ex.incarnation] = ex
        self.to_launch[ex.incarnation] = None

    def forget(self, ex: Executor) -> None:
        """It ended: nothing waits for it any more."""
        self.live.pop(ex.incarnation, None)
        self._commands.pop(ex.incarnation, None)
        self.start_sent.discard(ex.incarnation)
        self.to_launch.pop(ex.incarnation, None)
        self.awaiting_start.discard(ex.incarnation)

    def send(self, ex: Executor, reply: dict[str, Any]) -> None:
        """``reply`` answers its next heartbeat (at once, if it waits in a long poll)."""
        self._commands[ex.incarnation] = reply
        wake = self._wakeups.get(ex.incarnation)
        if wake is not None:
            wake.set()

    def take_command(self, ex: Executor) -> dict[str, Any] | None:
        return self._commands.pop(ex.incarnation, None)

    async def wait_for_command(self, ex: Executor, seconds: float) -> dict[str, Any] | None:
        """The command sent to ``ex`` within ``seconds`` (a long poll), else None."""
        wake = self._wakeups.setdefault(ex.incarnation, asyncio.Event())
        try:
            await asyncio.wait_for(wake.wait(), seconds)
        except asyncio.TimeoutError:
            pass
        finally:
            self._wakeups.pop(ex.incarnation, None)
            ex.last_seen = time.monotonic()  # it was there all along (a long poll is shorter than the timeout)
        return self._commands.pop(ex.incarnation, None)
