"""The dispatcher alone: pull dispatch, requeue at the reported position, attempts, watermark."""

from __future__ import annotations

from typing import Any

from primus_runtime.data.dispatcher import Dispatcher, Task
from primus_runtime.spec import InputSpec


class Events:
    def __init__(self) -> None:
        self.events: list[tuple[str, str | None, str, str]] = []
        self.failed: list[str] = []

    def data_event(self, subject: str, old: str | None, new: str, reason: str) -> None:
        self.events.append((subject, old, new, reason))

    def data_failed(self, reason: str) -> None:
        self.failed.append(reason)


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
    assert ids(d.heartbeat("a", {"need_tasks": 5})) == ["c/2026-12-01/f0:0", "c/2026-12-01/f1:0"]
    assert ids(d.heartbeat("b", {"need_tasks": 1})) == ["c/2026-12-01/f2:0"]
    assert d.heartbeat("b", {"need_tasks": 1}) == {}


def test_tasks_of_an_ended_executor_go_back_to_the_front_at_their_position():
    d, events = make(max_tasks_per_executor=2, prefetch=0)
    d.add_partition("2026-12-01", tasks("2026-12-01", 3))
    d.heartbeat("a", {"need_tasks": 2})
    d.heartbeat("a", {"held": ["c/2026-12-01/f0:0", "c/2026-12-01/f1:0"],
                      "progress": {"c/2026-12-01/f0:0": {"records": 7, "bytes": 70}}})
    d.release("a", charge=True, reason="worker-0 failed")
    reply = d.heartbeat("b", {"need_tasks": 2})
    assert ids(reply) == ["c/2026-12-01/f0:0", "c/2026-12-01/f1:0"]
    assert reply["tasks"][0]["skip"] == 7 and reply["tasks"][1]["skip"] == 0
    assert d.tasks["c/2026-12-01/f0:0"].attempts == 1
    assert any(e[2] == "requeued" for e in events.events)


def test_a_killed_executor_is_not_charged():
    d, _ = make()
    d.add_partition("2026-12-01", tasks("2026-12-01", 1))
    d.heartbeat("a", {"need_tasks": 1})
    d.release("a", charge=False, reason="scaled down")
    assert d.tasks["c/2026-12-01/f0:0"].attempts == 0 and d.queue[0] == "c/2026-12-01/f0:0"


def test_bad_data_fail_policy_fails_naming_the_task_and_file():
    d, events = make(max_task_attempts=2)
    d.add_partition("2026-12-01", tasks("2026-12-01", 1))
    for _ in range(2):
        d.heartbeat("a", {"need_tasks": 1})
        d.heartbeat("a", {"failed": {"c/2026-12-01/f0:0": "corrupt record at byte 5"}})
    assert len(events.failed) == 1
    assert "c/2026-12-01/f0:0 (/d/2026-12-01/f0)" in events.failed[0] and "corrupt record" in events.failed[0]
    assert d.status()["state"] == "failed"


def test_quarantine_goes_on_and_lists_the_task():
    d, events = make(max_task_attempts=1, on_bad_data="quarantine")
    d.add_partition("2026-12-01", tasks("2026-12-01", 2))
    d.scan_finished()
    d.heartbeat("a", {"need_tasks": 2})
    reply = d.heartbeat("a", {"failed": {"c/2026-12-01/f0:0": "bad"}, "done": ["c/2026-12-01/f1:0"]})
    assert reply.get("data_exhausted") is True and not events.failed
    status = d.status()
    assert status["quarantined"] == ["c/2026-12-01/f0:0"] and status["state"] == "exhausted"
    assert status["watermark"] == "2026-12-01"


def test_watermark_waits_for_every_earlier_partition():
    d, _ = make(max_tasks_per_executor=4, prefetch=0)
    d.add_partition("2026-12-01", tasks("2026-12-01", 2))
    d.add_partition("2026-12-02", tasks("2026-12-02", 1))
    d.heartbeat("a", {"need_tasks": 3})
    d.heartbeat("a", {"done": ["c/2026-12-02/f0:0", "c/2026-12-01/f0:0"]})
    assert d.status()["watermark"] is None
    d.heartbeat("a", {"done": ["c/2026-12-01/f1:0"]})
    assert d.status()["watermark"] == "2026-12-02"


def test_suspend_stops_handing_out_tasks():
    d, _ = make()
    d.add_partition("2026-12-01", tasks("2026-12-01", 2))
    d.suspend()
    assert d.heartbeat("a", {"need_tasks": 1}) == {} and d.status()["state"] == "suspended"
    d.resume()
    assert ids(d.heartbeat("a", {"need_tasks": 1})) == ["c/2026-12-01/f0:0"]


def test_an_assignment_lost_on_the_way_is_sent_again():
    d, _ = make()
    d.add_partition("2026-12-01", tasks("2026-12-01", 1))
    d.heartbeat("a", {"need_tasks": 1, "held": []})
    assert ids(d.heartbeat("a", {"need_tasks": 1, "held": []})) == ["c/2026-12-01/f0:0"]
    assert d.heartbeat("a", {"need_tasks": 0, "held": ["c/2026-12-01/f0:0"]}) == {}


def test_success_percent_stops_reading_the_rest():
    d, _ = make(success_percent=50, max_tasks_per_executor=1, prefetch=0)
    d.add_partition("2026-12-01", tasks("2026-12-01", 4))
    d.scan_finished()
    for _ in range(2):
        task_id = ids(d.heartbeat("a", {"need_tasks": 1}))[0]
        reply = d.heartbeat("a", {"done": [task_id]})
    assert reply.get("data_exhausted") is True and ids(reply) == []
    assert d.status()["tasks"]["queued"] == 2


def test_progress_rate_and_eta():
    d, _ = make(max_tasks_per_executor=2, prefetch=0)
    d.add_partition("2026-12-01", tasks("2026-12-01", 2))
    d.scan_finished()
    d.heartbeat("a", {"need_tasks": 2})
    d.heartbeat("a", {"done": ["c/2026-12-01/f0:0"], "progress": {"c/2026-12-01/f1:0": {"records": 1, "bytes": 10}}})
    status = d.status()
    assert status["progress"] == 0.55 and status["bytes"] == {"done": 110, "total": 200}
    assert status["tasks"]["running"] == 1 and status["records_done"] == 1


def test_final_data_state_follows_the_job():
    for job_state, expected in (("succeeded", "succeeded"), ("failed", "failed"), ("killed", "running")):
        d, _ = make()
        d.add_partition("2026-12-01", tasks("2026-12-01", 1))
        d.finish(job_state)
        assert d.status()["state"] == expected, job_state


def test_watermark_with_daily_and_hourly_sources_is_where_both_are_consumed():
    spec = InputSpec.model_validate({"sources": [{"name": "c", "path": "/d/{{YYYY}}{{MM}}{{DD}}"},
                                                 {"name": "h", "path": "/h/{{YYYY}}{{MM}}{{DD}}/{{HH}}"}],
                                     "time_range": {"start": "2026-12-01", "end": "2026-12-01"},
                                     "max_tasks_per_executor": 4, "prefetch": 0})
    d = Dispatcher(spec, Events())
    for label in ("2026-12-01", "2026-12-01T00", "2026-12-01T01"):
        d.add_partition(label, tasks(label, 1))
    d.heartbeat("a", {"need_tasks": 3})
    d.heartbeat("a", {"done": ["c/2026-12-01T00/f0:0", "c/2026-12-01T01/f0:0"]})
    assert d.status()["watermark"] is None  # the daily partition, covering those hours too, is not consumed
    d.heartbeat("a", {"done": ["c/2026-12-01/f0:0"]})
    assert d.status()["watermark"] == "2026-12-01T01"  # the day is consumed, but hours 02-23 are not yet


def test_watermark_waits_for_a_source_that_has_no_consumed_partition_yet():
    spec = InputSpec.model_validate({"sources": [{"name": "c", "path": "/d/{{YYYY}}{{MM}}{{DD}}"},
                                                 {"name": "h", "path": "/h/{{YYYY}}{{MM}}{{DD}}/{{HH}}"}],
                                     "time_range": {"start": "2026-12-01", "end": None}})
    d = Dispatcher(spec, Events())
    d.add_partition("2026-12-01", tasks("2026-12-01", 1))
    d.heartbeat("a", {"need_tasks": 1})
    d.heartbeat("a", {"done": ["c/2026-12-01/f0:0"]})
    assert d.status()["watermark"] is None
