"""The dispatcher alone: pull dispatch, requeue at the reported position, attempts, watermark."""

from __future__ import annotations

from typing import Any

import pytest

from primus_runtime.data.dispatch_views import data_status, source_watermarks, task_page
from primus_runtime.data.dispatcher import Dispatcher, Ending, Task
from primus_runtime.models import DataReport
from primus_runtime.spec import InputSpec


class Events:
    def __init__(self) -> None:
        self.events: list[tuple[str, str | None, str, str]] = []
        self.failed: list[str] = []

    def data_event(self, subject: str, old: str | None, new: str, reason: str, actor: str | None = None) -> None:
        self.events.append((subject, old, new, reason))

    def data_failed(self, reason: str) -> None:
        self.failed.append(reason)


def report(fields: dict[str, Any]) -> DataReport:
    """An executor's data report, as the AM hands it over once validated."""
    return DataReport.model_validate(fields)


def make(**settings: Any) -> tuple[Dispatcher, Events]:
    spec = InputSpec.model_validate({"sources": [{"name": "c", "path": "/d/{{YYYY}}{{MM}}{{DD}}"}],
                                     "time_range": {"start": "2026-12-01", "end": "2026-12-02"}, **settings})
    events = Events()
    return Dispatcher(spec, events), events


def tasks(day: str, n: int) -> list[Task]:
    return [Task(id=f"c/{day}/f{i}:0", partition=day, source="c", url=f"/d/{day}/f{i}", format="text",
                 compression="none", start=0, end=100, size=100) for i in range(n)]


def ids(reply: dict[str, Any]) -> list[str]:
    return [t["task_id"] for t in reply.get("tasks", [])]


def test_pull_gives_at_most_the_limit_in_order():
    d, _ = make(max_tasks_per_executor=1, prefetch=1)
    d.add_partition("2026-12-01", tasks("2026-12-01", 3))
    assert ids(d.heartbeat("a", report({"need_tasks": 5}))) == ["c/2026-12-01/f0:0", "c/2026-12-01/f1:0"]
    assert ids(d.heartbeat("b", report({"need_tasks": 1}))) == ["c/2026-12-01/f2:0"]
    assert d.heartbeat("b", report({"need_tasks": 1})) == {}


def test_tasks_of_an_ended_executor_go_back_to_the_front_at_their_position():
    d, events = make(max_tasks_per_executor=2, prefetch=0)
    d.add_partition("2026-12-01", tasks("2026-12-01", 3))
    d.heartbeat("a", report({"need_tasks": 2}))
    d.heartbeat("a", report({"held": ["c/2026-12-01/f0:0", "c/2026-12-01/f1:0"],
                      "progress": {"c/2026-12-01/f0:0": {"records": 7, "bytes": 70}}}))
    d.release("a", Ending.CRASHED, "worker-0 failed: trainer exited 137", slot="worker-0")
    reply = d.heartbeat("b", report({"need_tasks": 2}))
    assert ids(reply) == ["c/2026-12-01/f0:0", "c/2026-12-01/f1:0"]
    assert reply["tasks"][0]["skip"] == 7 and reply["tasks"][1]["skip"] == 0
    # A crashed trainer is not bad data: neither task is charged.
    assert d.tasks["c/2026-12-01/f0:0"].attempts == 0 and d.tasks["c/2026-12-01/f1:0"].attempts == 0
    assert any(e[2] == "requeued" and "uncharged" in e[3] for e in events.events)


def test_a_killed_executor_is_not_charged():
    d, _ = make()
    d.add_partition("2026-12-01", tasks("2026-12-01", 1))
    d.heartbeat("a", report({"need_tasks": 1}))
    d.release("a", Ending.STOPPED, "scaled down", slot="worker-0")
    assert d.tasks["c/2026-12-01/f0:0"].attempts == 0 and d.queue[0] == "c/2026-12-01/f0:0"


def test_bad_data_fail_policy_fails_naming_the_task_and_file():
    d, events = make(max_task_attempts=2)
    d.add_partition("2026-12-01", tasks("2026-12-01", 1))
    for _ in range(2):
        d.heartbeat("a", report({"need_tasks": 1}))
        d.heartbeat("a", report({"failed": {"c/2026-12-01/f0:0": "corrupt record at byte 5"}}))
    assert len(events.failed) == 1
    assert "c/2026-12-01/f0:0 (/d/2026-12-01/f0)" in events.failed[0] and "corrupt record" in events.failed[0]
    assert data_status(d)["state"] == "failed"


def test_quarantine_goes_on_and_lists_the_task():
    d, events = make(max_task_attempts=1, on_bad_data="quarantine")
    d.add_partition("2026-12-01", tasks("2026-12-01", 2))
    d.scan_finished()
    d.heartbeat("a", report({"need_tasks": 2}))
    reply = d.heartbeat("a", report({"failed": {"c/2026-12-01/f0:0": "bad"}, "done": ["c/2026-12-01/f1:0"]}))
    assert reply.get("data_exhausted") is True and not events.failed
    status = data_status(d)
    assert status["quarantined"] == ["c/2026-12-01/f0:0"] and status["state"] == "exhausted"
    assert status["watermark"] == "2026-12-01"


def test_watermark_waits_for_every_earlier_partition():
    d, _ = make(max_tasks_per_executor=4, prefetch=0)
    d.add_partition("2026-12-01", tasks("2026-12-01", 2))
    d.add_partition("2026-12-02", tasks("2026-12-02", 1))
    d.heartbeat("a", report({"need_tasks": 3}))
    d.heartbeat("a", report({"done": ["c/2026-12-02/f0:0", "c/2026-12-01/f0:0"]}))
    assert data_status(d)["watermark"] is None
    d.heartbeat("a", report({"done": ["c/2026-12-01/f1:0"]}))
    assert data_status(d)["watermark"] == "2026-12-02"


def test_suspend_stops_handing_out_tasks():
    d, _ = make()
    d.add_partition("2026-12-01", tasks("2026-12-01", 2))
    d.suspend()
    assert d.heartbeat("a", report({"need_tasks": 1})) == {} and data_status(d)["state"] == "suspended"
    d.resume()
    assert ids(d.heartbeat("a", report({"need_tasks": 1}))) == ["c/2026-12-01/f0:0"]


def test_an_assignment_lost_on_the_way_is_sent_again():
    d, _ = make()
    d.add_partition("2026-12-01", tasks("2026-12-01", 1))
    d.heartbeat("a", report({"need_tasks": 1, "held": []}))
    assert ids(d.heartbeat("a", report({"need_tasks": 1, "held": []}))) == ["c/2026-12-01/f0:0"]
    assert d.heartbeat("a", report({"need_tasks": 0, "held": ["c/2026-12-01/f0:0"]})) == {}


def test_success_percent_stops_reading_the_rest():
    d, _ = make(success_percent=50, max_tasks_per_executor=1, prefetch=0)
    d.add_partition("2026-12-01", tasks("2026-12-01", 4))
    d.scan_finished()
    for _ in range(2):
        task_id = ids(d.heartbeat("a", report({"need_tasks": 1})))[0]
        reply = d.heartbeat("a", report({"done": [task_id]}))
    assert reply.get("data_exhausted") is True and ids(reply) == []
    assert data_status(d)["tasks"]["queued"] == 2


def test_progress_counts_done_tasks_whole_and_running_ones_at_their_position():
    d, _ = make(max_tasks_per_executor=2, prefetch=0)
    d.add_partition("2026-12-01", tasks("2026-12-01", 2))
    d.scan_finished()
    d.heartbeat("a", report({"need_tasks": 2}))
    d.heartbeat("a", report({"done": ["c/2026-12-01/f0:0"], "progress": {"c/2026-12-01/f1:0": {"records": 1, "bytes": 10}}}))
    status = data_status(d)
    assert status["progress"] == 0.55 and status["bytes"] == {"done": 110, "total": 200}
    assert status["tasks"]["running"] == 1 and status["records_done"] == 1


def test_rate_is_bytes_over_the_last_30_s_and_eta_the_rest_at_that_rate(monkeypatch: pytest.MonkeyPatch):
    clock = [1000.0]
    monkeypatch.setattr("primus_runtime.data.dispatcher.time.monotonic", lambda: clock[0])

    def at(seconds: float, fields: dict[str, Any]) -> dict[str, Any]:
        clock[0] = 1000.0 + seconds
        d.heartbeat("a", report(fields))
        return {k: v for k, v in data_status(d).items() if k in ("rate_bytes_per_s", "eta_seconds")}

    d, _ = make(max_tasks_per_executor=2, prefetch=0)
    d.add_partition("2026-12-01", tasks("2026-12-01", 2))  # 2 x 100 bytes
    assert at(0, {"need_tasks": 2}) == {"rate_bytes_per_s": 0.0, "eta_seconds": None}
    # Until the scan is complete the total is not known: a rate, but no ETA.
    assert at(10, {"progress": {"c/2026-12-01/f0:0": {"records": 5, "bytes": 50}}}) == \
        {"rate_bytes_per_s": 5.0, "eta_seconds": None}
    d.scan_finished()
    assert at(20, {"done": ["c/2026-12-01/f0:0"], "progress": {"c/2026-12-01/f1:0": {"records": 2, "bytes": 20}}}) \
        == {"rate_bytes_per_s": 6.0, "eta_seconds": round(80 / 6.0, 1)}  # 120 bytes in 20 s, 80 left
    # The samples older than 30 s (t=0 and t=10) are dropped: 30 bytes since t=20, in 25 s.
    assert at(45, {"progress": {"c/2026-12-01/f1:0": {"records": 5, "bytes": 50}}}) == \
        {"rate_bytes_per_s": 1.2, "eta_seconds": round(50 / 1.2, 1)}
    assert at(50, {"done": ["c/2026-12-01/f1:0"]})["eta_seconds"] == 0.0  # exhausted


def test_final_data_state_follows_the_job():
    for job_state, read, expected in (("succeeded", True, "succeeded"), ("succeeded", False, "incomplete"),
                                      ("failed", True, "failed"), ("killed", False, "running")):
        d, _ = make()
        d.add_partition("2026-12-01", tasks("2026-12-01", 1))
        d.scan_finished()
        if read:
            d.heartbeat("a", report({"need_tasks": 1}))
            d.heartbeat("a", report({"done": ["c/2026-12-01/f0:0"]}))
        d.finish(job_state)
        assert data_status(d)["state"] == expected, (job_state, read)


def _crash_reading(d: Dispatcher, holder: str, slot: str, task_id: str, records: int) -> None:
    """``holder`` takes ``task_id``, reports it reads it at ``records``, and its trainer dies."""
    assert ids(d.heartbeat(holder, report({"need_tasks": 1}))) == [task_id]
    d.heartbeat(holder, report({"held": [task_id], "reading": task_id,
                         "progress": {task_id: {"records": records, "bytes": records}}}))
    d.release(holder, Ending.CRASHED, f"{slot} failed: trainer exited 137", slot=slot)


def test_trainer_deaths_with_progress_in_between_never_charge_the_task():
    d, events = make(max_tasks_per_executor=1, prefetch=0, max_task_attempts=1)
    d.add_partition("2026-12-01", tasks("2026-12-01", 1))
    task = "c/2026-12-01/f0:0"
    for i, slot in enumerate(["worker-0", "worker-1", "worker-2", "worker-0", "worker-1"]):
        _crash_reading(d, f"inc{i}", slot, task, records=10 * (i + 1))
    assert d.tasks[task].attempts == 0 and d.tasks[task].state.value == "queued"
    assert events.failed == []


def test_deaths_at_the_same_position_on_different_executors_charge_a_poison_task():
    d, events = make(max_tasks_per_executor=1, prefetch=0, max_task_attempts=2)
    d.add_partition("2026-12-01", tasks("2026-12-01", 1))
    task = "c/2026-12-01/f0:0"
    _crash_reading(d, "i0", "worker-0", task, records=40)
    _crash_reading(d, "i1", "worker-0", task, records=40)  # the same executor again: maybe the executor
    assert d.tasks[task].attempts == 0
    _crash_reading(d, "i2", "worker-1", task, records=40)  # another executor dies at the same record
    assert d.tasks[task].attempts == 1 and not events.failed
    _crash_reading(d, "i3", "worker-2", task, records=40)
    assert len(events.failed) == 1
    assert "died at record 40" in events.failed[0] and "max_task_attempts is 2" in events.failed[0]


def test_only_the_task_being_read_is_interrupted_and_the_backstop_ends_it():
    d, events = make(max_tasks_per_executor=1, prefetch=1, max_task_interruptions=3, on_bad_data="quarantine")
    d.add_partition("2026-12-01", tasks("2026-12-01", 2))
    first, second = "c/2026-12-01/f0:0", "c/2026-12-01/f1:0"
    for i in range(3):
        d.heartbeat(f"i{i}", report({"need_tasks": 2}))
        d.heartbeat(f"i{i}", report({"held": [first, second], "reading": first}))
        d.release(f"i{i}", Ending.LOST, f"worker-{i} lost", slot=f"worker-{i}")
    assert d.tasks[second].interruptions == 0 and d.tasks[second].state.value == "queued"
    assert d.tasks[first].state.value == "quarantined"
    assert "interrupted 3 times, max_task_interruptions is 3" in d.tasks[first].error


def test_drained_executors_hand_back_their_tasks_without_interrupting_the_one_being_read():
    d, events = make(max_tasks_per_executor=1, prefetch=0, max_task_interruptions=1, on_bad_data="quarantine")
    d.add_partition("2026-12-01", tasks("2026-12-01", 1))
    task = "c/2026-12-01/f0:0"
    for i in range(3):  # each would use up the task, were draining an interruption
        assert ids(d.heartbeat(f"i{i}", report({"need_tasks": 1}))) == [task]
        d.heartbeat(f"i{i}", report({"held": [task], "reading": task,
                                     "progress": {task: {"records": 10 * (i + 1), "bytes": 10 * (i + 1)}}}))
        d.release(f"i{i}", Ending.DRAINED, f"worker-{i} drained: received SIGTERM", slot=f"worker-{i}")
    assert d.tasks[task].state.value == "queued" and d.queue[0] == task
    assert (d.tasks[task].interruptions, d.tasks[task].attempts, d.tasks[task].records) == (0, 0, 30)
    assert [e[2] for e in events.events] == ["requeued"] * 3 and "drained" in events.events[0][3]


def test_the_limit_counts_every_task_held_also_those_written_out():
    d, _ = make(max_tasks_per_executor=1, prefetch=1)
    d.add_partition("2026-12-01", tasks("2026-12-01", 5))
    assert len(ids(d.heartbeat("a", report({"need_tasks": 2})))) == 2
    # The executor asks again although it holds 2 (their records sit in the pipe): nothing more.
    assert d.heartbeat("a", report({"need_tasks": 2, "held": ["c/2026-12-01/f0:0", "c/2026-12-01/f1:0"]})) == {}
    reply = d.heartbeat("a", report({"need_tasks": 2, "held": ["c/2026-12-01/f1:0"], "done": ["c/2026-12-01/f0:0"]}))
    assert ids(reply) == ["c/2026-12-01/f2:0"]


def test_progress_is_unknown_while_partitions_are_awaited_and_never_counts_unread_tasks():
    d, _ = make(max_tasks_per_executor=1, prefetch=0, success_percent=50)
    d.add_partition("2026-12-01", tasks("2026-12-01", 2))
    d.heartbeat("a", report({"need_tasks": 1}))
    d.heartbeat("a", report({"done": ["c/2026-12-01/f0:0"]}))
    status = data_status(d)
    assert status["progress"] is None and status["progress_of_discovered"] == 0.5
    d.scan_finished()  # success_percent 50 met: the second task is not read
    status = data_status(d)
    assert status["state"] == "exhausted" and status["progress"] == 0.5


def test_a_job_that_succeeded_with_tasks_left_reports_its_input_incomplete():
    d, events = make(early_exit="accept")
    d.add_partition("2026-12-01", tasks("2026-12-01", 3))
    d.scan_finished()
    d.finish("succeeded")
    assert data_status(d)["state"] == "incomplete"
    assert any(e[2] == "incomplete" and "3 of 3 tasks left" in e[3] for e in events.events)


def test_watermark_with_daily_and_hourly_sources_is_where_both_are_consumed():
    spec = InputSpec.model_validate({"sources": [{"name": "c", "path": "/d/{{YYYY}}{{MM}}{{DD}}"},
                                                 {"name": "h", "path": "/h/{{YYYY}}{{MM}}{{DD}}/{{HH}}"}],
                                     "time_range": {"start": "2026-12-01", "end": "2026-12-01"},
                                     "max_tasks_per_executor": 4, "prefetch": 0})
    d = Dispatcher(spec, Events())
    for label in ("2026-12-01", "2026-12-01T00", "2026-12-01T01"):
        d.add_partition(label, tasks(label, 1))
    d.heartbeat("a", report({"need_tasks": 3}))
    d.heartbeat("a", report({"done": ["c/2026-12-01T00/f0:0", "c/2026-12-01T01/f0:0"]}))
    assert data_status(d)["watermark"] is None  # the daily partition, covering those hours too, is not consumed
    d.heartbeat("a", report({"done": ["c/2026-12-01/f0:0"]}))
    assert data_status(d)["watermark"] == "2026-12-01T01"  # the day is consumed, but hours 02-23 are not yet


def test_watermark_waits_for_a_source_that_has_no_consumed_partition_yet():
    spec = InputSpec.model_validate({"sources": [{"name": "c", "path": "/d/{{YYYY}}{{MM}}{{DD}}"},
                                                 {"name": "h", "path": "/h/{{YYYY}}{{MM}}{{DD}}/{{HH}}"}],
                                     "time_range": {"start": "2026-12-01", "end": None}})
    d = Dispatcher(spec, Events())
    d.add_partition("2026-12-01", tasks("2026-12-01", 1))
    d.heartbeat("a", report({"need_tasks": 1}))
    d.heartbeat("a", report({"done": ["c/2026-12-01/f0:0"]}))
    assert data_status(d)["watermark"] is None


def test_a_user_requeue_reads_a_done_task_again_and_takes_the_watermark_back():
    from primus_runtime.data.dispatcher import TaskActionRefused, TaskState

    d, events = make()
    d.add_partition("2026-12-01", tasks("2026-12-01", 2))
    d.add_partition("2026-12-02", tasks("2026-12-02", 1))
    d.heartbeat("a", report({"need_tasks": 2}))
    d.heartbeat("a", report({"progress": {"c/2026-12-01/f0:0": {"records": 5, "bytes": 100}},
                             "done": ["c/2026-12-01/f0:0", "c/2026-12-01/f1:0"]}))
    assert d.watermark == "2026-12-01" and d.records_done == 5 and d.bytes_done == 200
    task = d.requeue("c/2026-12-01/f0:0", "re-queued on request", actor="alice")
    assert (task.state, task.records, task.bytes_done) == (TaskState.QUEUED, 0, 0)
    assert d.watermark is None and d.records_done == 0 and d.bytes_done == 100
    assert d.progress_by_partition[("c", "2026-12-01")].bytes_done == 100
    assert d.queue[0] == task.id and events.events[-1][1:3] == ("done", "queued")
    assert ids(d.heartbeat("b", report({"need_tasks": 1}))) == [task.id]  # handed out next, from its start
    with pytest.raises(TaskActionRefused, match="being read"):
        d.requeue(task.id, "again")
    with pytest.raises(TaskActionRefused, match="no task 'nope'"):
        d.requeue("nope", "x")


def test_a_user_skip_quarantines_a_task_and_says_who_was_reading_it():
    from primus_runtime.data.dispatcher import TaskActionRefused, TaskState

    d, events = make(max_tasks_per_executor=2, prefetch=0)
    d.add_partition("2026-12-01", tasks("2026-12-01", 3))
    d.heartbeat("a", report({"need_tasks": 1}))
    running, holder = d.skip("c/2026-12-01/f0:0", "skipped on request", actor="bob")
    queued, nobody = d.skip("c/2026-12-01/f2:0", "skipped on request", actor="bob")
    assert (running.state, holder) == (TaskState.QUARANTINED, "a") and nobody is None
    assert d.quarantined == ["c/2026-12-01/f0:0", "c/2026-12-01/f2:0"] and not d.failure  # not failed_percent
    assert "c/2026-12-01/f0:0" not in d.held["a"]
    assert [e[1:3] for e in events.events[-2:]] == [("running", "quarantined"), ("queued", "quarantined")]
    assert ids(d.heartbeat("b", report({"need_tasks": 2}))) == ["c/2026-12-01/f1:0"]  # the skipped ones are not
    with pytest.raises(TaskActionRefused, match="only a queued or running task"):
        d.skip("c/2026-12-01/f0:0", "again")


def test_task_pages_and_per_source_watermarks():
    from primus_runtime.data.dispatcher import TaskState

    d, _ = make()
    d.add_partition("2026-12-01", tasks("2026-12-01", 5))
    d.add_partition("2026-12-02", tasks("2026-12-02", 5))
    d.heartbeat("a", report({"need_tasks": 1}))
    assert [t.id for t in task_page(d, None, None, 3, 4)[1]] == [f"c/2026-12-01/f{i}:0" for i in (3, 4)] + [
        f"c/2026-12-02/f{i}:0" for i in (0, 1)]
    assert task_page(d, TaskState.QUEUED, None, 0, 2)[0] == 9
    total, page = task_page(d, TaskState.QUEUED, "12-02", 4, 10)
    assert total == 5 and [t.id for t in page] == ["c/2026-12-02/f4:0"]
    assert source_watermarks(d) == {"c": None}
    d.heartbeat("a", report({"done": ["c/2026-12-01/f0:0"]}))
    for i in range(1, 5):
        d.skip(f"c/2026-12-01/f{i}:0", "skipped")
    assert source_watermarks(d) == {"c": "2026-12-01"}


def test_a_restarted_am_gives_adopted_executors_their_tasks_back_and_keeps_their_early_reports():
    """AM recovery: the journal says which executor read which task; the adopted executor's reports that
    arrive before the scan lists the tasks again are applied once it has (a done task is never read twice)."""
    earlier = {"c/2026-12-01/f0:0": {"state": "running", "records": 3, "bytes": 30, "attempts": 0, "holder": "a"},
               "c/2026-12-01/f1:0": {"state": "running", "records": 5, "bytes": 50, "attempts": 0, "holder": "a"},
               "c/2026-12-01/f2:0": {"state": "running", "records": 9, "bytes": 90, "attempts": 0, "holder": "gone"},
               "c/2026-12-01/f3:0": {"state": "done", "records": 10, "bytes": 100, "attempts": 0}}
    spec = InputSpec.model_validate({"sources": [{"name": "c", "path": "/d/{{YYYY}}{{MM}}{{DD}}"}],
                                     "time_range": {"start": "2026-12-01", "end": "2026-12-01"}})
    d = Dispatcher(spec, Events(), recovered=earlier)
    d.adopted = {"a"}
    # Before the scan: "a" finished f0 and moved on in f1.
    assert d.heartbeat("a", report({"held": ["c/2026-12-01/f1:0"], "done": ["c/2026-12-01/f0:0"],
                                    "progress": {"c/2026-12-01/f1:0": {"records": 8, "bytes": 80}}})) == {}
    d.add_partition("2026-12-01", tasks("2026-12-01", 5))
    t = d.tasks
    assert t["c/2026-12-01/f0:0"].state.value == "done"
    assert (t["c/2026-12-01/f1:0"].state.value, t["c/2026-12-01/f1:0"].holder, t["c/2026-12-01/f1:0"].records) == \
        ("running", "a", 8)
    assert t["c/2026-12-01/f3:0"].state.value == "done"
    # The task of an executor that did not come back is queued at its position, first; "a" keeps f1.
    reply = d.heartbeat("b", report({"need_tasks": 2}))
    assert ids(reply) == ["c/2026-12-01/f2:0", "c/2026-12-01/f4:0"] and reply["tasks"][0]["skip"] == 9
    assert list(d.held["a"]) == ["c/2026-12-01/f1:0"]


def test_an_adopted_executor_that_ends_before_the_scan_lists_its_tasks_gets_no_finished_task_read_again():
    earlier = {"c/2026-12-01/f0:0": {"state": "running", "records": 3, "bytes": 30, "attempts": 0, "holder": "a"},
               "c/2026-12-01/f1:0": {"state": "running", "records": 5, "bytes": 50, "attempts": 0, "holder": "a"}}
    spec = InputSpec.model_validate({"sources": [{"name": "c", "path": "/d/{{YYYY}}{{MM}}{{DD}}"}],
                                     "time_range": {"start": "2026-12-01", "end": "2026-12-01"}})
    d = Dispatcher(spec, Events(), recovered=earlier)
    d.adopted = {"a"}
    d.heartbeat("a", report({"held": ["c/2026-12-01/f1:0"], "done": ["c/2026-12-01/f0:0"],
                             "progress": {"c/2026-12-01/f1:0": {"records": 8, "bytes": 80}}}))
    d.release("a", Ending.SUCCEEDED, "trainer exited 0")  # it ends before the restarted AM lists the tasks again
    d.add_partition("2026-12-01", tasks("2026-12-01", 3))
    t = d.tasks
    assert t["c/2026-12-01/f0:0"].state.value == "done"  # it said so: never read again
    assert "a" not in d.held
    reply = d.heartbeat("b", report({"need_tasks": 3}))
    # f1 goes back first, at the position "a" reported last (8 records), then f2; f0 is not handed out.
    assert ids(reply) == ["c/2026-12-01/f1:0", "c/2026-12-01/f2:0"] and reply["tasks"][0]["skip"] == 8
    assert d.counts[d.tasks["c/2026-12-01/f0:0"].state] == 1 and d.bytes_done == 100 + 80


def test_a_file_task_whose_readers_are_killed_often_but_read_on_is_never_given_up():
    """Trainers SIGKILLed from outside again and again (an operator, preemptions): the task moves on
    between kills, so the backstop (10 interruptions by default) must not end the job."""
    d, events = make(max_tasks_per_executor=1, prefetch=0)
    d.add_partition("2026-12-01", tasks("2026-12-01", 1))
    task = "c/2026-12-01/f0:0"
    for i in range(25):
        _crash_reading(d, f"inc{i}", f"worker-{i % 3}", task, records=10 * (i + 1))
    assert d.tasks[task].state.value == "queued" and d.tasks[task].attempts == 0
    assert events.failed == []
    for i in range(9):  # then 9 more at the last kill's position, no record read: the 10th in a row ends it
        _crash_reading(d, f"stuck{i}", "worker-0", task, records=250)
    assert len(events.failed) == 1 and "interrupted 10 times" in events.failed[0]


def test_the_status_counts_the_partitions_listed_not_their_granularities():
    d, _ = make()
    for day in ("2026-12-01", "2026-12-02", "2026-12-03"):
        d.add_partition(day, tasks(day, 2))
    assert data_status(d)["partitions_listed"] == 3  # was 1: one granularity (days)


def test_no_eta_while_suspended_and_neither_rate_nor_eta_once_the_job_ended(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("primus_runtime.data.dispatcher.time.monotonic", lambda: clock[0])
    d, _ = make(max_tasks_per_executor=1, prefetch=0)
    d.add_partition("2026-12-01", tasks("2026-12-01", 2))
    d.scan_finished()
    [task] = ids(d.heartbeat("a", report({"need_tasks": 1})))
    for n in range(1, 4):
        clock[0] += 1
        d.heartbeat("a", report({"held": [task], "reading": task, "progress": {task: {"records": n, "bytes": 10 * n}}}))
    status = data_status(d)
    assert status["rate_bytes_per_s"] > 0 and status["eta_seconds"] is not None
    d.suspend()
    status = data_status(d)
    assert status["eta_seconds"] is None  # suspended: the input would not be read to its end
    d.resume()
    d.finish("killed")
    status = data_status(d)
    assert (status["rate_bytes_per_s"], status["eta_seconds"], d.rate()) == (0, None, 0)  # was the last rate
