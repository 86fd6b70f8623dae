"""PrimusPartitionEventTrigger: one event per new partition, in order, resumed from the asset state store.

The trigger runs here as the triggerer runs it (its ``run()`` generator, on real files) with
Airflow's own ``AssetStateStoreAccessors`` injected; only the triggerer's supervisor, which
would forward the store's messages to the API server, is replaced by a dict
(``StoreSupervisor``). ``tests/provider/test_live_retrain.py`` runs it in a real triggerer.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import Asset, AssetWatcher
from airflow.sdk.exceptions import ErrorType
from airflow.sdk.execution_time import task_runner
from airflow.triggers.base import TriggerEvent

from airflow_provider_primus.triggers.partition_events import STATE_KEY, PrimusPartitionEventTrigger
from airflow_provider_primus.version_compat import AIRFLOW_V_3_3_PLUS

from .conftest import LOOP_STEP_TIMER, favoured, requires_airflow_3_3

if AIRFLOW_V_3_3_PLUS:  # the asset state store and its messages
    from airflow.sdk.execution_time.comms import (
        AssetStateStoreResult,
        ErrorResponse,
        GetAssetStateStoreByName,
        OKResponse,
        SetAssetStateStoreByName,
    )
    from airflow.sdk.execution_time.context import AssetStateStoreAccessors

#: The tests that resume from the store (a fixture of theirs needs it).
needs_asset_state_store = requires_airflow_3_3("the asset state store")

ASSET = Asset(name="clicks", uri="file:///data/clicks")


class StoreSupervisor:
    """Answers the asset state store messages the way the triggerer's supervisor does, from a dict
    ``{(asset name, key): value}``."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], Any] = {}

    async def asend(self, msg: Any) -> Any:
        if isinstance(msg, GetAssetStateStoreByName):
            if (msg.name, msg.key) not in self.values:
                return ErrorResponse(error=ErrorType.ASSET_STORE_NOT_FOUND)
            return AssetStateStoreResult(value=self.values[msg.name, msg.key])
        if isinstance(msg, SetAssetStateStoreByName):
            self.values[msg.name, msg.key] = msg.value
            return OKResponse(ok=True)
        raise AssertionError(f"unexpected message {msg!r}")


@pytest.fixture
def supervisor(monkeypatch: pytest.MonkeyPatch) -> StoreSupervisor:
    fake = StoreSupervisor()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", fake, raising=False)
    monkeypatch.setattr(PrimusPartitionEventTrigger, "handover_seconds", 0.05)
    return fake


def watcher(tmp_path: Path, *assets: Asset, **kwargs: Any) -> PrimusPartitionEventTrigger:
    """The trigger on ``tmp_path/YYYYMMDD``, as the triggerer sets it up for the watched ``assets``."""
    args = {"path": f"{tmp_path}/{{{{YYYY}}}}{{{{MM}}}}{{{{DD}}}}", "start": "2026-12-01", "poll_interval": 0.05,
            **kwargs}
    trigger = PrimusPartitionEventTrigger(**args)
    if assets:
        trigger.asset_state_store = AssetStateStoreAccessors(inlets=list(assets))
    return trigger


def complete(root: Path, *days: str) -> None:
    for day in days:
        (root / day).mkdir(parents=True, exist_ok=True)
        (root / day / "_SUCCESS").touch()


class Running:
    """A trigger's ``run()`` driven from a test: take the next event, or see that none comes."""

    def __init__(self, trigger: PrimusPartitionEventTrigger, loop: asyncio.AbstractEventLoop) -> None:
        self.events: AsyncIterator[TriggerEvent] = trigger.run()
        self.loop = loop
        self.pending: asyncio.Future[TriggerEvent] | None = None

    def next(self, timeout: float = 10.0) -> dict[str, Any]:
        if self.pending is None:
            self.pending = asyncio.ensure_future(self.events.__anext__(), loop=self.loop)
        event = self.loop.run_until_complete(asyncio.wait_for(asyncio.shield(self.pending), timeout))
        self.pending = None
        return event.payload

    def none_for(self, seconds: float) -> None:
        if self.pending is None:
            self.pending = asyncio.ensure_future(self.events.__anext__(), loop=self.loop)
        self.loop.run_until_complete(asyncio.sleep(seconds))
        assert not self.pending.done(), f"unexpected event {self.pending.result().payload}"

    def settle(self, seconds: float = 0.5) -> None:
        """Let the trigger run on (it records the state after an event) without taking an event."""
        self.none_for(seconds)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    for task in asyncio.all_tasks(loop):
        task.cancel()
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()


def test_serialize_carries_every_argument(tmp_path: Path):
    trigger = PrimusPartitionEventTrigger(path="hdfs:///logs/{{YYYY}}{{MM}}{{DD}}/{{HH}}", start="20261201",
                                          poll_interval=30, success_marker="_DONE", webhdfs_conn_id="hdfs",
                                          state_asset="logs")
    path, kwargs = trigger.serialize()
    assert path == "airflow_provider_primus.triggers.partition_events.PrimusPartitionEventTrigger"
    assert kwargs["granularity"] == "hour" and kwargs["start"] == "2026-12-01"  # defaulted, normalized
    again = PrimusPartitionEventTrigger(**kwargs)
    assert again.serialize() == (path, kwargs)
    assert set(kwargs) == set(inspect.signature(PrimusPartitionEventTrigger.__init__).parameters) - {"self"}
    AssetWatcher(name="w", trigger=trigger)  # accepted as an asset watcher's trigger


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"granularity": "week"}, "granularity must be one of"),
    ({"start": "December"}, "partition must be a date"),
    ({"poll_interval": 0}, "poll_interval must be > 0"),
    ({"path": "s3://bucket/{{YYYY}}{{MM}}{{DD}}"}, "scheme 's3' is not supported"),
    ({"path": "/data/{{YYYY}}{{MM}}{{DD}}/{{HH}}", "granularity": "day"}, "has an {{HH}} placeholder"),
])
def test_bad_arguments_are_refused_naming_the_field(tmp_path: Path, kwargs: dict[str, Any], message: str):
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("(", r"\(")):
        watcher(tmp_path, **kwargs)


@needs_asset_state_store
def test_one_event_per_ready_partition_in_order_never_skipping_one(tmp_path: Path, supervisor: StoreSupervisor,
                                                                   loop: asyncio.AbstractEventLoop):
    complete(tmp_path, "20261201", "20261202", "20261203", "20261205")  # 04 is late
    (tmp_path / "20261204").mkdir()  # being written: no marker yet
    running = Running(watcher(tmp_path, ASSET), loop)
    assert running.next() == {"partition": "2026-12-01", "path": f"{tmp_path}/20261201"}
    assert [running.next()["partition"] for _ in range(2)] == ["2026-12-02", "2026-12-03"]
    running.none_for(0.5)  # 05 is complete, but 04 is not: nothing is skipped
    assert supervisor.values == {("clicks", STATE_KEY): "2026-12-03"}  # recorded once handed over

    complete(tmp_path, "20261204")
    assert [running.next()["partition"] for _ in range(2)] == ["2026-12-04", "2026-12-05"]
    running.settle()
    assert supervisor.values == {("clicks", STATE_KEY): "2026-12-05"}


@needs_asset_state_store
def test_a_restarted_trigger_resumes_after_the_stored_partition(tmp_path: Path, supervisor: StoreSupervisor,
                                                                loop: asyncio.AbstractEventLoop):
    complete(tmp_path, "20261201", "20261202")
    first = Running(watcher(tmp_path, ASSET), loop)
    assert [first.next()["partition"] for _ in range(2)] == ["2026-12-01", "2026-12-02"]
    first.settle()

    # A new triggerer: the same trigger arguments, a new instance, the store as it was left.
    again = Running(watcher(tmp_path, ASSET), loop)
    again.none_for(0.5)  # 01 and 02 are not announced again
    complete(tmp_path, "20261203")
    assert again.next() == {"partition": "2026-12-03", "path": f"{tmp_path}/20261203"}


@needs_asset_state_store
def test_a_start_after_the_stored_partition_wins(tmp_path: Path, supervisor: StoreSupervisor,
                                                  loop: asyncio.AbstractEventLoop):
    supervisor.values["clicks", STATE_KEY] = "2026-11-20"
    complete(tmp_path, "20261130", "20261201")
    assert Running(watcher(tmp_path, ASSET), loop).next()["partition"] == "2026-12-01"


@needs_asset_state_store
def test_hourly_partitions_and_a_named_state_asset(tmp_path: Path, supervisor: StoreSupervisor,
                                                   loop: asyncio.AbstractEventLoop):
    other = Asset(name="other", uri="file:///other")
    supervisor.values["clicks", STATE_KEY] = "2026-12-01T22"
    for hour in ("20261201/23", "20261202/00"):
        complete(tmp_path, hour)
    trigger = watcher(tmp_path, ASSET, other, path=f"{tmp_path}/{{{{YYYY}}}}{{{{MM}}}}{{{{DD}}}}/{{{{HH}}}}",
                      start="2026-12-01T20", success_marker=None, state_asset="clicks")
    running = Running(trigger, loop)
    assert [running.next() for _ in range(2)] == [
        {"partition": "2026-12-01T23", "path": f"{tmp_path}/20261201/23"},
        {"partition": "2026-12-02T00", "path": f"{tmp_path}/20261202/00"},
    ]
    running.settle()
    assert supervisor.values == {("clicks", STATE_KEY): "2026-12-02T00"}


@needs_asset_state_store
@pytest.mark.parametrize(("state_asset", "message"), [
    (None, "state_asset: Task has 2 concrete inlets"), ("nope", "state_asset: no asset of that name"),
])
def test_several_watched_assets_need_a_state_asset_they_have(tmp_path: Path, supervisor: StoreSupervisor,
                                                             loop: asyncio.AbstractEventLoop, state_asset: str | None,
                                                             message: str):
    trigger = watcher(tmp_path, ASSET, Asset(name="other", uri="file:///other"), state_asset=state_asset)
    with pytest.raises(ValueError, match=message):
        Running(trigger, loop).next()


def test_without_a_store_it_still_announces_every_partition(tmp_path: Path, loop: asyncio.AbstractEventLoop):
    complete(tmp_path, "20261201", "20261202")
    running = Running(watcher(tmp_path), loop)  # no asset_state_store: Airflow before 3.3
    assert [running.next()["partition"] for _ in range(2)] == ["2026-12-01", "2026-12-02"]


# In a fresh interpreter, as the triggerer: its own modules loaded, the trigger's not yet. The triggerer
# imports the trigger's module and builds the trigger on its event loop (TriggerRunner.create_triggers);
# LOOP_STEP_TIMER lists the steps that took 0.1 s (asyncio's debug mode describes them).
WATCHER_PROBE = LOOP_STEP_TIMER + """
import json, sys

import airflow.jobs.triggerer_job_runner
from airflow._shared.module_loading import import_string


async def main(path):
    trigger = import_string("airflow_provider_primus.triggers.partition_events.PrimusPartitionEventTrigger")(
        path=path, start="2026-12-01", poll_interval=0.1)
    events = []
    async for event in trigger.run():
        events.append(event.payload)
        if len(events) == 2:
            break
    print("PROBE " + json.dumps({"events": events, "slow": slow}))


loop = asyncio.new_event_loop()
loop.set_debug(True)
loop.slow_callback_duration = 3600  # LOOP_STEP_TIMER judges the steps
loop.run_until_complete(main(sys.argv[1]))
loop.close()
"""


def test_the_watcher_never_blocks_the_triggerers_event_loop(tmp_path):
    """Issue 27: importing the watcher's module took ~1 s on the triggerer's loop (the runtime's data
    scanner and spec, for a walk through the days). From its import to its second event, no step on
    the loop may take 0.1 s."""
    for day in ("20261201", "20261202"):
        (tmp_path / day).mkdir()
        (tmp_path / day / "_SUCCESS").touch()
    got = subprocess.run([sys.executable, "-c", WATCHER_PROBE, str(tmp_path / "{{YYYY}}{{MM}}{{DD}}")],
                         preexec_fn=favoured, capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr[-3000:]
    (result,) = [json.loads(line.removeprefix("PROBE ")) for line in got.stdout.splitlines()
                 if line.startswith("PROBE ")]
    assert [event["partition"] for event in result["events"]] == ["2026-12-01", "2026-12-02"]
    assert result["slow"] == []
