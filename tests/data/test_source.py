"""Partitions of a time range, path templates, and what a directory listing turns into."""

from __future__ import annotations

import asyncio
import itertools

from primus_runtime.data.dispatcher import Dispatcher
from primus_runtime.data.source import Partition, Scanner, _fsspec_for, partitions, readable
from primus_runtime.spec import InputSpec, TimeRange


class Events:
    def __init__(self) -> None:
        self.failed: list[str] = []

    def data_event(self, *args: object) -> None:
        pass

    def data_failed(self, reason: str) -> None:
        self.failed.append(reason)


def test_day_and_hour_partitions_in_time_order():
    days = [p.label for p in partitions(TimeRange(start="2026-12-30", end="2027-01-02"))]
    assert days == ["2026-12-30", "2026-12-31", "2027-01-01", "2027-01-02"]
    hours = [p.label for p in partitions(TimeRange(start="2026-12-31T22", end="2027-01-01T01"), {"hour"})]
    assert hours == ["2026-12-31T22", "2026-12-31T23", "2027-01-01T00", "2027-01-01T01"]
    open_ended = list(itertools.islice(partitions(TimeRange(start="2026-12-01")), 40))
    assert open_ended[-1].label == "2027-01-09"
    assert [p.label for p in partitions(None)] == [""]


def test_a_date_bound_covers_every_hour_of_that_day():
    hours = [p.label for p in partitions(TimeRange(start="2026-12-01", end="2026-12-02"), {"hour"})]
    assert len(hours) == 48 and (hours[0], hours[-1]) == ("2026-12-01T00", "2026-12-02T23")


def test_mixed_partitions_are_ordered_by_start_a_day_before_its_first_hour():
    mixed = [p.label for p in partitions(TimeRange(start="2026-12-01T22", end="2026-12-02T01"), {"day", "hour"})]
    assert mixed == ["2026-12-01", "2026-12-01T22", "2026-12-01T23", "2026-12-02", "2026-12-02T00",
                     "2026-12-02T01"]


def test_templates_are_filled_from_the_partition():
    hour = next(iter(partitions(TimeRange(start="2026-02-03T04"), {"hour"})))
    assert hour.render("/d/{{YYYY}}/{{MM}}{{DD}}/{{HH}}/x") == "/d/2026/0203/04/x"
    assert Partition("", None).render("/d/plain") == "/d/plain"


def test_hidden_temporary_and_marker_files_are_never_read():
    assert [n for n in ("_SUCCESS", "_temporary", ".part.crc", "_logs", "part-0", "a.txt") if readable(n)] == \
        ["part-0", "a.txt"]


def test_a_listing_becomes_ordered_split_tasks(tmp_path):
    (tmp_path / "b.txt").write_bytes(b"x" * 99 + b"\n" + b"y" * 99 + b"\n")  # 200 bytes: 2 tasks of 100
    (tmp_path / "a.txt").write_bytes(b"line\n" * 10)
    (tmp_path / "c.log").write_bytes(b"not matching\n")
    (tmp_path / "d.txt.gz").write_bytes(b"\x1f\x8b" + b"\0" * 50)  # compressed: one whole-file task
    (tmp_path / ".hidden.txt").write_bytes(b"hidden\n")
    (tmp_path / "_SUCCESS").write_bytes(b"")
    (tmp_path / "sub").mkdir()
    spec = InputSpec.model_validate({"sources": [{"name": "s", "path": f"file://{tmp_path}", "pattern": "*.txt*"}],
                                     "task_size": "100B"})
    scanner = Scanner(spec, Dispatcher(spec, Events()))
    fs, path = _fsspec_for(f"file://{tmp_path}")
    tasks = scanner.build_tasks(fs, path, spec.sources[0], Partition("", None))
    assert [t.id for t in tasks] == ["s/a.txt:0", "s/b.txt:0", "s/b.txt:100", "s/d.txt.gz:0"]
    assert [(t.start, t.end) for t in tasks[1:3]] == [(0, 100), (100, 200)]
    assert tasks[3].compression == "gzip" and tasks[0].compression == "none"
    assert tasks[0].url == str(tmp_path / "a.txt")


def test_the_scan_waits_for_markers_and_feeds_partitions_in_order(tmp_path):
    for day in ("20261201", "20261202"):
        (tmp_path / day).mkdir()
        (tmp_path / day / "part-0").write_text("a\nb\n")
    (tmp_path / "20261201" / "_SUCCESS").write_text("")
    spec = InputSpec.model_validate({"sources": [{"name": "s", "path": str(tmp_path) + "/{{YYYY}}{{MM}}{{DD}}"}],
                                     "time_range": {"start": "2026-12-01", "end": "2026-12-02"},
                                     "poll_interval": 0.05})
    events = Events()
    dispatcher = Dispatcher(spec, events)

    async def run() -> list[str | None]:
        scan = asyncio.ensure_future(Scanner(spec, dispatcher).run())
        seen = []
        for _ in range(10):
            await asyncio.sleep(0.05)
            seen.append(dispatcher.waiting_for)
        assert [t.partition for t in dispatcher.tasks.values()] == ["2026-12-01"] and not dispatcher.scan_complete
        (tmp_path / "20261202" / "_SUCCESS").write_text("")
        await asyncio.wait_for(scan, 5)
        return seen

    seen = asyncio.run(run())
    assert any(w and "20261202/_SUCCESS" in w for w in seen)
    assert [t.partition for t in dispatcher.tasks.values()] == ["2026-12-01", "2026-12-02"]
    assert dispatcher.scan_complete and not events.failed


def test_a_waiting_partition_holds_back_later_partitions_of_every_source(tmp_path):
    """Day 2 of the daily source has no marker yet: the hourly source's hours of day 2 are not read
    before it (partitions are consumed in time order across sources)."""
    for day, hours in (("20261201", ("22", "23")), ("20261202", ("00", "01"))):
        (tmp_path / "d" / day).mkdir(parents=True)
        (tmp_path / "d" / day / "part-0").write_text("a\n")
        for hour in hours:
            (tmp_path / "h" / day / hour).mkdir(parents=True)
            (tmp_path / "h" / day / hour / "part-0").write_text("b\n")
            (tmp_path / "h" / day / hour / "_SUCCESS").write_text("")
    (tmp_path / "d" / "20261201" / "_SUCCESS").write_text("")
    spec = InputSpec.model_validate({
        "sources": [{"name": "daily", "path": str(tmp_path / "d") + "/{{YYYY}}{{MM}}{{DD}}"},
                    {"name": "hourly", "path": str(tmp_path / "h") + "/{{YYYY}}{{MM}}{{DD}}/{{HH}}"}],
        "time_range": {"start": "2026-12-01T22", "end": "2026-12-02T01"}, "poll_interval": 0.05})
    dispatcher = Dispatcher(spec, Events())

    async def run() -> str | None:
        scan = asyncio.ensure_future(Scanner(spec, dispatcher).run())
        await asyncio.sleep(0.5)
        waiting = dispatcher.waiting_for
        assert [t.partition for t in dispatcher.tasks.values()] == [
            "2026-12-01", "2026-12-01T22", "2026-12-01T23"]
        (tmp_path / "d" / "20261202" / "_SUCCESS").write_text("")
        await asyncio.wait_for(scan, 5)
        return waiting

    waiting = asyncio.run(run())
    assert waiting is not None and "source daily" in waiting and "20261202/_SUCCESS" in waiting
    assert [(t.source, t.partition) for t in dispatcher.tasks.values()] == [
        ("daily", "2026-12-01"), ("hourly", "2026-12-01T22"), ("hourly", "2026-12-01T23"),
        ("daily", "2026-12-02"), ("hourly", "2026-12-02T00"), ("hourly", "2026-12-02T01")]


def test_wait_timeout_counts_from_the_end_of_a_partition_not_over_yet(tmp_path):
    """A partition whose day has not ended cannot be complete: waiting for it is no mistake, and
    input.wait_timeout starts counting only once its day is over (UTC)."""
    spec = InputSpec.model_validate({"sources": [{"name": "s", "path": str(tmp_path) + "/{{YYYY}}{{MM}}{{DD}}"}],
                                     "time_range": {"start": "2099-01-01", "end": "2099-01-01"},
                                     "poll_interval": 0.05, "wait_timeout": 0.1})
    events = Events()
    dispatcher = Dispatcher(spec, events)

    async def run() -> None:
        scan = asyncio.ensure_future(Scanner(spec, dispatcher).run())
        await asyncio.sleep(0.5)  # several wait_timeouts, several polls
        assert not scan.done()
        scan.cancel()

    asyncio.run(run())
    assert not events.failed and dispatcher.failure is None
    assert dispatcher.waiting_for == f"source s: waiting for {tmp_path}/20990101/_SUCCESS"


def test_a_source_without_a_time_range_whose_path_is_missing_fails_the_scan(tmp_path):
    """The AM's own check (submit refuses such a path first; it may go away after)."""
    spec = InputSpec.model_validate({"sources": [{"name": "s", "path": str(tmp_path / "nowhere")}]})
    events = Events()
    asyncio.run(Scanner(spec, Dispatcher(spec, events)).run())
    assert events.failed == [f"input: scanning failed: FileNotFoundError: source s: input path "
                             f"{tmp_path / 'nowhere'} does not exist"]
