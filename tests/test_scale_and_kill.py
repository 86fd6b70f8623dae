"""Scaling a running role, killing jobs, and the AM dying: no process left behind."""

from __future__ import annotations

import json
import os
import signal
import sys

from conftest import executor, make_spec, read_log, wait_for
from primus_runtime.backends.local.jobs import processes_of_job

# Prints the worker membership each time the cluster file changes.
WATCH_MEMBERSHIP = [sys.executable, "-c", """
import json, os, time
path, seen = os.environ["PRIMUS_CLUSTER_FILE"], None
while True:
    workers = json.load(open(path))["roles"]["worker"]
    if workers != seen:
        seen = workers
        print("members", len(workers), json.dumps(workers), flush=True)
    time.sleep(0.1)
"""]


def _last_membership(client, app, index=0):
    lines = [line for line in read_log(client, app, "worker", index).splitlines() if line.startswith("members")]
    return json.loads(lines[-1].split(" ", 2)[2]) if lines else None


def test_scale_up_and_down_while_running_tells_running_executors(client):
    app = client.submit(make_spec([{"name": "worker", "replicas": 2, "command": WATCH_MEMBERSHIP}]))
    wait_for(lambda: client.status(app).job.state == "running", 30, "job running")

    assert client.scale(app, "worker", 3).model_dump(mode="json") == {"role": "worker", "replicas": 3}
    wait_for(lambda: executor(client.status(app), "worker-2").state == "running", 30, "worker-2 running")
    members = wait_for(lambda: (m := _last_membership(client, app)) and len(m) == 3 and all(m) and m, 15,
                       "worker-0 to see 3 members")
    assert len(set(members)) == 3

    client.scale(app, "worker", 1)
    wait_for(lambda: _last_membership(client, app) is not None and len(_last_membership(client, app)) == 1, 15,
             "worker-0 to see 1 member")
    status = client.status(app)
    assert [e.id for e in status.executors] == ["worker-0"]
    assert status.roles[0].replicas == 1
    scale_events = [(e.from_state, e.to_state) for e in status.events if e.subject == "role/worker"]
    assert scale_events == [("2", "3"), ("3", "1")]
    stopped = [e for e in status.events if e.to_state == "stopped"]
    assert {e.subject for e in stopped} == {"worker-1", "worker-2"}
    assert all(e.reason == "scaled down to 1" for e in stopped)
    client.kill(app)


def test_scale_rejects_unknown_roles_and_bad_counts(client):
    import pytest

    from primus_runtime.api_client import AMRejected

    app = client.submit(make_spec([{"name": "worker", "replicas": 1, "command": "sleep 60"}]))
    wait_for(lambda: client.status(app).job.state == "running", 30, "job running")
    with pytest.raises(AMRejected) as info:
        client.scale(app, "ghost", 2)
    assert info.value.status == 404 and "no role 'ghost'" in info.value.message
    with pytest.raises(AMRejected) as info:
        client.scale(app, "worker", -1)
    assert info.value.status == 400
    with pytest.raises(AMRejected) as info:
        client.scale(app, "worker", 0)
    assert info.value.status == 409 and "must keep at least 1 replica" in info.value.message
    client.kill(app)


def test_kill_leaves_no_process_of_the_job(client):
    # The trainer ignores SIGTERM and forks a grandchild: both must still go.
    stubborn = "trap '' TERM; sleep 300 & sleep 300"
    app = client.submit(make_spec([{"name": "ps", "replicas": 1, "command": stubborn},
                                   {"name": "worker", "replicas": 2, "command": stubborn}]))
    wait_for(lambda: client.status(app).job.state == "running", 30, "job running")
    assert len(processes_of_job(app)) >= 1 + 3 * 3  # AM + (executor, bash, 2x sleep) per executor
    status = client.kill(app, reason="test says stop")
    assert status.job.state == "killed"
    assert "test says stop" in status.job.reason
    assert processes_of_job(app) == []
    assert all(e.state == "stopped" and e.reason.startswith("job killed") for e in status.executors)


def test_am_death_leaves_no_orphan_executors(client):
    # One attempt: nobody restarts the AM (the default restarts it: tests/test_am_recovery.py).
    app = client.submit(make_spec([{"name": "worker", "replicas": 2, "command": "sleep 300"}], am={"max_attempts": 1}))
    wait_for(lambda: client.status(app).job.state == "running", 30, "job running")
    client.scale(app, "worker", 3)  # a change after the job started: only a periodic snapshot has it
    wait_for(lambda: executor(client.status(app), "worker-2").state == "running", 30, "worker-2 running")

    def snapshot_has_three_running():  # the status file the AM rewrites at most every 2 s
        saved = client.cluster("local").last_status(app)
        return saved is not None and [e["state"] for e in saved["executors"]] == ["running"] * 3

    wait_for(snapshot_has_three_running, 30, "the status file to show worker-2 running")
    am_pid = client.cluster("local").am_pid(app)
    os.kill(am_pid, signal.SIGKILL)
    # Executors notice within the heartbeat timeout (3s here), kill their trainers and exit.
    wait_for(lambda: processes_of_job(app) == [], 20, "executors and trainers to exit")
    status = client.status(app)
    assert status.job.state == "lost"
    # The last snapshot the AM wrote still tells who was running when it died, and no executor of
    # a job no AM watches any more reads `running`.
    assert [(e.state, e.reason) for e in status.executors] == \
        [("lost", "no AM watches it any more (last seen running)")] * 3
    assert {state: n for state, n in status.roles[0].states.items() if n} == {"lost": 3}


def test_sigterm_to_the_am_kills_the_job_gracefully(client):
    app = client.submit(make_spec([{"name": "worker", "replicas": 1, "command": "sleep 300"}]))
    wait_for(lambda: client.status(app).job.state == "running", 30, "job running")
    os.kill(client.cluster("local").am_pid(app), signal.SIGTERM)
    status = client.wait(app, timeout=30)
    assert status.job.state == "killed" and "SIGTERM" in status.job.reason
    wait_for(lambda: processes_of_job(app) == [], 10, "all processes gone")


def test_succeed_on_request_stops_executors_and_succeeds(client):
    app = client.submit(make_spec([{"name": "worker", "replicas": 1, "command": "sleep 300"}]))
    wait_for(lambda: client.status(app).job.state == "running", 30, "job running")
    client.succeed(app, reason="good enough")
    status = client.wait(app, timeout=30)
    assert status.job.state == "succeeded" and status.job.reason == "good enough"


def test_kill_right_after_submit_stops_the_job_through_its_am(client):
    app = client.submit(make_spec([{"name": "worker", "replicas": 2, "command": "sleep 300"}]))
    status = client.kill(app, reason="changed my mind")
    assert status.job.state == "killed" and status.job.reason == "changed my mind"
    assert processes_of_job(app) == []


def test_a_second_stop_while_the_job_ends_is_taken_as_asked(client):
    # The AM answers 409 to a kill of a job already ending: the kill sequence counts that as asked
    # (no force-kill), as the Airflow hooks, which delegate to it, need.
    app = client.submit(make_spec([{"name": "worker", "replicas": 1, "command": "trap '' TERM; sleep 60"}],
                                   am={"shutdown_grace": 5}))
    wait_for(lambda: client.status(app).job.state == "running", what="job running")
    assert client.stop(app, reason="first") is True
    assert client.stop(app, reason="second") is True  # 409 from the AM, still stopping its executor
    status = client.wait(app, timeout=60)
    assert status.job.state == "killed" and "first" in status.job.reason
