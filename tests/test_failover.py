"""Failover policies applied to real executor processes."""

from __future__ import annotations

import pytest

from conftest import FAST_AM, executor, make_spec, read_log, wait_for
from primus_runtime import procfs

FAIL_FIRST_TRY = 'if [ "$PRIMUS_ATTEMPT" = 0 ]; then exit 1; fi; sleep 0.2'


def test_worker_failing_once_is_restarted_and_the_job_succeeds(client):
    app = client.submit(make_spec([{"name": "worker", "replicas": 2, "command": FAIL_FIRST_TRY}]))
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded", status.job
    for index in range(2):
        ex = executor(status, f"worker-{index}")
        assert ex.state == "succeeded" and ex.attempt == 1
    roles = {r.name: r for r in status.roles}
    assert roles["worker"].failures == 2 and roles["worker"].restarts == 2
    failed = [e for e in status.events if e.to_state == "failed"]
    assert len(failed) == 2 and all(e.exit_code == 1 for e in failed)
    # The replacement is a new incarnation of the same index.
    incarnations = {e.incarnation for e in status.events if e.subject == "worker-0"}
    assert len(incarnations) == 2


def test_ps_failure_fails_the_job_naming_the_ps(client):
    app = client.submit(make_spec([
        {"name": "ps", "replicas": 1, "command": "sleep 0.5; exit 3"},
        {"name": "worker", "replicas": 1, "command": "sleep 60"},
    ]))
    status = client.wait(app, timeout=60)
    assert status.job.state == "failed"
    assert "ps-0 failed (exit 3" in status.job.reason and "restart policy 'never'" in status.job.reason
    assert executor(status, "worker-0").state == "stopped"


def test_exhausted_budget_fails_the_job(client):
    app = client.submit(make_spec([{"name": "worker", "replicas": 1, "command": "exit 2",
                                    "failover": {"max_failures_per_index": 2}}]))
    status = client.wait(app, timeout=60)
    assert status.job.state == "failed"
    assert "worker-0 failed 3 times, max_failures_per_index is 2" in status.job.reason
    assert executor(status, "worker-0").attempt == 2


@pytest.mark.parametrize("command,said", [
    (["no_such_binary"], "cannot launch 'no_such_binary': [Errno 2] No such file or directory"),
    ("no_such_binary --epochs 3", "no_such_binary: command not found"),  # the shell exits 127
])
def test_a_command_that_cannot_run_is_not_restarted(client, command, said):
    app = client.submit(make_spec([{"name": "worker", "command": command,
                                    "failover": {"restart": "on_failure", "max_failures_per_index": 5}}]))
    status = client.wait(app, timeout=60)
    assert status.job.state == "failed"
    reason = status.job.reason
    assert said in reason and "exit 127 is in permanent_exit_codes" in reason, reason
    assert executor(status, "worker-0").attempt == 0
    assert said in read_log(client, app, "worker", 0, "stderr")
    if isinstance(command, list):
        assert said in read_log(client, app, "worker", 0, "executor")


def test_a_permanent_failure_of_an_ignorable_role_ignores_it_at_once(client):
    app = client.submit(make_spec([
        {"name": "worker", "replicas": 1, "command": "sleep 1"},
        {"name": "evaluator", "replicas": 1, "command": "exit 3", "success_percent": 0,
         "failover": {"max_failures_per_index": 5, "on_exhausted": "ignore_role", "retryable_exit_codes": [1]}},
    ]))
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded"
    assert executor(status, "evaluator-0").attempt == 0
    ignored = [e for e in status.events if e.subject == "role/evaluator" and e.to_state == "ignored"]
    assert len(ignored) == 1 and "exit 3 is not in retryable_exit_codes [1]" in ignored[0].reason


def test_role_budget_caps_failures_across_indices(client):
    app = client.submit(make_spec([{"name": "worker", "replicas": 3, "command": "exit 2",
                                    "failover": {"max_failures_per_index": 5, "max_failures_per_role": 2}}]))
    status = client.wait(app, timeout=60)
    assert status.job.state == "failed"
    assert "max_failures_per_role is 2" in status.job.reason


def test_exhausted_ignore_role_lets_the_job_go_on(client):
    app = client.submit(make_spec([
        {"name": "worker", "replicas": 1, "command": "sleep 1"},
        {"name": "evaluator", "replicas": 1, "command": "exit 4", "success_percent": 0,
         "failover": {"max_failures_per_index": 0, "on_exhausted": "ignore_role"}},
    ]))
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded", status.job
    assert {r.name: r for r in status.roles}["evaluator"].ignored
    assert any(e.subject == "role/evaluator" and e.to_state == "ignored" for e in status.events)


def test_ignoring_the_only_waited_role_fails_the_job(client):
    app = client.submit(make_spec([{"name": "worker", "replicas": 1, "command": "exit 4",
                                    "failover": {"max_failures_per_index": 0, "on_exhausted": "ignore_role"}}]))
    status = client.wait(app, timeout=60)
    assert status.job.state == "failed" and "no role left to wait on" in status.job.reason


def test_preemption_exit_code_is_restarted_without_charge(client):
    preempted_once = 'if [ "$PRIMUS_ATTEMPT" = 0 ]; then exit 42; fi; sleep 0.2'
    app = client.submit(make_spec([{"name": "worker", "replicas": 1, "command": preempted_once,
                                    "failover": {"max_failures_per_index": 0, "preemption_exit_codes": [42]}}]))
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded", status.job
    role = status.roles[0]
    assert role.failures == 0 and role.restarts == 1


def test_restart_always_restarts_even_after_success(client):
    app = client.submit(make_spec([
        {"name": "worker", "replicas": 1, "command": "sleep 2"},
        {"name": "service", "replicas": 1, "command": "sleep 0.2", "success_percent": 0,
         "failover": {"restart": "always"}},
    ]))
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded"
    assert executor(status, "service-0").attempt >= 2


def test_success_percent_ends_the_job_once_enough_succeeded(client):
    slow_odd = 'if [ $((PRIMUS_INDEX % 2)) = 1 ]; then sleep 60; fi; sleep 0.3'
    app = client.submit(make_spec([{"name": "worker", "replicas": 4, "command": slow_odd, "success_percent": 50}]))
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded", status.job
    states = {e.id: e.state for e in status.executors}
    assert states == {"worker-0": "succeeded", "worker-1": "stopped", "worker-2": "succeeded", "worker-3": "stopped"}


def test_job_fails_when_all_executors_ended_without_meeting_success(client):
    app = client.submit(make_spec([{"name": "worker", "replicas": 2, "command": "exit 1",
                                    "failover": {"max_failures_per_index": 0}}]))
    status = client.wait(app, timeout=60)
    assert status.job.state == "failed"
    assert "worker-" in status.job.reason and "max_failures_per_index is 0" in status.job.reason


def test_hung_executor_is_detected_as_lost_and_replaced(client):
    import os
    import signal
    import time

    app = client.submit(make_spec([{"name": "worker", "replicas": 2, "command": "sleep 60"}]))
    wait_for(lambda: client.status(app).job.state == "running", 30, "job running")
    victim = executor(client.status(app), "worker-1")
    stopped_at = time.time()  # the AM stamps its events with the wall clock
    os.kill(victim.pid, signal.SIGSTOP)
    replaced = wait_for(lambda: (ex := executor(client.status(app), "worker-1")).incarnation !=
                        victim.incarnation and ex.state == "running" and ex, 30, "replacement running")
    lost = [e for e in client.status(app).events if e.to_state == "lost" != e.from_state]
    assert len(lost) == 1 and lost[0].incarnation == victim.incarnation
    assert "no heartbeat" in lost[0].reason
    assert replaced.attempt == 1
    # Lost only once heartbeat_timeout has passed since it went silent (never earlier), and soon
    # after: the slack covers the last heartbeat before the stop, the AM's check interval and a
    # loaded machine, not a check that waits for something else (an exit, the job's end).
    timeout = FAST_AM["heartbeat_timeout"]
    assert timeout <= lost[0].time - stopped_at + FAST_AM["heartbeat_interval"] < timeout + 10, \
        (lost[0], stopped_at)
    # The stopped executor was force-killed, not left frozen.
    wait_for(lambda: not procfs.alive(victim.pid), 10, "the hung executor to be reaped")
    # Its exit code, which the backend learns after the AM declared it lost, is kept (issue 25: it
    # stayed null, as YARN's container status of a lost executor arrives after the loss).
    ended = wait_for(lambda: (ex := next(e for e in client.incarnations(app, ids=["worker-1"])
                                         if e.incarnation == victim.incarnation)).exit_code is not None and ex,
                     10, "the lost incarnation's exit code")
    killed = 128 + signal.SIGKILL  # the local backend's code for "killed by signal 9", as a shell's
    assert ended.state == "lost" and ended.exit_code == killed, ended
    late = [e for e in client.status(app).events if e.incarnation == victim.incarnation
            and e.from_state == e.to_state == "lost"]
    assert len(late) == 1 and late[0].exit_code == killed and "ended later" in late[0].reason, late
    client.kill(app)
