"""What sensors and triggers wait for, judged on status snapshots; Primus path templates in Jinja."""

from __future__ import annotations

import datetime as dt

import jinja2
import pytest

from airflow_provider_primus.conditions import (
    data_reached,
    normalize_time,
    role_reached,
    watermark_passed,
)
from airflow_provider_primus.partitions import PartitionPath, expand_partition, normalize_partition
from airflow_provider_primus.templating import keep_partition_placeholders
from primus_runtime.models import StatusSummary

from .conftest import status_summary


def status(state: str = "running", data: dict | None = None, running: int = 1) -> StatusSummary:
    return status_summary({"app_id": "primus-1", "state": state, "reason": "why"},
                          [{"name": "worker", "replicas": 2, "restarts": 0, "states": {"running": running}}], data)


def data(progress: float, watermark: str | None, state: str = "running") -> dict:
    return {"state": state, "progress": progress, "watermark": watermark, "tasks": {"done": 3, "total": 10}}


@pytest.mark.parametrize("given,expected", [
    ("2026-12-01", "2026-12-01"), ("20261201", "2026-12-01"), ("2026-12-01T05", "2026-12-01T05"),
    ("2026120105", "2026-12-01T05"), ("2026-12-01T05:00:00+00:00", "2026-12-01T05"),
    (dt.date(2026, 12, 1), "2026-12-01"), (dt.datetime(2026, 12, 1, 5, 30), "2026-12-01T05"),
])
def test_partitions_are_normalized_to_the_runtime_watermark_spelling(given, expected):
    assert normalize_partition(given) == expected


def test_a_bad_partition_names_the_value():
    with pytest.raises(ValueError, match="got 'yesterday'"):
        normalize_partition("yesterday")


@pytest.mark.parametrize("watermark,partition,passed", [
    (None, "2026-12-01", False), ("2026-11-30", "2026-12-01", False), ("2026-12-01", "2026-12-01", True),
    ("2026-12-02", "2026-12-01", True), ("2026-12-01T22", "2026-12-01", False), ("2026-12-01T23", "2026-12-01", True),
    ("2026-12-01", "2026-12-01T05", True), ("2026-12-01T04", "2026-12-01T05", False),
])
def test_watermark_passes_a_partition_only_once_all_of_it_is_consumed(watermark, partition, passed):
    assert watermark_passed(watermark, partition) is passed


def test_data_condition_needs_both_progress_and_partition_when_both_are_given():
    assert data_reached(status(data=data(0.5, "2026-12-01")), 0.5, "2026-12-01").met
    assert not data_reached(status(data=data(0.4, "2026-12-01")), 0.5, "2026-12-01").met
    assert not data_reached(status(data=data(0.9, "2026-11-30")), 0.5, "2026-12-01").met
    check = data_reached(status(data=data(0.3, "2026-11-30")), None, "2026-12-01")
    assert check.line == "data 30% (3/10 tasks), watermark 2026-11-30" and check.impossible is None


def test_data_condition_is_impossible_once_the_job_ended_short_of_it():
    check = data_reached(status("failed", data(0.3, None, "failed")), 0.5, None)
    assert not check.met and "Primus job primus-1: input failed: why" in check.impossible
    assert not check.input_at_fault  # the job failed for another reason: a retry may help
    short = data_reached(status("failed", data(0.3, None, "running")), 0.5, None)
    assert not short.met and "Primus job primus-1 failed: why" in short.impossible
    no_input = data_reached(status("running", None), 0.5, None)
    assert "has no input section" in no_input.impossible
    starting = data_reached(status_summary({"state": "pending"}, [], None), 0.5, None)
    assert not starting.met and starting.impossible is None  # the AM has not reported yet


def test_role_condition_counts_and_defaults_to_all_replicas():
    assert not role_reached(status(running=1), "worker", "running", None).met
    assert role_reached(status(running=2), "worker", "running", None).met
    assert role_reached(status(running=1), "worker", "running", 1).met
    gone = role_reached(status("killed"), "chief", "running", None)
    assert "role chief never appeared" in gone.impossible


def test_primus_placeholders_survive_jinja_and_airflow_templates_render():
    template = "/data/{{YYYY}}{{ MM }}{{DD}}/{{HH}}/x-{{ ds_nodash }}"
    rendered = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(
        keep_partition_placeholders(template)).render(ds_nodash="20261201")
    assert rendered == "/data/{{YYYY}}{{MM}}{{DD}}/{{HH}}/x-20261201"


def test_partition_paths_expand_and_choose_the_filesystem():
    assert expand_partition("/d/{{YYYY}}/{{MM}}/{{DD}}/{{HH}}", "2026-12-01T05") == "/d/2026/12/01/05"
    with pytest.raises(ValueError, match="has an {{HH}} placeholder"):
        expand_partition("/d/{{YYYY}}{{MM}}{{DD}}{{HH}}", "2026-12-01")
    local = PartitionPath.of("file:///d/{{YYYY}}{{MM}}{{DD}}", "2026-12-01", "_SUCCESS", None)
    assert local == PartitionPath("/d/20261201", "/d/20261201/_SUCCESS", None)
    hdfs = PartitionPath.of("hdfs://nn:8020/d/{{YYYY}}{{MM}}{{DD}}/", "2026-12-01", "_SUCCESS", None)
    assert hdfs == PartitionPath("/d/20261201/", "/d/20261201/_SUCCESS", "webhdfs_default")
    no_marker = PartitionPath.of("/d/{{YYYY}}{{MM}}{{DD}}", "2026-12-01", None, "my_webhdfs")
    assert no_marker == PartitionPath("/d/20261201", "/d/20261201", "my_webhdfs")
    with pytest.raises(ValueError, match="scheme 's3' is not supported"):
        PartitionPath.of("s3://b/{{YYYY}}", "2026-12-01", None, None)


def test_data_that_failed_never_meets_a_condition_and_fails_at_once_when_the_input_is_at_fault():
    # A partition holding only _SUCCESS: the watermark passed it, the input failed; the job is still
    # stopping its executors. The sensor must fail now, without retry, not succeed on the watermark.
    failed = {**data(0.0, "2026-12-01", "failed"), "tasks": {"done": 0, "total": 0},
              "failure": "the input has no files: every source and partition is empty"}
    check = data_reached(status("running", failed), None, "2026-12-01")
    assert not check.met and check.input_at_fault
    assert "input failed: the input has no files" in check.impossible


def test_data_progress_is_not_met_while_partitions_are_awaited():
    waiting = {**data(0.0, "2026-12-01"), "progress": None, "progress_of_discovered": 1.0,
               "waiting_for": "/d/20261202/_SUCCESS"}
    check = data_reached(status(data=waiting), 1.0, None)
    assert not check.met and check.impossible is None
    assert "100% of the tasks listed so far" in check.line and "waiting for /d/20261202/_SUCCESS" in check.line


def kafka(lag: int | None, watermark: str | None) -> dict:
    return {"lag": lag, "records_per_s": 10.0, "eta_seconds": None, "watermark": watermark, "progress": None,
            "reachable": True, "unreachable_since": None}


@pytest.mark.parametrize("given,expected", [
    ("2026-12-01", "2026-12-01T00:00:00.000+00:00"), ("2026-12-01T05", "2026-12-01T05:00:00.000+00:00"),
    ("2026-12-01T05:30:00", "2026-12-01T05:30:00.000+00:00"), ("2026-12-01T06:30:00+01:00", "2026-12-01T05:30:00.000+00:00"),
    ("2026-12-01T05:30:00.250Z", "2026-12-01T05:30:00.250+00:00"), (dt.date(2026, 12, 1), "2026-12-01T00:00:00.000+00:00"),
])
def test_watermark_after_is_normalized_to_a_utc_time(given, expected):
    assert normalize_time(given) == expected


def test_a_bad_watermark_after_names_the_value():
    with pytest.raises(ValueError, match="watermark_after must be a time such as 2026-12-01.*got 'yesterday'"):
        normalize_time("yesterday")


def test_max_lag_needs_the_lag_known_and_at_most_it_and_combines_with_the_rest():
    with_kafka = {**data(0.0, None), "progress": None, "kafka": kafka(120, "2026-12-01T05:00:00.000+00:00")}
    assert data_reached(status(data=with_kafka), None, None, max_lag=120).met
    short = data_reached(status(data=with_kafka), None, None, max_lag=119)
    assert not short.met and short.impossible is None and "kafka lag 120 records" in short.line
    unknown = {**with_kafka, "kafka": kafka(None, None)}
    assert not data_reached(status(data=unknown), None, None, max_lag=10**9).met
    after = normalize_time("2026-12-01T05")
    assert data_reached(status(data=with_kafka), None, None, max_lag=120, watermark_after=after).met
    later = normalize_time("2026-12-01T05:00:00.001")
    assert not data_reached(status(data=with_kafka), None, None, max_lag=120, watermark_after=later).met
    ended = data_reached(status("killed", with_kafka), None, None, max_lag=10)
    assert ended.impossible and "data progress stopped at" in ended.impossible


def test_max_lag_on_an_input_without_kafka_is_a_clear_error():
    check = data_reached(status(data=data(0.5, "2026-12-01")), None, None, max_lag=0)
    assert not check.met and not check.input_at_fault
    assert check.impossible == ("Primus job primus-1: max_lag=0 needs an input with a Kafka source (input.kafka); "
                                "this job's input has none")


def test_watermark_after_reads_a_file_watermark_as_the_end_of_its_period():
    day = status(data=data(0.5, "2026-12-01"))
    assert data_reached(day, None, None, watermark_after=normalize_time("2026-12-02")).met  # the whole day is read
    assert not data_reached(day, None, None, watermark_after=normalize_time("2026-12-02T00:00:01")).met
    hour = status(data=data(0.5, "2026-12-01T05"))
    assert data_reached(hour, None, None, watermark_after=normalize_time("2026-12-01T06")).met
    assert not data_reached(hour, None, None, watermark_after=normalize_time("2026-12-01T07")).met
    assert not data_reached(status(data=data(0.5, None)), None, None, watermark_after=normalize_time("2000-01-01")).met
