"""Draining on a preemption notice, on real local jobs: SIGTERM to the executor, the role's notice file,
and the AM's drain API. The drained executor's tasks move at their final positions before it exits,
nothing is charged, every record is delivered."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import requests

from conftest import executor, make_spec, wait_for
from data.test_data_plane import all_lines, committed_lines, data_spec, write_day
from primus_runtime import protocol
from primus_runtime.models import ExecutorView
from primus_runtime.ui.auth import USER_HEADER


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "out"
    out.mkdir()
    return tmp_path / "data", out


def running_executor(client, app: str, executor_id: str) -> ExecutorView:
    def running() -> ExecutorView | None:
        ex = next((e for e in client.status(app).executors if e.id == executor_id), None)
        return ex if ex is not None and ex.state == "running" else None

    return wait_for(running, 30, f"{executor_id} running")


def reading(client, app: str, executors: int) -> None:
    wait_for(lambda: (data := client.data(app)) is not None and data.tasks.get("running", 0) >= executors, 30,
             f"{executors} executors reading")


def event_index(events: list[dict[str, Any]], what: str, **match: Any) -> int:
    for i, event in enumerate(events):
        if all(event.get(key) == value for key, value in match.items()):
            return i
    raise AssertionError(f"no event for {what} {match} in {[(e['subject'], e['to_state']) for e in events]}")


def check_drained(client, app: str, executor_id: str, why: str) -> dict[str, Any]:
    """The executor drained for ``why``: its tasks went back before it ended, preempted and uncharged."""
    status = client.cluster("local").final_status(app)  # every event, not only the API's latest 50
    events = status["events"]
    draining = event_index(events, "draining", subject=executor_id, to_state="draining")
    assert events[draining]["reason"] == why
    requeued = next(i for i, e in enumerate(events) if e["to_state"] == "requeued"
                    and f"({executor_id} drained: " in e["reason"])
    ended = event_index(events, "its end", subject=executor_id, to_state="failed",
                        exit_code=protocol.EXIT_PREEMPTED)
    assert draining < requeued < ended
    role = status["roles"][0]
    assert role["failures"] == 0 and role["restarts"] >= 1
    assert not [e for e in events if e["subject"].startswith("task/")]  # no attempt charged, nothing quarantined
    old = next(ex for ex in status["history"] if ex["id"] == executor_id)
    assert old["preempted"] and old["exit_code"] == protocol.EXIT_PREEMPTED
    return status


def test_sigterm_drains_a_consuming_executor_and_its_tasks_move_at_once(client, dirs):
    data, out = dirs
    expected = [line for day in (1, 2) for line in write_day(data, day, lines=2500)]
    app = client.submit(data_spec(out, data, env={"SLEEP_EVERY": "250", "SLEEP": "0.1"}, task_size="8Ki",
                                  time_range={"start": "2026-12-01", "end": "2026-12-02"}))
    pid = running_executor(client, app, "worker-0").pid
    reading(client, app, 2)
    os.kill(pid, signal.SIGTERM)
    status = client.wait(app, timeout=90)
    assert status.job.state == "succeeded", status.job
    check_drained(client, app, "worker-0", "draining: received SIGTERM")
    lines = all_lines(out)
    assert set(lines) == set(expected)  # at least once: nothing lost
    assert len(lines) - len(set(lines)) <= 1  # exact positions: at most the record in the trainer's hand again


def test_a_notice_file_drains_under_exactly_once_and_every_record_is_committed_once(client, dirs, tmp_path):
    data, out = dirs
    expected = [line for day in (1, 2) for line in write_day(data, day, lines=2500)]
    notice = tmp_path / "node-terminating"
    spec = data_spec(out, data, replicas=2, task_size="8Ki", delivery="exactly_once",
                     time_range={"start": "2026-12-01", "end": "2026-12-02"},
                     env={"COMMIT_EVERY": "200", "SLEEP_EVERY": "100", "SLEEP": "0.3", "CHECKPOINT_ON_SIGTERM": "1"})
    spec["roles"][0]["preemption"] = {"notice_file": str(notice), "grace": "20s"}
    app = client.submit(spec)
    wait_for(lambda: len({f.name.split("-")[3] for f in out.glob("batch-ckpt-0-*")}) == 2, 30,
             "both trainers committed (they then handle SIGTERM)")
    notice.write_text("spot instance reclaimed in 2 minutes\n")
    # Every executor of the node drains; their replacements must not see the notice again. Each one's
    # event is remembered once seen: the status carries the last 50 events, which the tasks' own
    # events push a drain out of between two polls on a loaded machine.
    draining: set[str] = set()

    def both_draining() -> bool:
        draining.update(e.subject for e in client.status(app).events if e.to_state == "draining")
        return draining == {"worker-0", "worker-1"}

    wait_for(both_draining, 30, "both executors draining")
    notice.unlink()
    status = client.wait(app, timeout=90)
    assert status.job.state == "succeeded", status.job
    for executor_id in ("worker-0", "worker-1"):
        check_drained(client, app, executor_id, f"draining: preemption notice {notice} appeared")
    committed = committed_lines(client, app, out)
    assert sorted(committed) == sorted(expected)  # every record, each exactly once
    # The drained trainers committed on SIGTERM what they had read: their checkpoints are final ones.
    assert len(list(out.glob("batch-ckpt-0-*-final.txt"))) == 2


def test_the_drain_api_drains_an_executor_and_records_who_asked(client):
    app = client.submit(make_spec([{"name": "worker", "replicas": 2, "command": "sleep 300"}]))
    wait_for(lambda: client.status(app).job.state == "running", 30, "job running")
    address, token = client.cluster("local").am_endpoint(app)
    url = f"http://{address}/api/v1/executors"
    headers = {"Authorization": "Bearer " + token, USER_HEADER: "ci-bot"}
    before = executor(client.status(app), "worker-1")
    reply = requests.post(f"{url}/worker-1/drain", json={"reason": "node maintenance"}, headers=headers, timeout=10)
    assert reply.json() == {"executor": "worker-1", "incarnation": before.incarnation}, reply.text

    def replaced() -> ExecutorView | None:
        ex = executor(client.status(app), "worker-1")
        return ex if ex.incarnation != before.incarnation and ex.state == "running" else None

    wait_for(replaced, 30, "worker-1 replaced")
    status = client.status(app)
    drained = next(e for e in status.events if e.subject == "worker-1" and e.to_state == "draining")
    assert (drained.reason, drained.actor) == ("drain requested: node maintenance", "ci-bot")
    assert status.roles[0].failures == 0
    ended = next(e for e in status.events if e.subject == "worker-1" and e.to_state == "failed")
    assert ended.exit_code == protocol.EXIT_PREEMPTED and "drain requested: node maintenance" in ended.reason
    again = requests.post(f"{url}/worker-9/drain", json={}, headers=headers, timeout=10)
    assert again.status_code == 404
    client.kill(app)


def test_an_executor_the_am_stops_ends_stopped_though_its_sigterm_is_a_notice(client):
    """Every SIGTERM drains, also the one the local backend sends when the AM stops an executor (here on a
    scale-down): the AM's own stop still decides how it ends."""
    app = client.submit(make_spec([{"name": "worker", "replicas": 2, "command": "sleep 300"}]))
    wait_for(lambda: client.status(app).job.state == "running", 30, "job running")
    client.scale(app, "worker", 1)
    dropped = wait_for(lambda: next((e for e in client.status(app).events if e.subject == "worker-1"
                                     and e.to_state in ("stopped", "failed")), None), 30, "worker-1 ended")
    assert dropped.to_state == "stopped" and "scaled down" in dropped.reason, dropped
    role = client.status(app).roles[0]
    assert role.restarts == 0 and role.failures == 0
    client.kill(app)
