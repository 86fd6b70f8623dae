"""Real jobs on the local backend under one fault each (bench/chaos.py's scenarios, small): every
record is checked by id; each scenario also checks what its fault must not do (see there)."""

from __future__ import annotations

import os

import pytest
from chaos_bench import Outcome, run_scenario

from primus_runtime.client import PrimusClient

RECORDS = 4000  # 2 trainers at 2,000 records/s: about a second of reading each, so the fault lands mid-run


def _run(name: str, tmp_path, records: int = RECORDS) -> Outcome:
    os.environ["PRIMUS_HOME"] = str(tmp_path / "home")
    outcome = run_scenario(name, PrimusClient(home=tmp_path / "home"), tmp_path, records)
    assert outcome.state == "succeeded", outcome
    assert outcome.lost == 0, outcome
    assert all(outcome.checks.values()), outcome
    return outcome


@pytest.mark.parametrize("name", ["executor_sigkill", "trainer_sigkill"])
def test_a_killed_executor_or_trainer_is_replaced_and_no_record_is_lost(name, tmp_path):
    outcome = _run(name, tmp_path)
    assert len(outcome.recovery) == 1, outcome  # a new incarnation of the one hit ran its trainer


def test_thirty_trainer_kills_a_second_apart_with_default_input_settings_lose_nothing(tmp_path):
    """Issue 24's repro at its full size: 200,000 records, 3 workers, a kill every second, 30 times."""
    outcome = _run("kill_storm", tmp_path, records=200_000)
    assert outcome.faults == 30 and len(outcome.recovery) == 30, outcome


def test_exactly_once_survives_trainer_kills_without_duplicates(tmp_path):
    outcome = _run("exactly_once_kills", tmp_path)
    assert outcome.faults == 2 and outcome.duplicates == 0, outcome


def test_a_stopped_executor_is_fenced_when_it_comes_back(tmp_path):
    outcome = _run("executor_sigstop", tmp_path)
    assert {"marked lost", "its trainer killed", "late report refused"} <= outcome.checks.keys()


@pytest.mark.parametrize("name", ["net_delay", "net_reset", "net_drop"])
def test_network_faults_shorter_than_the_heartbeat_timeout_lose_nobody_and_no_record(name, tmp_path):
    outcome = _run(name, tmp_path)
    assert outcome.checks.keys() == {"no executor lost", "same executors"}


def test_a_slow_trainer_keeps_heartbeating_and_loses_nothing(tmp_path):
    outcome = _run("slow_trainer", tmp_path, records=600)
    assert "no executor lost" in outcome.checks


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting the small tmpfs needs root")
def test_a_full_work_preserve_dir_is_reported_and_reading_goes_on(tmp_path):
    outcome = _run("full_disk", tmp_path)
    assert {"full disk reported", "saved again once freed"} <= outcome.checks.keys()


@pytest.mark.parametrize("name", ["am_kill_start", "am_kill_scale", "am_kill_dispatch"])
def test_the_job_survives_its_am_killed(name, tmp_path):
    outcome = _run(name, tmp_path)
    assert len(outcome.recovery) == 1, outcome  # the new attempt adopted what the dead one had
    assert outcome.duplicates == 0, outcome  # adopted executors keep their tasks: nothing read twice
