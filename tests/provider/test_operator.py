"""PrimusSubmitJobOperator without an Airflow DB: a minimal context, real local jobs."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from datetime import datetime, timedelta

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.identity import SUBMIT_TAG, TaskInstanceRef
from airflow_provider_primus.links.primus import PrimusJobLink
from airflow_provider_primus.operators.primus import STATE_KEY, PrimusSubmitJobOperator
from airflow_provider_primus.version_compat import AIRFLOW_V_3_3_PLUS
from conftest import make_spec, wait_for
from primus_runtime.backends.local.jobs import processes_of_job

from .conftest import RUN_STARTED, FakeStateStore, execute_in_thread, make_context, requires_airflow_3_3

SLEEPY = [{"name": "worker", "replicas": 1, "ports": 0, "command": "sleep 60"}]
SHORT = [{"name": "worker", "replicas": 1, "ports": 0, "command": "sleep 1.5"}]
FAILING = [{"name": "worker", "replicas": 1, "ports": 0, "command": "echo broken-input >&2; exit 3",
            "failover": {"restart": "never"}}]
TI_TAGS = {"dag_id": "dag", "task_id": "train", "run_id": "manual__1", "map_index": "-1"}


def operator(spec, **kwargs) -> PrimusSubmitJobOperator:
    return PrimusSubmitJobOperator(task_id="train", spec=spec, poll_interval=0.2, **kwargs)


def running(hook: PrimusHook, app_id: str) -> bool:
    return hook.status(app_id).job.state == "running"


def test_submits_tags_pushes_app_id_and_returns_on_success(primus_home, client):
    store = FakeStateStore()
    context = make_context(try_number=1, store=store)
    app_id = operator(make_spec(SHORT)).execute(context)
    assert context["ti"].xcoms["app_id"] == app_id
    job = client.status(app_id).job
    assert job.state == "succeeded"
    tags = dict(job.tags)
    submit_id = tags.pop(SUBMIT_TAG)
    assert tags == {**TI_TAGS, "try_number": "1"}
    assert submit_id.endswith("@" + RUN_STARTED.isoformat())  # random id @ the DAG run's start
    # the identity a retry checks; marked delivered: the task returned this job's success (no store before 3.3)
    identity = {"app_id": app_id, "submit_id": submit_id, "delivered": True}
    assert store.get(STATE_KEY) == (identity if AIRFLOW_V_3_3_PLUS else None)
    # the "Primus job" link: the job's page in Airflow's api-server (test_job_page.py), pushed at submit
    assert context["ti"].xcoms[PrimusJobLink.xcom_key].startswith("/primus/jobs/dag/train?")


def test_the_jobs_am_page_the_link_leads_to_asks_for_the_token(primus_home, client):
    context = make_context()
    op = operator(make_spec(SLEEPY), wait_for_completion=False)
    app_id = op.execute(context)
    url = op.hook.job_url(app_id)  # where the link's page redirects while the job runs
    _, token = client.cluster("local").am_endpoint(app_id)
    assert token not in url
    with urllib.request.urlopen(url, timeout=10) as page:
        assert 'name="token"' in page.read().decode()  # the sign-in form: no data without the token
    form = urllib.parse.urlencode({"token": token, "name": "tester"}).encode()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    opener.open(url + "login", data=form, timeout=10)
    with opener.open(url.removesuffix("ui/") + "api/v1/whoami", timeout=10) as whoami:
        assert json.loads(whoami.read()) == {"user": "tester", "live": True, "app_id": app_id}
    client.kill(app_id)


def test_nothing_the_operator_returns_or_pushes_to_xcom_carries_the_token(primus_home, client):
    context = make_context()
    app_id = operator(make_spec(SLEEPY), wait_for_completion=False).execute(context)
    _, token = client.cluster("local").am_endpoint(app_id)
    shared = json.dumps({"returned": app_id, "xcoms": context["ti"].xcoms})
    assert app_id in shared and PrimusJobLink.xcom_key in shared
    assert token not in shared
    client.kill(app_id)


def test_waiting_copies_the_first_waited_roles_log_into_the_task_log(primus_home, client, capsys):
    spec = make_spec([{"name": "ps", "command": "echo ps-says-hi; sleep 60", "ports": 0},
                      {"name": "worker", "ports": 0, "command": "echo epoch-1; sleep 0.3; echo epoch-2"}])
    operator(spec).execute(make_context())
    out = capsys.readouterr().out
    assert "[worker-0 stdout] epoch-1" in out and "[worker-0 stdout] epoch-2" in out
    assert "ps-says-hi" not in out  # ps is not waited on: not followed by default


def tags_of_try(try_number: int, run_started: datetime = RUN_STARTED, **overrides: str) -> dict[str, str]:
    """The tags the operator gives the job of ``try_number`` of the task instance of ``make_context``."""
    submit_id = TaskInstanceRef(TI_TAGS, try_number, run_started.isoformat()).new_submit_id()
    return {**TI_TAGS, "try_number": str(try_number), SUBMIT_TAG: submit_id, **overrides}


def test_retry_reattaches_by_tags_to_the_running_job_without_a_second_submit(primus_home, client):
    hook = PrimusHook()
    first = hook.submit(make_spec(SHORT), tags=tags_of_try(1))  # try 1, then the worker died
    wait_for(lambda: running(hook, first), what="first job running")
    context = make_context(try_number=2)  # no task_state_store: Airflow < 3.3
    assert operator(make_spec(SHORT)).execute(context) == first
    assert context["ti"].xcoms["app_id"] == first
    assert [j.app_id for j in client.list()] == [first]
    assert client.status(first).job.state == "succeeded"  # it waited for the reattached job


@requires_airflow_3_3("the task state store")
def test_retry_reattaches_through_the_task_state_store(primus_home, client, capsys):
    hook = PrimusHook()
    tags = tags_of_try(1)
    first = hook.submit(make_spec(SLEEPY), tags=tags)
    wait_for(lambda: running(hook, first), what="job running")
    store = FakeStateStore({STATE_KEY: {"app_id": first, "submit_id": tags[SUBMIT_TAG]}})
    assert operator(make_spec(SLEEPY), wait_for_completion=False).execute(make_context(2, store=store)) == first
    assert f"Reattaching to Primus job {first}" in capsys.readouterr().out
    assert len(client.list()) == 1
    client.kill(first)


def submit_stale_job(hook: PrimusHook) -> tuple[str, datetime]:
    """A running job of an earlier DAG run with this run id (the run was failed, deleted and triggered
    again), carrying exactly this task instance's tags; and when that earlier run started."""
    earlier_run = RUN_STARTED - timedelta(hours=1)
    stale = hook.submit(make_spec(SLEEPY), tags=tags_of_try(1, run_started=earlier_run))
    wait_for(lambda: running(hook, stale), what="stale job running")
    return stale, earlier_run


@requires_airflow_3_3("the task state store")
def test_a_stale_running_job_with_the_same_tags_is_never_reattached(primus_home, client, capsys):
    """Try 1 of this run failed (the store names its job); the stale job runs on: try 2 submits its
    own job and says why it left the other one alone."""
    hook = PrimusHook()
    stale, earlier_run = submit_stale_job(hook)
    failed = hook.submit(make_spec(FAILING), tags=tags_of_try(1))
    wait_for(lambda: hook.status(failed).job.state == "failed", what="try 1's job failed")
    store = FakeStateStore({STATE_KEY: {"app_id": failed, "submit_id": client.spec(failed).tags[SUBMIT_TAG]}})

    new = operator(make_spec(SLEEPY), wait_for_completion=False).execute(make_context(2, store=store))
    assert new not in (stale, failed)
    assert store[STATE_KEY]["app_id"] == new
    out = capsys.readouterr().out
    assert f"Not reattaching to running Primus job {stale}" in out
    assert f"submitted in an earlier run with this run id (DAG run started {earlier_run.isoformat()}" in out
    # the next try reattaches to this run's own running job, not to the stale one
    assert operator(make_spec(SLEEPY), wait_for_completion=False).execute(make_context(3, store=store)) == new
    for app_id in (stale, new):
        client.kill(app_id)


def test_the_tag_search_never_reattaches_to_a_stale_job_either(primus_home, client, capsys):
    """Without a task state store (Airflow < 3.3), only the tags tell: the stale job is left alone,
    this run's own running job is found."""
    hook = PrimusHook()
    stale, _ = submit_stale_job(hook)
    new = operator(make_spec(SLEEPY), wait_for_completion=False).execute(make_context(1))
    assert new != stale
    assert f"Not reattaching to running Primus job {stale}" in capsys.readouterr().out
    assert operator(make_spec(SLEEPY), wait_for_completion=False).execute(make_context(2)) == new
    assert len(client.list()) == 2
    for app_id in (stale, new):
        client.kill(app_id)


@requires_airflow_3_3("the task state store")
def test_an_app_id_that_names_another_job_now_is_refused(primus_home, client, capsys):
    """The store's app id now names another task's job (ids reused after a cluster was reset): refused,
    naming what differs, and a new job submitted."""
    hook = PrimusHook()
    other = hook.submit(make_spec(SLEEPY), tags=tags_of_try(1, task_id="evaluate"))
    wait_for(lambda: running(hook, other), what="job running")
    store = FakeStateStore({STATE_KEY: {"app_id": other, "submit_id": f"0123456789ab@{RUN_STARTED.isoformat()}"}})
    new = operator(make_spec(SLEEPY), wait_for_completion=False).execute(make_context(2, store=store))
    assert new != other
    assert store[STATE_KEY] == {"app_id": new, "submit_id": client.spec(new).tags[SUBMIT_TAG], "delivered": False}
    out = capsys.readouterr().out
    assert (f"Refusing to reattach to Primus job {other}, which the task state store names: it belongs to another "
            "task instance: task_id='evaluate' (this task instance: 'train')") in out
    for app_id in (other, new):
        client.kill(app_id)


def test_the_identity_check_names_what_differs():
    ti = TaskInstanceRef(TI_TAGS, 2, RUN_STARTED.isoformat())
    ours = tags_of_try(1)
    assert ti.mismatch(ours) is None and ti.mismatch(ours, ours[SUBMIT_TAG]) is None
    assert "the app id now names another job" in ti.mismatch(ours, "0123456789ab@x")
    assert "has no submit_id tag" in ti.mismatch({**TI_TAGS, "try_number": "1"})
    assert "map_index='3' (this task instance: '-1')" in ti.mismatch(tags_of_try(1, map_index="3"))
    unknown = TaskInstanceRef(TI_TAGS, 2, "unknown")  # a context without the DAG run's start
    assert "earlier run" in unknown.mismatch(ours)


@requires_airflow_3_3("the task state store")
def test_a_finished_previous_job_or_another_map_index_is_not_reused(primus_home, client):
    hook = PrimusHook()
    done = hook.submit(make_spec(SHORT), tags=tags_of_try(1))
    wait_for(lambda: hook.status(done).job.state == "succeeded", what="first job done")
    other_index = hook.submit(make_spec(SLEEPY), tags=tags_of_try(1, map_index="3"))
    wait_for(lambda: running(hook, other_index), what="other map index running")

    # the task returned the first job's success, then was cleared: it trains again
    store = FakeStateStore({STATE_KEY: {"app_id": done, "submit_id": client.spec(done).tags[SUBMIT_TAG],
                                        "delivered": True}})
    new = operator(make_spec(SLEEPY), wait_for_completion=False).execute(make_context(2, store=store))
    assert new not in (done, other_index)
    assert store[STATE_KEY]["app_id"] == new
    assert client.spec(new).tags["try_number"] == "2"
    for app_id in (new, other_index):
        client.kill(app_id)


@requires_airflow_3_3("the task state store")
def test_a_job_that_succeeded_while_no_try_watched_is_returned_not_run_again(primus_home, client, capsys):
    """The worker died after the job was stored; the job then succeeded: the retry returns it."""
    hook = PrimusHook()
    tags = tags_of_try(1)
    done = hook.submit(make_spec(SHORT), tags=tags)
    wait_for(lambda: hook.status(done).job.state == "succeeded", what="job done")
    store = FakeStateStore({STATE_KEY: {"app_id": done, "submit_id": tags[SUBMIT_TAG]}})
    context = make_context(2, store=store)
    assert operator(make_spec(SHORT)).execute(context) == done
    assert context["ti"].xcoms["app_id"] == done
    assert store[STATE_KEY]["delivered"] is True
    assert len(client.list()) == 1
    assert f"Primus job {done} of a previous try already succeeded" in capsys.readouterr().out


def test_failed_job_raises_retryable_error_with_the_runtime_reason(primus_home, client):
    with pytest.raises(AirflowException, match=r"failed: .*worker") as info:
        operator(make_spec(FAILING)).execute(make_context())
    assert not isinstance(info.value, AirflowFailException)


# Reads its lines from stdin (0.5 ms each: long enough for heartbeats to report progress) and
# appends them to $OUT/lines.txt; the first job to run it fails after 3,000 lines (leaving
# $OUT/failed-once behind), later ones read to the end.
FAIL_ONCE_READER = """
import os, sys, time
out = os.environ["OUT"]
first = not os.path.exists(os.path.join(out, "failed-once"))
with open(os.path.join(out, "lines.txt"), "a") as f:
    for n, line in enumerate(sys.stdin, 1):
        f.write(line)
        f.flush()
        time.sleep(0.0005)
        if first and n == 3000:
            open(os.path.join(out, "failed-once"), "w").close()
            sys.exit(3)
"""


def test_a_retry_after_a_failed_job_resumes_its_data_instead_of_reading_it_again(primus_home, client, tmp_path):
    day = tmp_path / "data" / "20261201"
    day.mkdir(parents=True)
    # 600 KB: more than the feed's safety margin (what may sit in the pipe and the trainer's
    # buffers when it dies, never counted as consumed)
    every_line = [f"record-{n:05d}-" + "x" * 86 for n in range(6000)]
    for part in range(3):
        (day / f"part-{part}.txt").write_text("".join(f"{line}\n" for line in every_line[part::3]))
    (day / "_SUCCESS").touch()
    out = tmp_path / "out"
    out.mkdir()
    spec = make_spec(
        [{"name": "worker", "ports": 0, "consumes_input": True, "command": ["python3", "-c", FAIL_ONCE_READER],
          "env": {"OUT": str(out)}, "failover": {"restart": "never"}}],
        input={"sources": [{"name": "lines", "path": str(tmp_path / "data" / "{{YYYY}}{{MM}}{{DD}}"),
                            "format": "text"}],
               "time_range": {"start": "2026-12-01", "end": "2026-12-01"}, "task_size": "16Ki"},
    )
    with pytest.raises(AirflowException):  # try 1: the trainer fails, the job fails
        operator(spec).execute(make_context(try_number=1))
    (first,) = client.list()
    first_dir = client.spec(first.app_id).input.work_preserve_dir
    assert first_dir.startswith(str(primus_home / "work-preserve" / "dag" / "train" / "manual__1"))
    second = operator(spec).execute(make_context(try_number=2))  # try 2: a new job on the same checkpoint
    assert client.spec(second).input.work_preserve_dir == first_dir
    assert client.status(second).data.state == "succeeded"
    read = (out / "lines.txt").read_text().split()
    assert set(read) == set(every_line)  # nothing lost across the two jobs
    assert len(read) < 3000 + len(every_line)  # what the failed job had consumed was not all read again


@pytest.mark.parametrize("deferrable", [False, True], ids=["waiting", "deferred"])
def test_missing_input_fails_the_task_without_retry(primus_home, client, tmp_path, deferrable):
    spec = make_spec([{"name": "worker", "ports": 0, "consumes_input": True, "command": "cat > /dev/null"}],
                     input={"sources": [{"name": "lines", "path": str(tmp_path / "nowhere"), "format": "text",
                                         "success_marker": None}]})
    op = operator(spec, deferrable=deferrable)
    with pytest.raises(AirflowFailException, match="input path .*nowhere does not exist"):
        if not deferrable:
            op.execute(make_context())
        else:
            with pytest.raises(TaskDeferred) as info:
                op.execute(make_context())
            event = asyncio.run(asyncio.wait_for(info.value.trigger.run().__anext__(), 60)).payload
            op.execute_complete(make_context(), event)


def test_invalid_spec_fails_without_retry_and_submits_nothing(primus_home, client):
    with pytest.raises(AirflowFailException, match=r"roles\[0\]\.replicas"):
        operator(make_spec([{**SLEEPY[0], "replicas": 0}])).execute(make_context())
    assert client.list() == []


def test_spec_dict_is_templated():
    op = operator({"name": "job-{{ ds_nodash }}", "roles": [
        {"name": "worker", "replicas": "{{ params.replicas }}", "command": "train --date {{ ds }}"}]})
    op.render_template_fields({"ds": "2026-01-02", "ds_nodash": "20260102", "params": {"replicas": 3}})
    job = PrimusHook().load_spec(op.spec)
    assert (job.name, job.roles[0].replicas, job.roles[0].command) == ("job-20260102", 3, "train --date 2026-01-02")


@pytest.mark.parametrize("action", ["kill", "keep"])
def test_on_kill_makes_the_wait_raise_and_kills_or_keeps_the_job(primus_home, client, action):
    op = operator(make_spec(SLEEPY), on_kill_action=action)
    thread, outcome = execute_in_thread(op)
    hook = PrimusHook()
    wait_for(lambda: op.app_id and running(hook, op.app_id), what="job running")
    started = time.monotonic()
    op.on_kill()
    assert time.monotonic() - started < op.kill_timeout + 1  # bounded
    thread.join(10)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), AirflowException), outcome  # never a silent success
    if action == "kill":
        wait_for(lambda: hook.status(op.app_id).job.state == "killed", what="job killed")
        wait_for(lambda: processes_of_job(op.app_id) == [], what="no process left")
    else:
        assert running(hook, op.app_id)


def test_kill_during_submit_still_kills_the_job(primus_home, client, monkeypatch):
    op = operator(make_spec(SLEEPY))
    submit = PrimusHook.submit

    def submit_then_get_killed(self, *args, **kwargs):
        app_id = submit(self, *args, **kwargs)
        op.on_kill()  # SIGTERM arrives before execute() knows the app id
        return app_id

    monkeypatch.setattr(PrimusHook, "submit", submit_then_get_killed)
    with pytest.raises(AirflowException, match="task was killed"):
        op.execute(make_context())
    wait_for(lambda: client.status(op.app_id).job.state == "killed", what="job killed")


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="on_kill_action"):
        operator({}, on_kill_action="cancel")
    with pytest.raises(ValueError, match="poll_interval"):
        PrimusSubmitJobOperator(task_id="t", spec={}, poll_interval=0)


def test_sigterm_during_the_wait_kills_the_job_and_fails_the_task(primus_home, client, tmp_path):
    # As Airflow's task runner does: SIGTERM -> on_kill() inside the handler, on the main thread
    # that is blocked in the wait loop; execute() must then raise, not carry on waiting.
    script = tmp_path / "task.py"
    script.write_text(f"""
import signal, sys, types
from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator
ti = types.SimpleNamespace(dag_id="dag", task_id="train", run_id="r", map_index=-1, try_number=1,
                           xcom_push=lambda key, value: None, stats_tags={{}})
op = PrimusSubmitJobOperator(task_id="train", spec={make_spec(SLEEPY)!r}, poll_interval=30)
signal.signal(signal.SIGTERM, lambda *_: op.on_kill())
try:
    op.execute({{"ti": ti}})
except Exception as exc:
    print("RAISED", type(exc).__name__, exc, flush=True)
    sys.exit(7)
""")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    hook = PrimusHook()
    try:
        def submitted():
            assert proc.poll() is None, proc.communicate()[0]  # the task died before submitting
            return (jobs := client.list()) and jobs[0].app_id

        app_id = wait_for(submitted, what="job submitted")
        wait_for(lambda: running(hook, app_id), what="job running")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)  # well before the 30 s poll interval
    finally:
        proc.kill()
    assert proc.returncode == 7, out
    assert "RAISED AirflowException task was killed" in out
    wait_for(lambda: hook.status(app_id).job.state == "killed", what="job killed")


def test_per_task_data_checkpoint_dirs_are_names_hdfs_accepts(primus_home, client):
    from primus_runtime.spec import input_url

    tags = {"dag_id": "dag", "task_id": "train", "run_id": "scheduled__2026-12-01T00:00:00+00:00", "map_index": "-1"}
    path = operator(make_spec(SLEEPY))._work_preserve_dir(TaskInstanceRef(tags, 1, RUN_STARTED.isoformat()))
    assert path.endswith("/dag/train/scheduled__2026-12-01T00_00_00_00_00/-1/try-1")
    assert input_url("hdfs://" + path)  # the same name under an hdfs:// root is valid
