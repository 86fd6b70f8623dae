"""bench/chaos.py's fault suite on the minicluster (``--backend yarn``), a subset run in CI: the faults a
YARN user meets most (a trainer or its container killed, kills under exactly-once, the AM killed, the
DataNode down for a while), each a real job whose every record is checked by id. The whole table is in docs/performance.md."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import chaos_bench as load_chaos_bench
from primus_runtime.client import PrimusClient

from .conftest import Minicluster

pytest.importorskip("skein")
pytestmark = pytest.mark.timeout(420)

chaos_bench = load_chaos_bench()

RECORDS = 8000  # 2 trainers at 2,000 records/s: 2 s of reading each, longer than a container's start


def _run(name: str, tmp_path: Path):
    os.environ["PRIMUS_HOME"] = str(tmp_path / "home")
    outcome = chaos_bench.run_scenario(name, PrimusClient(home=tmp_path / "home"), tmp_path, RECORDS, "yarn")
    assert outcome.state == "succeeded", outcome
    assert outcome.lost == 0, outcome
    assert all(outcome.checks.values()), outcome
    return outcome


@pytest.mark.parametrize("name", ["trainer_sigkill", "container_kill"])
def test_a_killed_trainer_or_container_is_replaced_and_no_record_is_lost(minicluster: Minicluster, name, tmp_path):
    outcome = _run(name, tmp_path)
    assert outcome.faults == 1, outcome  # recovery times: measured by the bench (docs/performance.md)


def test_exactly_once_survives_trainer_kills_on_yarn_without_duplicates(minicluster: Minicluster, tmp_path):
    outcome = _run("exactly_once_kills", tmp_path)
    assert outcome.faults == 2 and outcome.duplicates == 0, outcome


def test_an_am_killed_while_it_hands_out_data_costs_no_record(minicluster: Minicluster, tmp_path):
    """YARN starts every executor again with the new attempt (skein keeps no container): each is a
    recovery measured from the kill to its trainer running again."""
    outcome = _run("am_kill_dispatch", tmp_path)
    assert outcome.faults == 1, outcome


def test_a_datanode_down_for_10_s_is_waited_through_without_losing_a_record(minicluster: Minicluster, tmp_path):
    """Before: "task ... failed 3 time(s), max_task_attempts is 3; last error: ... WebHDFS server ...
    unreachable: ConnectionRefusedError (on_bad_data: fail)", the job lost with 17,142 records unread."""
    outcome = _run("datanode_down", tmp_path)
    assert outcome.faults == 1 and outcome.duplicates == 0, outcome
    assert len(outcome.recovery) == 1, outcome  # records flowed again once the DataNode was back


def test_a_resourcemanager_restart_keeps_the_job_its_executors_and_its_outcome(minicluster: Minicluster, tmp_path):
    """Work-preserving RM restart: the same executors finish the job, one AM attempt, and YARN's
    report ends SUCCEEDED (the AM reached the new ResourceManager)."""
    outcome = _run("rm_restart", tmp_path)
    assert outcome.faults == 1 and outcome.duplicates == 0, outcome
    assert {"same executors", "one AM attempt", "YARN says SUCCEEDED"} <= outcome.checks.keys(), outcome
