"""Mistakes in an input that its spec's rules cannot see, met at `primus validate` and at submit
(preflight.py): a source directory that does not exist, partitions missing before a later one."""

from __future__ import annotations

import logging

import pytest
import yaml
from test_cli import primus

from conftest import wait_for
from data.test_data_plane import DAILY, data_spec, write_day
from primus_runtime.spec import SpecError


def write(tmp_path, spec):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("templated", [True, False], ids=["partitions", "one-directory"])
def test_a_source_whose_directory_does_not_exist_is_refused_at_validate_and_submit(tmp_path, home, client,
                                                                                  templated):
    data, out = tmp_path / "dat", tmp_path / "out"  # a typo: the data is in tmp_path / "data"
    write_day(tmp_path / "data", 1)
    spec = data_spec(out, data, replicas=1)  # 2026-12-01..03: over
    if templated:
        expected = f"input.sources[0].path: input path {data} does not exist, got {str(data) + DAILY!r}"
    else:
        spec["input"].update(sources=[{"name": "clicks", "path": str(data)}], time_range=None)
        expected = f"input.sources[0].path: input path {data} does not exist"
    code, out_, err = primus(home, "validate", str(write(tmp_path, spec)))
    assert code == 2 and out_ == "" and f"  {expected}" in err.splitlines(), err
    with pytest.raises(SpecError) as info:
        client.submit(spec)
    assert expected in info.value.problems
    assert client.list() == []


def test_a_source_directory_missing_before_its_time_range_begins_is_only_a_warning(tmp_path, home):
    spec = data_spec(tmp_path / "out", tmp_path / "data", time_range={"start": "2099-01-01", "end": "2099-01-02"})
    code, out, err = primus(home, "validate", str(write(tmp_path, spec)))
    assert code == 0 and "valid" in out
    assert err == (f"primus: warning: input.sources[0].path: input path {tmp_path / 'data'} does not exist yet: "
                   f"the job waits for its first partition (2099-01-01), got {str(tmp_path / 'data') + DAILY!r}\n")


def test_past_partitions_missing_before_a_later_one_are_a_warning_at_validate_and_submit(tmp_path, home, client,
                                                                                       caplog):
    data = tmp_path / "data"
    write_day(data, 2, marker=False)  # day 1 not there, day 2 without its marker
    write_day(data, 3)
    spec = data_spec(tmp_path / "out", data, replicas=1)
    warning = (f"input.sources[0].path: 2 partition(s) missing before 2026-12-03, which is there: 2026-12-01, "
               f"2026-12-02; the job waits at {data / '20261201' / '_SUCCESS'} forever (no input.wait_timeout), "
               f"got {str(data) + DAILY!r}")
    path = write(tmp_path, spec)
    code, out, err = primus(home, "validate", str(path))
    assert code == 0 and "valid" in out and err == f"primus: warning: {warning}\n"
    # Submit says it too, and submits: the partitions may still come.
    code, out, err = primus(home, "submit", str(path))
    assert code == 0 and out.startswith("primus-") and err == f"primus: warning: {warning}\n"
    with caplog.at_level(logging.WARNING, logger="primus.client"):
        app = client.submit(spec)
    assert [r.getMessage() for r in caplog.records if r.name == "primus.client"] == [warning]
    waiting = wait_for(lambda: (d := client.data(app)) is not None and d.waiting_for, 30, "the scan to wait")
    assert waiting == f"source clicks: waiting for {data / '20261201' / '_SUCCESS'}"


def test_a_past_time_range_with_no_partition_there_is_a_warning_naming_the_bound(tmp_path, home):
    data = tmp_path / "data"
    data.mkdir()
    spec = data_spec(tmp_path / "out", data, wait_timeout="10m")
    code, out, err = primus(home, "validate", str(write(tmp_path, spec)))
    assert code == 0 and err == (
        f"primus: warning: input.sources[0].path: none of the 3 partition(s) of time_range 2026-12-01..2026-12-03 "
        f"is there, though all are over; the job waits at {data / '20261201' / '_SUCCESS'} for 600 s "
        f"(input.wait_timeout), then fails, got {str(data) + DAILY!r}\n")


def test_a_complete_input_gets_no_warning(tmp_path, home):
    data = tmp_path / "data"
    for day in (1, 2, 3):
        write_day(data, day)
    code, out, err = primus(home, "validate", str(write(tmp_path, data_spec(tmp_path / "out", data))))
    assert code == 0 and err == ""
