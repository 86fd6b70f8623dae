"""A backend that starts nothing: each executor is reported launched at once,
and whoever drives the test or benchmark plays it over the real protocol."""

from __future__ import annotations

from primus_runtime.backends.base import BackendEvents, ExecutorBackend, Launched, LaunchRequest
from primus_runtime.spec import Resources


class SimulatedBackend(ExecutorBackend):
    def __init__(self, host: str = "127.0.0.1"):
        self.host = host
        self.events: BackendEvents | None = None
        self.launched: list[LaunchRequest] = []
        self.stopped: list[tuple[str, bool]] = []  # (incarnation, force)

    async def start(self, events: BackendEvents) -> None:
        self.events = events

    def check_fits(self, role: str, resources: Resources) -> str | None:
        return None

    async def launch(self, request: LaunchRequest) -> None:
        assert self.events is not None
        self.launched.append(request)
        self.events.on_launched(Launched(request.role, request.index, request.incarnation, self.host, [], {}))

    async def stop(self, role: str, index: int, incarnation: str, force: bool) -> None:
        self.stopped.append((incarnation, force))

    async def close(self) -> None:
        pass
