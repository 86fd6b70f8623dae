"""Goodput (ETTR): the AM accounts each executor's time as productive, pending_resources, restarting,
waiting_for_data or draining (am/goodput.py), in O(1) per change, and carries it over an AM restart."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_am_recovery import kill_am, wait_recovered

from conftest import make_spec, wait_for
from primus_runtime.am import goodput as goodput_module
from primus_runtime.am.goodput import CAUSES, GoodputAccountant
from primus_runtime.am.journal import JOURNAL, load
from primus_runtime.am.master import ApplicationMaster
from primus_runtime.backends.base import Adoption
from primus_runtime.models import Goodput, StatusDocument
from primus_runtime.spec import JobSpec
from primus_runtime.states import ExecutorState
from simulated_backend import SimulatedBackend


def slot() -> SimpleNamespace:
    return SimpleNamespace(goodput=None, goodput_since=None)


# --- the accountant -------------------------------------------------------------------------------


def test_each_cause_accrues_from_its_start_and_a_closed_slot_stops():
    accountant = GoodputAccountant(origin=1000.0)
    a, b = slot(), slot()
    assert accountant.view(1000.0) == {"ratio": None, "seconds": dict.fromkeys(CAUSES, 0.0), "as_of": 1000.0}
    accountant.enter(a, "pending_resources", at=1000.0)
    accountant.enter(b, "pending_resources", at=1000.0)
    accountant.enter(a, "productive", at=1010.0)
    accountant.enter(b, "waiting_for_data", at=1020.0)
    assert accountant.view(1030.0)["seconds"] == {"productive": 20.0, "pending_resources": 30.0, "restarting": 0.0,
                                                  "waiting_for_data": 10.0, "draining": 0.0}
    accountant.enter(a, "draining", at=1030.0)
    accountant.enter(a, None, at=1035.0)  # it exited: no more seconds for it
    accountant.enter(b, "restarting", at=1040.0)
    assert accountant.enter(b, "restarting", at=1045.0) is False  # the same cause: nothing changes
    seen = accountant.view(1050.0)
    assert seen["seconds"] == {"productive": 20.0, "pending_resources": 30.0, "restarting": 10.0,
                               "waiting_for_data": 20.0, "draining": 5.0}
    assert seen["ratio"] == round(20 / 85, 6)
    accountant.enter(b, None, at=1050.0)
    assert accountant.view(5000.0)["seconds"] == seen["seconds"]  # every slot ended: the figures are final
    Goodput.model_validate(seen)  # the status' model, extra="forbid"


def test_the_o1_counters_agree_with_a_sum_over_every_executor():
    rng = random.Random(26)
    accountant = GoodputAccountant(origin=1.7e9)
    slots = [slot() for _ in range(200)]
    brute = dict.fromkeys(CAUSES, 0.0)  # closed periods, summed one by one
    now = 1.7e9
    for _ in range(5000):
        now += rng.random()
        ex = rng.choice(slots)
        cause = rng.choice([*CAUSES, None])
        if ex.goodput is not None and cause != ex.goodput:
            brute[ex.goodput] += now - ex.goodput_since
        accountant.enter(ex, cause, at=now)
    now += 3.0
    expected = dict(brute)
    for ex in slots:
        if ex.goodput is not None:
            expected[ex.goodput] += now - ex.goodput_since
    assert accountant.seconds(now) == pytest.approx(expected, abs=1e-3)


def test_closed_seconds_and_open_slots_come_back_after_a_restart():
    first = GoodputAccountant(origin=0.0)
    a, b = slot(), slot()
    first.enter(a, "pending_resources", at=0.0)
    first.enter(a, "productive", at=5.0)
    first.enter(b, "restarting", at=8.0)
    again = GoodputAccountant(origin=100.0)  # another process, another origin
    again.restore_closed(json.loads(json.dumps(first.closed)))
    for ex in (a, b):
        again.reopen(SimpleNamespace(**vars(ex)))
    assert again.seconds(20.0) == pytest.approx(first.seconds(20.0))


# --- which cause the AM says ------------------------------------------------------------------------


def test_the_am_names_the_cause_from_the_executors_state_drain_and_held_tasks():
    spec = JobSpec.model_validate(make_spec([{"name": "worker", "replicas": 1, "command": ["true"]},
                                             {"name": "ps", "replicas": 1, "command": ["true"]}]))
    am = ApplicationMaster(spec, "app", SimulatedBackend())
    worker = am.new_incarnation("worker", 0, attempt=0)
    replacement = am.new_incarnation("ps", 0, attempt=1)
    assert (worker.goodput, replacement.goodput) == ("pending_resources", "restarting")
    for state in (ExecutorState.STARTING, ExecutorState.REGISTERED):
        am.set_state(worker, state, "")
        assert worker.goodput == "pending_resources"
    am.set_state(worker, ExecutorState.RUNNING, "")
    assert worker.goodput == "productive"  # no input: a running trainer trains
    # A consuming role: productive while it holds a task, or once the input is all read.
    dispatcher = SimpleNamespace(held={}, consumed=False, enough=False, adopted=set(), scan_complete=True)
    am.data, am.fed_roles = SimpleNamespace(dispatcher=dispatcher), {"worker"}  # type: ignore[assignment]
    am.account(worker)
    assert worker.goodput == "waiting_for_data"
    dispatcher.held[worker.incarnation] = {"task-1": None}
    am.account(worker)
    assert worker.goodput == "productive"
    dispatcher.held[worker.incarnation] = {}
    dispatcher.consumed = True
    am.account(worker)
    assert worker.goodput == "productive"
    worker.draining = "preempted"
    am.account(worker)
    assert worker.goodput == "draining"
    am.set_state(worker, ExecutorState.FAILED, "drained", 76)
    assert worker.goodput is None and am.record.goodput.open["draining"] == 0
    assert am.record.goodput.closed["draining"] >= 0 and am.record.goodput.open["restarting"] == 1


class _Clock:
    def __init__(self, now: float):
        self.now = now

    def time(self) -> float:
        return self.now


class _Adopting(SimulatedBackend):
    """Finds only the incarnations it is given still running."""

    def __init__(self, running: set[str]):
        super().__init__()
        self.running = running

    async def adopt(self, executors: list[Adoption]) -> set[str]:
        return {a.incarnation for a in executors if a.incarnation in self.running}


def test_a_restarted_am_counts_its_down_time_for_adopted_and_gone_executors(tmp_path, monkeypatch):
    """Adopted still running: its trainer ran during the gap (productive). Gone: restarting from when the
    dead AM last saw it (its journal's last write), and its replacement restarting on from the take-over."""
    monkeypatch.delenv("PRIMUS_AM_DOWN_SINCE", raising=False)
    clock = _Clock(1000.0)
    monkeypatch.setattr(goodput_module, "time", clock)
    spec = JobSpec.model_validate(make_spec([{"name": "worker", "replicas": 2, "command": ["true"]}],
                                            am={"max_attempts": 2}))

    async def run() -> dict:
        first = ApplicationMaster(spec, "app", SimulatedBackend(), status_path=tmp_path / "status.json")
        kept, gone = (first.new_incarnation("worker", i, attempt=0) for i in range(2))
        clock.now = 1010.0
        for ex in (kept, gone):
            for state in (ExecutorState.STARTING, ExecutorState.REGISTERED, ExecutorState.RUNNING):
                first.set_state(ex, state, "")
        first.publisher.write_journals()
        first.journal.close()
        recovered = load(tmp_path / JOURNAL)
        assert recovered is not None
        recovered.written_at = 1025.0  # the dead AM's last step
        clock.now = 1040.0  # the new attempt takes over
        second = ApplicationMaster(spec, "app", _Adopting({kept.incarnation}), status_path=tmp_path / "status.json",
                                   attempt=2, recovered=recovered)
        await second.start("127.0.0.1:1")
        clock.now = 1050.0
        seconds = second.record.goodput.view()
        await second.close()
        return seconds

    seen = asyncio.run(run())
    # pending 2 x 10 s; productive: the kept one 1010-1050, the gone one 1010-1025; restarting: the gone
    # index 1025-1050 (found gone, then its replacement).
    assert seen["seconds"] == {"productive": 55.0, "pending_resources": 20.0, "restarting": 25.0,
                               "waiting_for_data": 0.0, "draining": 0.0}
    assert seen["ratio"] == 0.55


def test_an_executor_declared_lost_was_restarting_from_its_last_report(monkeypatch):
    clock = _Clock(1000.0)
    monkeypatch.setattr(goodput_module, "time", clock)
    spec = JobSpec.model_validate(make_spec([{"name": "worker", "replicas": 1, "command": ["true"]}]))

    async def run() -> dict:
        am = ApplicationMaster(spec, "app", SimulatedBackend())
        ex = am.new_incarnation("worker", 0, attempt=0)
        clock.now = 1010.0
        for state in (ExecutorState.STARTING, ExecutorState.REGISTERED, ExecutorState.RUNNING):
            am.set_state(ex, state, "")
        ex.heartbeat_at, ex.last_seen = 1020.0, time.monotonic() - 1000  # silent since 1020
        clock.now = 1060.0
        am.supervisor._check(ex, time.monotonic())
        assert ex.state is ExecutorState.LOST and ex.goodput is None
        return am.record.goodput.view(1060.0)

    seen = asyncio.run(run())
    assert seen["seconds"]["productive"] == 10.0  # 1010-1020, not to 1060
    assert seen["seconds"]["restarting"] == 40.0


# --- end to end on the local backend ----------------------------------------------------------------


def _goodput(client, app) -> Goodput:
    goodput = client.status(app, summary=True).goodput
    assert goodput is not None
    return goodput


def test_a_killed_trainer_costs_restarting_seconds_and_the_figures_survive_an_am_kill(client):
    app = client.submit(make_spec([{"name": "worker", "replicas": 2, "command": "exec sleep 300"}],
                                  am={"max_attempts": 2, "recovery_grace": "30s"}))
    wait_for(lambda: client.status(app).job.state == "running", 60, "the job running")
    worker = next(e for e in client.status(app).executors if e.id == "worker-0")
    os.kill(worker.pid, signal.SIGKILL)  # the executor and its trainer: the index restarts
    wait_for(lambda: next(e for e in client.status(app).executors if e.id == "worker-0").attempt == 1
             and client.status(app).job.state == "running" and all(
                 e.state == "running" for e in client.status(app).executors), 60, "worker-0 restarted")
    before = _goodput(client, app)
    assert before.seconds["restarting"] > 0 and before.seconds["productive"] > 0
    assert before.seconds["pending_resources"] > 0
    assert before.ratio is not None and 0 < before.ratio < 1
    assert before.seconds["waiting_for_data"] == 0 == before.seconds["draining"]

    kill_am(client, app)
    wait_recovered(client, app, 1)
    after = _goodput(client, app)
    for cause, seconds in before.seconds.items():  # carried on, not from zero
        assert after.seconds[cause] >= seconds, cause
    assert after.seconds["productive"] > before.seconds["productive"]  # the adopted trainers ran on

    client.kill(app)
    client.wait(app, timeout=60)
    final = StatusDocument.model_validate(json.loads(Path(client.cluster("local").job(app).status).read_text()))
    assert final.goodput is not None and final.goodput.seconds["productive"] >= after.seconds["productive"]
    assert final.summary().goodput == final.goodput
