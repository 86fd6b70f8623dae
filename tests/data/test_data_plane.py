"""The data plane end to end: real AM, executors and trainers on the local backend.

The trainer (tests/data/consumer.py) appends every line it reads to a file of its own,
so a test sees exactly what reached trainers, duplicates included.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import make_spec, wait_for
from primus_runtime.data.journal import TaskJournal

CONSUMER = str(Path(__file__).with_name("consumer.py"))
DAILY = "/{{YYYY}}{{MM}}{{DD}}/"


def write_day(data: Path, day: int, files: int = 2, lines: int = 300, marker: bool = True,
              prefix: str = "") -> list[str]:
    """Day ``day`` of December 2026: ``files`` text files of ``lines`` numbered lines; the lines."""
    directory = data / f"202612{day:02d}"
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for f in range(files):
        rows = [f"{prefix}d{day:02d}-f{f}-{i:05d}" for i in range(lines)]
        (directory / f"part-{f}.txt").write_text("\n".join(rows) + "\n")
        written += rows
    (directory / ".hidden").write_text("never read\n")
    (directory / "_temporary").mkdir(exist_ok=True)
    if marker:
        (directory / "_SUCCESS").write_text("")
    return written


def consumed(out: Path) -> dict[str, list[str]]:
    """File name -> the lines that trainer read."""
    return {f.name: f.read_text().split() for f in sorted(out.iterdir())
            if not f.name.startswith(("restore-", "batch-"))}


def committed_lines(client, app: str, out: Path) -> list[str]:
    """Exactly-once: the records in every checkpoint a trainer committed (commits.jsonl of each executor)."""
    job_dir = client.cluster("local").job(app).path
    names = [json.loads(line)["checkpoint"] for f in job_dir.glob("executors/*/attempt-*/commits.jsonl")
             for line in f.read_text().splitlines()]
    return [line for name in names for line in (out / f"batch-{name}.txt").read_text().split()]


def all_lines(out: Path) -> list[str]:
    return [line for lines in consumed(out).values() for line in lines]


def data_spec(out: Path, data: Path, replicas: int = 2, env: dict[str, str] | None = None,
              **input_section: Any) -> dict[str, Any]:
    section: dict[str, Any] = {"sources": [{"name": "clicks", "path": str(data) + DAILY}],
                               "time_range": {"start": "2026-12-01", "end": "2026-12-03"},
                               "task_size": "2000B", "poll_interval": 0.2}
    section.update(input_section)
    return make_spec([{"name": "worker", "replicas": replicas, "consumes_input": True,
                       "command": [sys.executable, CONSUMER], "env": {"OUT_DIR": str(out), **(env or {})}}],
                     input=section)


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "out"
    out.mkdir()
    return tmp_path / "data", out


def test_every_line_is_consumed_once_in_partition_order(client, dirs):
    data, out = dirs
    expected = [line for day in (1, 2, 3) for line in write_day(data, day)]
    app = client.submit(data_spec(out, data))
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded", status.job
    assert sorted(all_lines(out)) == sorted(expected)  # each line exactly once
    for name, lines in consumed(out).items():
        assert lines == sorted(lines), f"{name} read out of partition order"
    info = status.data
    assert info.state == "succeeded" and info.progress == 1.0 and info.watermark == "2026-12-03"
    assert info.tasks["done"] == info.tasks["total"] > 3 and info.records_done == len(expected)
    assert info.bytes["done"] == info.bytes["total"] and info.scan_complete


def test_a_partition_is_read_only_after_its_marker(client, dirs):
    data, out = dirs
    first = write_day(data, 1)
    second = write_day(data, 2, marker=False)  # files there, marker not yet
    app = client.submit(data_spec(out, data, replicas=1, time_range={"start": "2026-12-01", "end": None}))
    info = wait_for(lambda: (d := client.data(app)) and d.watermark == "2026-12-01" and d, 30, "day 1 consumed")
    assert "20261202/_SUCCESS" in (info.waiting_for or "")
    # Day 1 is read, day 2 awaited: no share of the whole input is claimed, only of what is listed.
    assert info.progress is None and info.progress_of_discovered == 1.0
    # Time passing is what is tested: five scan polls (poll_interval 0.2 s) while day 2 has no marker
    # read nothing of it.
    time.sleep(1.0)
    assert sorted(all_lines(out)) == sorted(first)
    (data / "20261202" / "_SUCCESS").write_text("")
    wait_for(lambda: (d := client.data(app)) is not None and d.watermark == "2026-12-02", 30, "day 2 consumed")
    third = write_day(data, 3)  # the open range keeps polling for new partitions
    wait_for(lambda: (d := client.data(app)) is not None and d.watermark == "2026-12-03", 30, "day 3 consumed")
    lines = all_lines(out)
    assert sorted(lines) == sorted(first + second + third) and lines == sorted(lines)
    client.succeed(app, "test done")
    assert client.wait(app, timeout=30).job.state == "succeeded"


def write_partition(directory: Path, key: str, lines: int) -> list[str]:
    """One part file of ``lines`` lines named ``key-00000``..., and the success marker."""
    directory.mkdir(parents=True)
    rows = [f"{key}-{i:05d}" for i in range(lines)]
    (directory / "part-0.txt").write_text("\n".join(rows) + "\n")
    (directory / "_SUCCESS").write_text("")
    return rows


def test_daily_and_hourly_sources_are_read_together_in_time_order(client, dirs):
    data, out = dirs
    expected = []
    for day in ("20200102", "20200103", "20200104"):
        # Keys sort in reading order: day D ("a") before its hours ("h00".."h23"), before day D+1.
        expected += write_partition(data / "daily" / day, f"{day}-a", 200)
        for hour in range(24):
            expected += write_partition(data / "hourly" / day / f"{hour:02d}", f"{day}-h{hour:02d}", 20)
    spec = data_spec(out, data, sources=[{"name": "daily", "path": str(data / "daily") + DAILY},
                                         {"name": "hourly", "path": str(data / "hourly") + DAILY + "{{HH}}/"}],
                     time_range={"start": "2020-01-02", "end": "2020-01-04"}, poll_interval=0.05)
    app = client.submit(spec)
    status = client.wait(app, timeout=90)
    assert status.job.state == "succeeded", status.job
    assert sorted(all_lines(out)) == sorted(expected)  # every hour of every day, each line once
    for name, lines in consumed(out).items():
        assert lines == sorted(lines), f"{name} read out of time order"
    assert status.data.watermark == "2020-01-04T23"


def test_trainers_dying_mid_task_lose_nothing(client, dirs):
    data, out = dirs
    expected = [line for day in (1, 2) for line in write_day(data, day, lines=400)]
    spec = data_spec(out, data, env={"DIE_AFTER": "150", "DIE_ON_ATTEMPTS": "0,1,2"},
                     time_range={"start": "2026-12-01", "end": "2026-12-02"}, max_task_attempts=10)
    spec["roles"][0]["failover"] = {"max_failures_per_index": 5}
    app = client.submit(spec)
    status = client.wait(app, timeout=90)
    assert status.job.state == "succeeded", status.job
    assert sum(r.restarts for r in status.roles) == 6  # 2 workers x 3 deaths
    lines = all_lines(out)
    assert set(lines) == set(expected)  # at least once
    assert len(lines) < 3 * len(expected)  # duplicates bounded by what was fed since the last report
    assert status.data.tasks["done"] == status.data.tasks["total"]
    assert any(e.to_state == "requeued" for e in status.events)


def test_exactly_once_delivers_every_record_once_across_trainer_deaths(client, dirs):
    data, out = dirs
    expected = [line for day in (1, 2) for line in write_day(data, day, lines=400)]
    # Each trainer commits every 100 records and dies 50 records after its second commit, twice.
    spec = data_spec(out, data, env={"COMMIT_EVERY": "100", "DIE_AFTER": "250", "DIE_ON_ATTEMPTS": "0,1"},
                     time_range={"start": "2026-12-01", "end": "2026-12-02"}, max_task_attempts=10,
                     delivery="exactly_once")
    spec["roles"][0]["failover"] = {"max_failures_per_index": 5}
    app = client.submit(spec)
    status = client.wait(app, timeout=90)
    assert status.job.state == "succeeded", status.job
    assert sum(r.restarts for r in status.roles) == 4
    assert sorted(committed_lines(client, app, out)) == sorted(expected)  # every record, each exactly once
    restored = {"-".join(f.name.split("-")[2:4]): f.read_text() for f in out.glob("restore-*")}
    assert restored["0-0"] == "none"
    assert restored["0-1"].startswith("ckpt-0-") and restored["0-1"].endswith("-200")
    assert restored["0-2"].startswith("ckpt-1-") and restored["0-2"].endswith("-200")


def test_exactly_once_survives_trainers_killed_at_random_points(client, dirs):
    data, out = dirs
    expected = [line for day in (1, 2) for line in write_day(data, day, lines=3000)]
    spec = data_spec(out, data, env={"COMMIT_EVERY": "300", "SLEEP_EVERY": "500", "SLEEP": "0.05"},
                     time_range={"start": "2026-12-01", "end": "2026-12-02"}, max_task_attempts=10,
                     task_size="8Ki", delivery="exactly_once")
    spec["roles"][0]["failover"] = {"max_failures_per_index": 5}
    app = client.submit(spec)
    killed: set[int] = set()

    def reading_trainer() -> int | None:
        for f in out.glob("restore-*"):
            pid = int(f.stem.rsplit("-", 1)[1])
            if pid not in killed and list(out.glob(f"batch-*-{pid}-*")):
                return pid
        return None

    for _ in range(3):
        pid = wait_for(reading_trainer, 30, "a trainer that committed")
        # Not a synchronisation: each kill comes a little later in the trainer's reading (0, 0.1, 0.2 s
        # after its first commit), so the three interrupt it at different points.
        time.sleep(0.1 * len(killed))
        os.kill(pid, signal.SIGKILL)
        killed.add(pid)
    status = client.wait(app, timeout=90)
    assert status.job.state == "succeeded", status.job
    assert sum(r.restarts for r in status.roles) == 3
    assert sorted(committed_lines(client, app, out)) == sorted(expected)


def test_trainers_killed_from_outside_lose_nothing(client, dirs):
    data, out = dirs
    expected = [line for day in (1, 2) for line in write_day(data, day, lines=3000)]
    spec = data_spec(out, data, env={"SLEEP_EVERY": "500", "SLEEP": "0.05"}, task_size="8Ki",
                     time_range={"start": "2026-12-01", "end": "2026-12-02"}, max_task_attempts=10)
    spec["roles"][0]["failover"] = {"max_failures_per_index": 5}
    app = client.submit(spec)
    killed: set[int] = set()

    def reading_trainer() -> int | None:
        for f in out.iterdir():
            pid = int(f.stem.rsplit("-", 1)[1])
            if pid not in killed and f.stat().st_size > 2000:
                return pid
        return None

    for _ in range(3):  # SIGKILL a trainer in the middle of its tasks, three times
        pid = wait_for(reading_trainer, 30, "a trainer reading")
        os.kill(pid, signal.SIGKILL)
        killed.add(pid)
    status = client.wait(app, timeout=90)
    assert status.job.state == "succeeded", status.job
    assert sum(r.restarts for r in status.roles) == 3
    assert set(all_lines(out)) == set(expected)


def test_scaling_a_consuming_role_down_hands_its_tasks_to_the_others(client, dirs):
    data, out = dirs
    expected = [line for day in (1, 2) for line in write_day(data, day, lines=2500)]
    app = client.submit(data_spec(out, data, replicas=2, env={"SLEEP_EVERY": "250", "SLEEP": "0.2"},
                                  time_range={"start": "2026-12-01", "end": "2026-12-02"}, task_size="8Ki"))
    wait_for(lambda: (d := client.data(app)) is not None and d.tasks.get("running", 0) >= 2, 30, "both workers reading")
    # worker-1 (the one scaled down) has read records of its tasks: it hands back tasks begun, not only
    # tasks assigned.
    wait_for(lambda: any(f.name.startswith("worker-1-") and f.stat().st_size > 0 for f in out.iterdir()), 30,
             "worker-1 reading")
    client.scale(app, "worker", 1)
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded", status.job
    assert set(all_lines(out)) == set(expected)
    status = client.cluster("local").final_status(app)  # every event, not only the API's latest 50
    dropped = next(e for e in status["events"] if e["subject"] == "worker-1" and e["to_state"] == "stopped")
    assert "scaled down" in dropped["reason"]
    assert any(e["to_state"] == "requeued" and "worker-1 stopped" in e["reason"] for e in status["events"])


@pytest.mark.parametrize("stop", ["kill", "crash"])
def test_a_resubmitted_job_resumes_mid_file_from_the_work_preserve_dir(client, dirs, tmp_path, stop):
    data, out = dirs
    small = write_day(data, 1, files=1, lines=100, prefix="a")  # part-0.txt: done in the first run
    directory = data / "20261201"
    big = [f"b{i:06d}" for i in range(40000)]  # part-1.txt: about 320 KB, one task
    (directory / "part-1.txt").write_text("\n".join(big) + "\n")
    spec = data_spec(out, data, replicas=1, env={"SLEEP_EVERY": "2000", "SLEEP": "0.3"},
                     time_range={"start": "2026-12-01", "end": "2026-12-01"}, task_size="1Mi",
                     work_preserve_dir=str(tmp_path / "preserve"))
    app = client.submit(spec)
    if stop == "kill":  # a graceful stop: the AM writes the journal on its way out
        wait_for(lambda: (d := client.data(app)) is not None and d.records_done > len(small) + 2000, 60,
                 "part of the big file read")
        first = client.kill(app)
        assert first.job.state == "killed" and first.data.state == "running"  # resumable, not failed
        assert len(small) + 2000 < first.data.records_done < len(small) + len(big)
    else:  # SIGKILL to the AM and everything else, once the journal holds a position in the big file
        big_task = "clicks/2026-12-01/part-1.txt:0"

        def journaled() -> bool:
            state = TaskJournal(tmp_path / "preserve").recover()
            return state.get(big_task, {}).get("records", 0) > 2000

        wait_for(journaled, 60, "a position in the big file journaled")
        client.cluster("local").force_kill(app)
    before = set(all_lines(out))
    for f in out.iterdir():
        f.rename(f.with_name("first-" + f.name))

    spec["roles"][0]["env"] = {"OUT_DIR": str(out)}  # full speed this time
    again = client.submit(spec)
    status = client.wait(again, timeout=60)
    assert status.job.state == "succeeded", status.job
    second = [line for name, lines in consumed(out).items() if not name.startswith("first-") for line in lines]
    assert not set(small) & set(second), "a task done in the first run was read again"
    assert second[0] != big[0] and second[0] in big, "the big file did not resume mid-file"
    assert before | set(second) == set(small) | set(big)
    assert status.data.records_done == len(small) + len(big)


@pytest.mark.parametrize("policy", ["quarantine", "fail"])
def test_corrupt_file_follows_the_bad_data_policy(client, dirs, policy):
    data, out = dirs
    good = write_day(data, 1, files=1)
    (data / "20261201" / "part-9.txt.gz").write_bytes(b"this is not gzip data at all\n" * 10)
    spec = data_spec(out, data, replicas=1, time_range={"start": "2026-12-01", "end": "2026-12-01"},
                     on_bad_data=policy, max_task_attempts=2)
    app = client.submit(spec)
    status = client.wait(app, timeout=60)
    bad_task = "clicks/2026-12-01/part-9.txt.gz:0"
    if policy == "quarantine":
        assert status.job.state == "succeeded", status.job
        assert status.data.quarantined == [bad_task] and status.data.tasks["quarantined"] == 1
        assert sorted(all_lines(out)) == sorted(good)
        assert any(e.subject == f"task/{bad_task}" and e.to_state == "quarantined" for e in status.events)
    else:
        assert status.job.state == "failed"
        reason = status.job.reason
        assert bad_task in reason and str(data / "20261201" / "part-9.txt.gz") in reason, reason
        assert status.data.state == "failed"


def test_status_progress_and_suspend_resume(client, dirs):
    from primus_runtime.cli import main as cli

    data, out = dirs
    expected = [line for day in (1, 2, 3) for line in write_day(data, day, lines=2500)]
    app = client.submit(data_spec(out, data, replicas=1, env={"SLEEP_EVERY": "250", "SLEEP": "0.1"},
                                  max_tasks_per_executor=1, prefetch=0, task_size="16Ki"))
    wait_for(lambda: (d := client.data(app)) is not None and d.tasks.get("running", 0) > 0, 30, "reading started")
    suspended = client.data_suspend(app)
    assert suspended.state == "suspended"
    # What the executor held drains; nothing new is handed out.
    held = wait_for(lambda: (d := client.data(app)).tasks["running"] == 0 and d, 30, "held tasks drained")
    # Time passing is what is tested: a second of heartbeats (0.25 s apart, each asking for tasks)
    # while suspended hands nothing out.
    time.sleep(1.0)
    still = client.data(app)
    assert still.tasks["done"] == held.tasks["done"] and still.tasks["queued"] > 0
    assert 0 < still.progress < 1 and still.bytes["done"] < still.bytes["total"]
    assert still.scan_complete and (still.eta_seconds is None or still.eta_seconds >= 0)
    assert still.rate_bytes_per_s >= 0 and still.watermark in (None, "2026-12-01", "2026-12-02")
    assert client.status(app).data is not None and "suspended" in client.status(app).data.state
    from primus_runtime.client import progress_line

    assert "data " in progress_line(client.status(app)) and "suspended" in progress_line(client.status(app))
    assert cli(["--home", str(client.cluster("local").home), "data", "resume", app]) == 0
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded", status.job
    assert sorted(all_lines(out)) == sorted(expected)
    assert status.data.progress == 1.0 and status.data.watermark == "2026-12-03"
    events = [e for e in status.events if e.subject == "data"]
    assert [e.to_state for e in events][:2] == ["suspended", "running"]


@pytest.mark.parametrize("fmt", ["tfrecord", "length_delimited", "jsonl"])
def test_framed_formats_reach_the_trainer_record_by_record(client, dirs, fmt):
    from primus_runtime.data.records import write_records

    data, out = dirs
    expected = []
    for day in (1, 2):
        directory = data / f"202612{day:02d}"
        directory.mkdir(parents=True)
        for f in range(2):
            rows = [f'{{"id": "{fmt}-{day}-{f}-{i:04d}"}}'.encode() for i in range(400)]
            with open(directory / f"part-{f}.rec", "wb") as out_file:
                write_records(out_file, rows, fmt)
            expected += [r.decode() for r in rows]
        (directory / "_SUCCESS").write_text("")
    spec = data_spec(out, data, time_range={"start": "2026-12-01", "end": "2026-12-02"}, task_size="4Ki")
    spec["input"]["sources"][0]["format"] = fmt
    status = client.wait(client.submit(spec), timeout=60)
    assert status.job.state == "succeeded", status.job
    got = [line for f in sorted(out.iterdir()) for line in f.read_text().splitlines()]
    assert sorted(got) == sorted(expected)  # every record once, none cut at a split boundary
    assert status.data.tasks["total"] > 4


def test_a_trainer_that_does_not_exit_after_its_input_is_stopped_after_exit_grace(client, dirs):
    data, out = dirs
    write_day(data, 1, files=1, lines=50)
    spec = data_spec(out, data, replicas=1, time_range={"start": "2026-12-01", "end": "2026-12-01"},
                     exit_grace="1s")
    spec["roles"][0]["command"] = "cat > /dev/null; sleep 60"
    spec["roles"][0]["failover"] = {"max_failures_per_index": 0}
    status = client.wait(client.submit(spec), timeout=30)
    assert status.job.state == "failed"
    assert "did not exit within 1s of the end of its input" in status.job.reason, status.job


def test_a_job_without_input_has_no_data(client):
    app = client.submit(make_spec([{"name": "worker", "command": "true"}]))
    status = client.wait(app, timeout=30)
    assert status.data is None


def test_a_partition_awaited_longer_than_wait_timeout_fails_the_job_naming_its_marker(client, dirs):
    data, out = dirs
    first = write_day(data, 1)
    write_day(data, 2, marker=False)  # day 2's files are there, its marker never comes
    write_day(data, 3)
    status = client.wait(client.submit(data_spec(out, data, replicas=1, wait_timeout="1s")), timeout=60)
    awaited = data / "20261202" / "_SUCCESS"
    assert status.job.state == "failed", status.job
    assert status.job.reason == f"input: waited 1 s for {awaited} (source clicks, input.wait_timeout 1)"
    assert status.data.state == "failed"
    # Nothing after the missing partition was read (the job may end before day 1 is read through).
    assert set(all_lines(out)) <= set(first)


def test_an_empty_input_fails_the_job_with_a_clear_error(client, dirs):
    data, out = dirs
    for day in (1, 2):
        (data / f"202612{day:02d}").mkdir(parents=True)
        (data / f"202612{day:02d}" / "_SUCCESS").write_text("")
    status = client.wait(client.submit(data_spec(out, data, replicas=1,
                                                 time_range={"start": "2026-12-01", "end": "2026-12-02"})),
                         timeout=30)
    assert status.job.state == "failed"
    assert "the input has no files" in status.job.reason, status.job


def test_savepoint_and_restore_round_trip(client, dirs, tmp_path):
    from primus_runtime.cli import main as cli

    data, out = dirs
    small = write_day(data, 1, files=1, lines=100, prefix="a")
    big = [f"b{i:06d}" for i in range(40000)]
    (data / "20261201" / "part-1.txt").write_text("\n".join(big) + "\n")
    spec = data_spec(out, data, replicas=1, env={"SLEEP_EVERY": "2000", "SLEEP": "0.3"},
                     time_range={"start": "2026-12-01", "end": "2026-12-01"}, task_size="1Mi")
    app = client.submit(spec)
    wait_for(lambda: (d := client.data(app)) is not None and d.records_done > len(small) + 2000, 60,
             "part of the big file")
    savepoint = tmp_path / "savepoint"
    assert cli(["--home", str(client.cluster("local").home), "data", "savepoint", app, str(savepoint)]) == 0
    client.kill(app)
    saved = TaskJournal(savepoint).recover()
    assert saved["clicks/2026-12-01/part-0.txt:0"]["state"] == "done"
    at = saved["clicks/2026-12-01/part-1.txt:0"]["records"]
    assert 2000 < at < len(big)
    for f in out.iterdir():
        f.rename(f.with_name("first-" + f.name))

    spec["roles"][0]["env"] = {"OUT_DIR": str(out)}
    spec["input"]["restore_from"] = str(savepoint)
    status = client.wait(client.submit(spec), timeout=60)
    assert status.job.state == "succeeded", status.job
    second = [line for name, lines in consumed(out).items() if not name.startswith("first-") for line in lines]
    assert second == big[at:]  # exactly from the saved position on: no earlier task, no earlier record


def test_restoring_from_an_empty_directory_fails_clearly(client, dirs, tmp_path):
    data, out = dirs
    write_day(data, 1)
    spec = data_spec(out, data, replicas=1, restore_from=str(tmp_path / "nothing-here"))
    status = client.wait(client.submit(spec), timeout=30)
    assert status.job.state == "failed"
    assert "restore_from: no saved task positions in" in status.job.reason, status.job


def test_trainers_that_exit_before_reading_their_input_fail_the_job(client, dirs, capsys):
    from primus_runtime.cli import main as cli

    data, out = dirs
    write_day(data, 1, files=20, lines=50)
    spec = data_spec(out, data, time_range={"start": "2026-12-01", "end": "2026-12-01"})
    spec["roles"][0]["command"] = [sys.executable, "-c", "pass"]
    app = client.submit(spec)
    status = client.wait(app, timeout=60)
    capsys.readouterr()
    assert cli(["--home", str(client.cluster("local").home), "data", "status", app]) == 0
    assert capsys.readouterr().out.strip() == f"{app}: data 0% (0/20 tasks) failed"
    assert status.job.state == "failed", status.job
    assert "input not consumed: 20 of 20 tasks left" in status.job.reason
    info = status.data
    assert info.state == "failed" and info.records_done == 0
    assert info.progress == 0.0 and info.tasks["queued"] == 20
    assert any("before the end of its input" in e.reason for e in status.events if e.to_state == "requeued")


def test_a_trainer_that_exits_early_hands_its_tasks_to_the_others(client, dirs):
    data, out = dirs
    expected = [line for day in (1, 2) for line in write_day(data, day, lines=1000)]
    spec = data_spec(out, data, env={"EXIT_AFTER": "300", "EXIT_ON_INDEX": "0", "SLEEP_EVERY": "100",
                                     "SLEEP": "0.02"},
                     time_range={"start": "2026-12-01", "end": "2026-12-02"})
    status = client.wait(client.submit(spec), timeout=90)
    assert status.job.state == "succeeded", status.job
    assert set(all_lines(out)) == set(expected)  # what worker-0 left was read by worker-1
    assert status.data.state == "succeeded" and status.data.progress == 1.0


def test_early_exit_accept_lets_the_trainer_decide_and_says_the_input_is_incomplete(client, dirs):
    data, out = dirs
    write_day(data, 1, files=20, lines=50)
    spec = data_spec(out, data, time_range={"start": "2026-12-01", "end": "2026-12-01"}, early_exit="accept")
    spec["roles"][0]["command"] = [sys.executable, "-c", "pass"]
    status = client.wait(client.submit(spec), timeout=60)
    assert status.job.state == "succeeded", status.job
    assert status.data.state == "incomplete" and status.data.progress == 0.0


def test_parquet_input_is_read_by_executors_started_without_site_packages(client, dirs):
    # The local backend starts executors with -S: pyarrow used to be out of their reach.
    import pyarrow as pa
    import pyarrow.parquet as pq

    data, out = dirs
    day = data / "20261201"
    day.mkdir(parents=True)
    rows = [f"p{i:04d}" for i in range(300)]
    pq.write_table(pa.table({"id": rows}), day / "part-0.parquet", row_group_size=100)
    (day / "_SUCCESS").write_text("")
    spec = data_spec(out, data, replicas=1, time_range={"start": "2026-12-01", "end": "2026-12-01"})
    spec["input"]["sources"][0]["format"] = "parquet"
    status = client.wait(client.submit(spec), timeout=60)
    assert status.job.state == "succeeded", status.job
    assert sorted(json.loads(line)["id"] for line in all_lines(out)) == rows


def test_the_status_file_follows_the_data_read_between_events(client, dirs):
    """The status file is what `primus status` shows once the AM is gone. Reading makes no event, so it
    was rewritten only at the next one: on YARN an AM killed half-way left `data 0% (0/48 tasks)` with
    99,460 records read (issue 35). One task read slowly: no event for seconds while records flow."""
    data, out = dirs
    write_day(data, 1, files=1, lines=10000)  # 500 records a second: 20 s
    app = client.submit(data_spec(out, data, replicas=1, env={"SLEEP_EVERY": "100", "SLEEP": "0.2"},
                                  time_range={"start": "2026-12-01", "end": "2026-12-01"}, task_size="1Mi"))
    status_file = client.cluster("local").job(app).path / "status.json"

    def on_file() -> int:
        try:
            document = json.loads(status_file.read_text())
        except (OSError, ValueError):
            return 0
        return int((document.get("data") or {}).get("records_done") or 0)

    wait_for(lambda: (d := client.data(app)) is not None and d.records_done >= 1000, 30, "1,000 records read")
    # Snapshots come every 2 s at most (publishing.STATUS_SNAPSHOT_SECONDS): a few of them.
    assert wait_for(lambda: on_file() >= 1000, 6, "the status file to show 1,000 records read")
    assert client.data(app).records_done < 10000, "the input was read to its end meanwhile: no proof"
    status = client.wait(app, timeout=90)
    assert status.job.state == "succeeded", status.job
