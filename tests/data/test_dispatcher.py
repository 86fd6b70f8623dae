"""The dispatcher alone: pull dispatch, requeue at the reported position, attempts, watermark."""

from __future__ import annotations

from typing import Any

import pytest

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


def test_progress_counts_done_tasks_whole_and_running_ones_at_their_position():
    d, _ = make(max_tasks_per_executor=2, prefetch=0)
    d.add_partition("2026-12-01", tasks("2026-12-01", 2))
    d.scan_finished()
    d.heartbeat("a", {"need_tasks": 2})
    d.heartbeat("a", {"done": ["c/2026-12-01/f0:0"], "progress": {"c/2026-12-01/f1:0": {"records": 1, "bytes": 10}}})
    status = d.status()
    assert status["progress"] == 0.55 and status["bytes"] == {"done": 110, "total": 200}
    assert status["tasks"]["running"] == 1 and status["records_done"] == 1


def test_rate_is_bytes_over_the_last_30_s_and_eta_the_rest_at_that_rate(monkeypatch: pytest.MonkeyPatch):
    clock = [1000.0]
    monkeypatch.setattr("primus_runtime.data.dispatcher.time.monotonic", lambda: clock[0])

    def at(seconds: float, report: dict[str, Any]) -> dict[str, Any]:
        clock[0] = 1000.0 + seconds
        d.heartbeat("a", report)
        return {k: v for k, v in d.status().items() if k in ("rate_bytes_per_s", "eta_seconds")}

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
    for job_state, expected in (("succeeded", "succeeded"), ("failed", "failed"), ("killed", "running")):
        d, _ = make()
        d.add_partition("2026-12-01", tasks("2026-12-01", 1))
        d.finish(job_state)
        assert d.status()["state"] == expected, job_state
