"""The job spec's `input` section: strict types, errors naming the path and the value."""

from __future__ import annotations

import pytest

from primus_runtime.spec import JobSpec, SpecError

WORKER = {"name": "worker", "command": "python train.py", "consumes_input": True}
DAILY = {"name": "clicks", "path": "/data/clicks/{{YYYY}}{{MM}}{{DD}}/"}
HOURLY = {"name": "views", "path": "/data/views/{{YYYY}}{{MM}}{{DD}}/{{HH}}/"}


def spec_with(**input_section):
    return {"name": "job", "roles": [dict(WORKER)], "input": input_section}


DAYS = {"start": "2026-12-01", "end": "2026-12-03"}

BAD_INPUTS = [
    (spec_with(sources=[{**DAILY, "path": "/data/{{YYYY}}{{MONTH}}/"}], time_range=DAYS),
     "input.sources[0].path: unknown template {{MONTH}}"),
    (spec_with(sources=[{**DAILY, "path": "/data/{YYYY}/"}], time_range=DAYS),
     "input.sources[0].path: unbalanced braces"),
    (spec_with(sources=[{**DAILY, "path": "data/clicks/"}]), "must be an absolute path or a file:// URL"),
    (spec_with(sources=[{**DAILY, "path": "s3://bucket/clicks/"}]),
     "input.sources[0].path: only local paths, file://, hdfs:// and webhdfs://host:port URLs are readable, "
     "got 's3://bucket/clicks/'"),
    (spec_with(sources=[{**DAILY, "path": "webhdfs:///clicks/{{YYYY}}{{MM}}{{DD}}"}], time_range=DAYS),
     "input.sources[0].path: webhdfs:// URLs name the NameNode's HTTP address: webhdfs://host:port/path"),
    (spec_with(sources=[{**DAILY, "path": "hdfs://nn:8020"}]), "input.sources[0].path: needs an absolute path"),
    (spec_with(sources=[DAILY], time_range=DAYS, work_preserve_dir="hdfs:///wp/manual__2026-12-01T00:00:00+00:00"),
     "input.work_preserve_dir: HDFS refuses ':' in file and directory names"),
    (spec_with(sources=[DAILY], time_range=DAYS, restore_from="gs://bucket/savepoint"),
     "input.restore_from: only local paths, file://, hdfs:// and webhdfs://host:port URLs are readable"),
    (spec_with(sources=[{**DAILY, "format": "csv"}], time_range=DAYS),
     "input.sources[0].format: must be one of 'text', 'jsonl', 'raw', 'tfrecord', 'length_delimited' or "
     "'parquet', got 'csv'"),
    (spec_with(sources=[{**DAILY, "compression": "lz4"}], time_range=DAYS), "input.sources[0].compression: must be"),
    (spec_with(sources=[DAILY], time_range={"start": "2026-12-03", "end": "2026-12-01"}),
     "input.time_range.end: must not be before start (2026-12-03), got '2026-12-01'"),
    (spec_with(sources=[DAILY], time_range={"start": "2026-13-01"}),
     "input.time_range.start: must be a date YYYY-MM-DD or an hour YYYY-MM-DDTHH, got '2026-13-01'"),
    (spec_with(sources=[DAILY], time_range={**DAYS, "granularity": "week"}), "input.time_range.granularity"),
    (spec_with(sources=[DAILY]), "input.sources[0].path: holds templates but the input has no time_range"),
    (spec_with(sources=[{**DAILY, "path": "/data/clicks/"}], time_range=DAYS),
     "input.sources[0].path: a time_range needs {{YYYY}}{{MM}}{{DD}} templates"),
    (spec_with(sources=[DAILY], time_range={**DAYS, "granularity": "hour"}),
     "input.time_range.granularity: deprecated, each source has its own; remove it (sources[0] is by day: "
     "'/data/clicks/{{YYYY}}{{MM}}{{DD}}/'), got 'hour'"),
    (spec_with(sources=[DAILY, HOURLY], time_range={**DAYS, "granularity": "day"}),
     "input.time_range.granularity: deprecated, each source has its own; remove it (sources[1] is by hour"),
    (spec_with(sources=[DAILY, {**HOURLY, "granularity": "day"}], time_range=DAYS),
     "input.sources[1].path: a daily source (granularity: day) cannot fill in {{HH}}; make it hourly "
     "(granularity: hour) or drop {{HH}}, got '/data/views/{{YYYY}}{{MM}}{{DD}}/{{HH}}/'"),
    (spec_with(sources=[{**DAILY, "granularity": "hour"}], time_range=DAYS),
     "input.sources[0].path: an hourly source (granularity: hour) needs {{HH}} in its path (else every hour "
     "reads the same directory), got '/data/clicks/{{YYYY}}{{MM}}{{DD}}/'"),
    (spec_with(sources=[{**HOURLY, "path": "/data/views/{{YYYY}}{{MM}}/{{HH}}"}], time_range=DAYS),
     "input.sources[0].path: hour partitions need the templates ['DD', 'HH', 'MM', 'YYYY']"),
    (spec_with(sources=[{**DAILY, "granularity": "week"}], time_range=DAYS),
     "input.sources[0].granularity: must be one of 'day' or 'hour', got 'week'"),
    (spec_with(sources=[DAILY], time_range=DAYS, task_size=4096),
     "input.task_size: give a unit, e.g. '512Mi', '4Gi', '64Mi', '1G' or '100k' (a bare number is refused: MiB "
     "or bytes?), got 4096"),
    (spec_with(sources=[DAILY, DAILY], time_range=DAYS), "input.sources: duplicate source names ['clicks']"),
    (spec_with(sources=[]), "input.sources: give file sources, a kafka source, or both"),
    (spec_with(sources=[DAILY], time_range=DAYS, task_size="lots"), "input.task_size: must be a size"),
    (spec_with(sources=[DAILY], time_range=DAYS, max_task_attempts=0), "input.max_task_attempts: must be >= 1, got 0"),
    (spec_with(sources=[DAILY], time_range=DAYS, on_bad_data="ignore"), "input.on_bad_data: must be one of"),
    (spec_with(sources=[DAILY], time_range=DAYS, delivery="exactly"), "input.delivery: must be one of"),
    (spec_with(sources=[DAILY], time_range=DAYS, work_preserve_dir="relative/dir"),
     "input.work_preserve_dir: must be an absolute path"),
    (spec_with(sources=[{**DAILY, "success_marker": "a/b"}], time_range=DAYS),
     "input.sources[0].success_marker: must be a file name without '/'"),
    (spec_with(sources=[DAILY], time_range=DAYS, colour="red"), "input.colour: unknown field, got 'red'"),
    ({"name": "job", "roles": [{"name": "worker", "command": "x"}],
      "input": {"sources": [DAILY], "time_range": DAYS}}, "input: no role has consumes_input: true"),
    ({"name": "job", "roles": [WORKER]}, "roles: a role consumes_input but the job has no `input` section"),
]


@pytest.mark.parametrize("data,expected", BAD_INPUTS, ids=[e[:40] for _, e in BAD_INPUTS])
def test_bad_input_is_rejected_naming_the_path_and_value(data, expected):
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict(data)
    assert expected in str(info.value), str(info.value)


def test_input_defaults_and_round_trip():
    spec = JobSpec.from_dict(spec_with(sources=[DAILY], time_range={"start": "2026-12-01", "end": None},
                                       task_size="1Mi", work_preserve_dir="file:///tmp/wp"))
    assert spec.input is not None
    source = spec.input.sources[0]
    assert (source.pattern, source.success_marker, source.format, source.compression) == ("*", "_SUCCESS", "text",
                                                                                         "auto")
    assert spec.input.task_size == 2**20 and spec.input.max_tasks_per_executor == 1 and spec.input.prefetch == 1
    assert spec.input.max_task_attempts == 3 and spec.input.on_bad_data == "fail"
    assert spec.input.time_range is not None and spec.input.time_range.end is None
    assert JobSpec.model_validate_json(spec.to_json()) == spec
    assert "InputSpec" in str(JobSpec.json_schema())


def test_hdfs_and_webhdfs_urls_are_accepted_for_sources_and_progress_dirs():
    spec = JobSpec.from_dict(spec_with(sources=[{**DAILY, "path": "hdfs:///logs/{{YYYY}}{{MM}}{{DD}}/"},
                                                {**DAILY, "name": "views",
                                                 "path": "webhdfs://nn:9870/views/{{YYYY}}{{MM}}{{DD}}"}],
                                       time_range=DAYS, work_preserve_dir="hdfs://nn:8020/jobs/x/progress",
                                       restore_from="webhdfs://nn:9870/savepoints/1"))
    assert spec.input is not None
    assert [s.path for s in spec.input.sources] == ["hdfs:///logs/{{YYYY}}{{MM}}{{DD}}/",
                                                    "webhdfs://nn:9870/views/{{YYYY}}{{MM}}{{DD}}"]
    assert spec.input.work_preserve_dir == "hdfs://nn:8020/jobs/x/progress"


def test_yaml_dates_are_accepted():
    import datetime

    spec = JobSpec.from_dict(spec_with(sources=[{**DAILY, "path": "file:///d/{{YYYY}}{{MM}}{{DD}}/{{HH}}"}],
                                       time_range={"start": datetime.date(2026, 12, 1), "end": "2026-12-01T05"},
                                       task_size="4Ki"))
    assert spec.input is not None and spec.input.time_range is not None
    assert spec.input.time_range.start == "2026-12-01" and spec.input.task_size == 4096


def test_daily_and_hourly_sources_mix_each_with_the_granularity_of_its_path():
    spec = JobSpec.from_dict(spec_with(sources=[DAILY, HOURLY], time_range=DAYS))
    assert spec.input is not None
    assert [s.granularity for s in spec.input.sources] == ["day", "hour"]
    assert JobSpec.model_validate_json(spec.to_json()) == spec


def test_a_deprecated_time_range_granularity_that_agrees_with_the_sources_is_accepted():
    spec = JobSpec.from_dict(spec_with(sources=[HOURLY], time_range={**DAYS, "granularity": "hour"}))
    assert spec.input is not None and spec.input.sources[0].granularity == "hour"


def test_an_hour_start_before_a_date_end_on_the_same_day_is_a_valid_range():
    spec = JobSpec.from_dict(spec_with(sources=[HOURLY], time_range={"start": "2026-12-01T05", "end": "2026-12-01"}))
    assert spec.input is not None and spec.input.time_range is not None
    assert [h.hour for h in spec.input.time_range.hours()] == [5, 23]


def test_spec_formats_match_the_readers():
    formats = pytest.importorskip("primus_runtime.data.formats")
    from primus_runtime.spec import FORMATS

    assert tuple(FORMATS) == tuple(formats.FORMATS)


def test_relative_input_paths_in_a_spec_file_are_taken_from_its_directory(tmp_path):
    (tmp_path / "job.yaml").write_text(
        "name: job\nroles: [{name: worker, command: x, consumes_input: true}]\n"
        "input:\n  sources: [{name: c, path: 'data/{{YYYY}}{{MM}}{{DD}}/'}]\n"
        "  time_range: {start: 2026-12-01, end: 2026-12-02}\n  work_preserve_dir: progress\n")
    spec = JobSpec.from_file(tmp_path / "job.yaml")
    assert spec.input is not None
    assert spec.input.sources[0].path == str(tmp_path.resolve() / "data/{{YYYY}}{{MM}}{{DD}}") + "/"
    assert spec.input.work_preserve_dir == str(tmp_path.resolve() / "progress")
    assert spec.input.time_range is not None and spec.input.time_range.start == "2026-12-01"
