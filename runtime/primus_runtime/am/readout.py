"""What of a running AM its read side sees: the metrics (``metrics.py``, ``scrape.py``) and the read
API and page (``ui/views.py``). They read through this and nothing else of the AM."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..spec import JobSpec
from .state import Executor, JobRecord
from .timeline import Timeline

if TYPE_CHECKING:
    from ..data.plane import DataPlane


class AMReadout(Protocol):
    @property
    def record(self) -> JobRecord: ...

    @property
    def spec(self) -> JobSpec: ...

    @property
    def data(self) -> DataPlane | None: ...

    @property
    def timeline(self) -> Timeline: ...

    def executor_of(self, incarnation: str | None) -> Executor | None:
        """The live executor of an incarnation (a task's holder), None once it ended."""

    async def read_log(self, path: str, offset: int, limit: int) -> tuple[bytes, int | None]:
        """Up to ``limit`` bytes of an executor's log from ``offset`` (negative: from its end), and its size."""
