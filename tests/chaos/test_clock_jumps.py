"""Wall-clock jumps (NTP steps, a VM resumed) while the AM checks liveness and start timeouts: no
executor is lost and no timeout fires for them. Liveness and timeouts run on time.monotonic; the
wall clock only stamps what people read."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from unittest import mock

import pytest

from conftest import make_spec
from primus_runtime.am.master import ApplicationMaster
from primus_runtime.am.state import ExecutorState, JobState
from primus_runtime.models import HeartbeatRequest, RegisterRequest
from primus_runtime.spec import JobSpec
from simulated_backend import SimulatedBackend

HOUR = 3600.0


class Clock:
    """time.time as the AM sees it: the real one plus a jump the test sets."""

    def __init__(self) -> None:
        self.jump = 0.0
        self.real = time.time

    def __call__(self) -> float:
        return self.real() + self.jump


def _am(replicas: int, **extra: Any) -> ApplicationMaster:
    spec = JobSpec.from_dict(make_spec([{"name": "worker", "replicas": replicas, "command": "x"}],
                                       scheduling={"start_timeout": "30s"}, **extra))
    return ApplicationMaster(spec, "app", SimulatedBackend())


async def _run(am: ApplicationMaster, executor_id: str) -> None:
    incarnation = am.record.executors[executor_id].incarnation
    am.register(RegisterRequest(incarnation=incarnation, host="h", ports=[1]))
    await am.heartbeat(HeartbeatRequest(incarnation=incarnation, state="running"))


@pytest.mark.parametrize("jump", [HOUR, -HOUR], ids=["forward", "backward"])
def test_wall_clock_jumps_neither_lose_executors_nor_fire_timeouts(jump):
    clock = Clock()

    async def scenario() -> None:
        am = _am(2)
        await am.start("127.0.0.1:1")
        await _run(am, "worker-0")  # worker-1 is launched, not registered: its start barrier is open
        with mock.patch("time.time", clock):
            clock.jump = jump
            am.sweep()
            await am.heartbeat(HeartbeatRequest(incarnation=am.record.executors["worker-0"].incarnation,
                                                state="running"))
            am.sweep()
        assert am.record.executors["worker-0"].state is ExecutorState.RUNNING
        assert am.record.finishing is None and am.record.state is not JobState.FAILED, am.record.events[-1]
        assert not [e for e in am.record.events if e.to_state == "lost"]
        await am.close()

    asyncio.run(scenario())


def test_a_silent_executor_is_still_lost_when_the_wall_clock_jumps_back():
    """Liveness does not depend on the wall clock either way: silence past heartbeat_timeout on the
    monotonic clock loses the executor even though the wall clock says less time passed."""
    clock = Clock()

    async def scenario() -> None:
        am = _am(1)
        await am.start("127.0.0.1:1")
        await _run(am, "worker-0")
        ex = am.record.executors["worker-0"]
        ex.last_seen -= am.spec.am.heartbeat_timeout + 1  # silent that long, by the monotonic clock
        with mock.patch("time.time", clock):
            clock.jump = -HOUR
            am.sweep()
        assert ex.state is ExecutorState.LOST
        await am.close()

    asyncio.run(scenario())
