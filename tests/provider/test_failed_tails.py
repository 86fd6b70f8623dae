"""A failed job's task log has the stderr tail of every failed executor incarnation, earlier ones
that failover restarted included, bounded; the worker path and the deferred path alike."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator
from conftest import make_spec, wait_for

from .conftest import make_context

# worker-0 writes 30 stderr lines and fails; its failover restarts it once; the new incarnation
# fails the same way, for good (max_failures_per_index: 1).
FAILS_TWICE = [{"name": "worker", "ports": 0, "failover": {"max_failures_per_index": 1},
                "command": 'for i in $(seq 1 30); do echo "attempt-$PRIMUS_ATTEMPT line-$i" >&2; done; exit 3'}]
# worker-0 fails once, and its replacement runs on.
FAILS_ONCE_THEN_RUNS = [{"name": "worker", "ports": 0, "failover": {"max_failures_per_index": 1},
                         "command": 'if [ "$PRIMUS_ATTEMPT" = 0 ]; then echo first-try-broke >&2; exit 3; fi; '
                                    'sleep 300'}]


def assert_both_incarnations_tailed(out: str, app_id: str, home) -> None:
    for attempt in (0, 1):
        assert f"Executor worker-0 (attempt {attempt}) failed (exit code 3" in out, out
        assert f"attempt-{attempt} line-30" in out and f"attempt-{attempt} line-11" in out
        assert f"attempt-{attempt} line-10" not in out  # 20 lines of each, the newest
    assert f"primus --home {home} logs {app_id} --role worker --index 0 --stream stderr" in out


def test_a_failed_task_logs_the_stderr_tail_of_each_failed_incarnation(primus_home, client, capsys):
    op = PrimusSubmitJobOperator(task_id="train", spec=make_spec(FAILS_TWICE), poll_interval=0.2, follow_logs=[])
    with pytest.raises(AirflowException, match="worker-0 failed 2 times"):
        op.execute(make_context())
    assert_both_incarnations_tailed(capsys.readouterr().out, op.app_id, primus_home)


def test_the_deferred_path_logs_the_same_tails(primus_home, client, capsys):
    app_id = PrimusHook().submit(make_spec(FAILS_TWICE))
    status = wait_for(lambda: (s := client.status(app_id)).job.state == "failed" and s, 60, "the job failed")
    op = PrimusSubmitJobOperator(task_id="train", spec={}, deferrable=True)
    capsys.readouterr()
    with pytest.raises(AirflowException, match="worker-0 failed 2 times"):
        op.execute_complete({}, {"status": "failed", "app_id": app_id, "state": "failed",
                                 "reason": status.job.reason})
    assert_both_incarnations_tailed(capsys.readouterr().out, app_id, primus_home)


def test_tails_are_bounded_and_the_others_named_with_the_command_to_read_them(primus_home, client):
    hook = PrimusHook()
    app_id = hook.submit(make_spec(FAILS_TWICE))
    status = wait_for(lambda: (s := client.status(app_id)).job.state == "failed" and s, 60, "the job failed")
    first, more = hook.failed_executor_tails(app_id, status, lines=3, max_executors=1)
    assert first.startswith("Executor worker-0 (attempt 0) failed") and first.endswith(
        "attempt-0 line-28\nattempt-0 line-29\nattempt-0 line-30")  # the first failure: usually the cause
    assert more == (f"1 more failed executor incarnation not shown: worker-0 (attempt 1); read one with "
                    f"`primus --home {primus_home} logs {app_id} --role ROLE --index INDEX --stream stderr --attempt ATTEMPT`")


def test_a_running_job_names_its_earlier_failed_incarnations_too(primus_home, client):
    hook = PrimusHook()
    app_id = hook.submit(make_spec(FAILS_ONCE_THEN_RUNS))
    live = wait_for(lambda: (s := client.status(app_id)).roles and s.roles[0].restarts == 1
                    and s.job.state == "running" and s, 60, "worker-0 restarted")
    assert live.history is None  # the AM's /status has only the current incarnations: the hook asks for the rest
    (block,) = hook.failed_executor_tails(app_id, live)
    assert block.startswith("Executor worker-0 (attempt 0) failed (exit code 3") and block.endswith("first-try-broke")
    client.kill(app_id)


def test_a_followed_executors_last_lines_reach_the_task_log_when_its_am_is_already_gone(
        primus_home, client, capsys, monkeypatch):
    """The AM exits about a second after the outcome: the final poll cannot ask it for the followed
    executor's row, and the lines written last (an evaluation's result) must still be copied."""
    from primus_runtime.client import PrimusClient

    def am_gone(*args, **kwargs):
        raise OSError("connection refused: the AM has exited")

    monkeypatch.setattr(PrimusClient, "executors", am_gone)
    op = PrimusSubmitJobOperator(task_id="evaluate", poll_interval=0.2,
                                 spec=make_spec([{"name": "worker", "ports": 0, "command": "echo evaluation-result"}]))
    op.execute(make_context())
    assert "evaluation-result" in capsys.readouterr().out  # was missing: only the rows' request was tried
