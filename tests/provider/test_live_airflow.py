"""The provider under a real Airflow: scheduler, dag-processor, triggerer and api-server running.

Every test drives Airflow only through its public REST API (``/api/v2``), as the UI does:
trigger a DAG run, watch the task instance, mark it failed. The Primus side is checked with
``PrimusClient`` on the components' Primus home. See ``live_airflow.py`` for how the components
are started and stopped.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from conftest import wait_for
from primus_runtime.backends.local.jobs import processes_of_job
from primus_runtime.client import PrimusClient
from primus_runtime.models import JobEntry

from .conftest import requires_airflow_3_3
from .live_airflow import AIRFLOW, REPO, ApiError, LiveAirflow, ancestors, cmdline, epoch, free_port, pids_with_cmdline

# Starting Airflow and running jobs through the scheduler on a loaded 2-core machine.
# LocalExecutor on SQLite, the task and asset state stores: Airflow 3.3.
pytestmark = [pytest.mark.timeout(600), requires_airflow_3_3("the live Airflow harness")]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveAirflow]:
    root = tmp_path_factory.mktemp("live-airflow")
    # primus_retrain_on_new_partition's watcher: where it looks, from which day, how often.
    retrain = {"PRIMUS_RETRAIN_DATA_ROOT": str(root / "retrain-data"), "PRIMUS_RETRAIN_START": "2026-12-01",
               "PRIMUS_RETRAIN_POLL_INTERVAL": "2"}
    airflow = LiveAirflow(root, with_examples=True, env=retrain)
    airflow.start()
    try:
        yield airflow
    finally:
        stray = airflow.stop()
    assert stray == [], f"Airflow processes outlived their components' sessions: {stray}"


def ti_tags(dag_id: str, run_id: str, task_id: str = "train") -> dict[str, str]:
    return {"dag_id": dag_id, "task_id": task_id, "run_id": run_id, "map_index": "-1"}


def job_of(client: PrimusClient, tags: dict[str, str], states: tuple[str, ...], timeout: float = 60.0
           ) -> JobEntry:
    """The one Primus job carrying ``tags``, once it is in one of ``states``."""
    def found() -> JobEntry | None:
        jobs = client.list(tags)
        assert len(jobs) <= 1, f"more than one Primus job for {tags}: {jobs}"
        if jobs and client.status(jobs[0].app_id).job.state in states:
            return jobs[0]
        return None
    return wait_for(found, timeout, f"a Primus job tagged {tags} to be {'/'.join(states)}", poll=0.2)


def test_marking_a_deferred_task_failed_kills_its_job(live: LiveAirflow):
    dag_id = "primus_live_deferred"
    with live.explain_failure(dag_id):
        client = PrimusClient(live.primus_home)
        live.wait_for_dag(dag_id)
        run_id = live.trigger_dag(dag_id)

        ti = live.wait_for_task_state(dag_id, run_id, "train", ("deferred", "failed", "success", "up_for_retry"))
        assert ti["state"] == "deferred", ti
        assert ti["trigger"]["classpath"] == "airflow_provider_primus.triggers.primus.PrimusJobTrigger"
        job = job_of(client, ti_tags(dag_id, run_id), ("running",))
        app_id = job.app_id
        assert live.xcom(dag_id, run_id, "train", "app_id") == app_id
        assert processes_of_job(app_id)  # AM, 2 executors, 2 trainers
        # The trigger runs in the triggerer and its progress lines reach the task log (REST API).
        wait_for(lambda: f"Primus job {app_id} running: worker x2: 2 running"
                   in live.task_log(dag_id, run_id, "train", 1), 60, "the trigger's progress in the task log", poll=1.0)

        marked = time.monotonic()
        live.set_task_state(dag_id, run_id, "train", "failed")  # the UI's "Mark as failed"

        def killed() -> dict[str, Any] | None:
            status = client.status(app_id)
            return status if status.job.state not in ("pending", "starting", "running") else None
        status = wait_for(killed, 60, f"Primus job {app_id} to end", poll=0.05)
        took = time.monotonic() - marked
        assert status.job.state == "killed", status.job
        # The trigger's on_kill did it (not a cleanup, not a timeout).
        assert "the deferred Airflow task was killed" in status.job.reason
        wait_for(lambda: not processes_of_job(app_id), 30, f"every process of job {app_id} to exit")
        print(f"mark failed -> Primus job killed: {took:.2f} s")

        assert live.task_instance(dag_id, run_id, "train")["state"] == "failed"
        assert live.wait_for_run_state(dag_id, run_id)["state"] == "failed"
        log = live.task_log(dag_id, run_id, "train", 1)
        assert "Trigger cancelled by user action, invoking on_kill" in log
        assert f"Deferred task killed: stopping Primus job {app_id}" in log


def test_marking_a_running_task_failed_kills_its_job(live: LiveAirflow):
    """The worker-slot twin of the test above: Airflow SIGTERMs the task, the operator's on_kill
    stops the job and the wait loop ends the try."""
    dag_id = "primus_live_running"
    with live.explain_failure(dag_id):
        client = PrimusClient(live.primus_home)
        live.wait_for_dag(dag_id)
        run_id = live.trigger_dag(dag_id)

        ti = live.wait_for_task_state(dag_id, run_id, "train", ("running", "failed", "success", "up_for_retry"))
        assert ti["state"] == "running", ti
        app_id = job_of(client, ti_tags(dag_id, run_id), ("running",)).app_id
        wait_for(lambda: f"Primus job {app_id} running: worker x2: 2 running"
                   in live.task_log(dag_id, run_id, "train", 1), 60, "the task to wait on the running job", poll=1.0)

        marked = time.monotonic()
        live.set_task_state(dag_id, run_id, "train", "failed")
        status = wait_for(lambda: (s := client.status(app_id)).job.state not in ("pending", "starting",
                                                                                          "running") and s,
                            60, f"Primus job {app_id} to end", poll=0.05)
        took = time.monotonic() - marked
        assert status.job.state == "killed", status.job
        assert "Airflow task train was killed" in status.job.reason
        wait_for(lambda: not processes_of_job(app_id), 30, f"every process of job {app_id} to exit")
        print(f"mark failed (running task) -> Primus job killed: {took:.2f} s")

        assert live.wait_for_run_state(dag_id, run_id)["state"] == "failed"
        assert live.task_instance(dag_id, run_id, "train")["state"] == "failed"
        assert not pids_with_cmdline(f"airflow worker -- {ti['id']}")  # the task process is gone too
        # Its progress says how it ended (issue 27: it stayed at "running"), written by the killed task.
        progress = task_state_store(live, dag_id, run_id, "primus_progress")
        assert progress["app_id"] == app_id and progress["outcome"] == {
            "status": "killed", "reason": f"task was killed while waiting for Primus job {app_id}; the job was killed"
        }, progress


def task_process(ti_id: str, timeout: float = 60.0) -> int:
    """The pid of the process running the task instance's ``execute()``.

    The LocalExecutor's worker runs a supervisor (``airflow worker -- LocalExecutor: <workload>``)
    which forks the task runner; the task runner names itself ``airflow worker -- <ti id>``
    (``setproctitle`` in ``airflow.sdk.execution_time.task_runner.startup``), the id the REST API
    gives as the task instance's ``id``."""
    (pid,) = wait_for(lambda: pids_with_cmdline(f"airflow worker -- {ti_id}"), timeout,
                        f"the task runner process of {ti_id}")
    return pid


@pytest.mark.parametrize("victim", ["task-process", "whole-worker"])
def test_sigkilled_task_process_retry_reattaches_to_the_same_job(live: LiveAirflow, victim: str):
    """``task-process``: SIGKILL the task runner; its supervisor reports the try failed at once.
    ``whole-worker``: SIGKILL the supervisor (the LocalExecutor worker process) and the task runner,
    as when a worker is lost; the scheduler fails the try once its heartbeat is overdue
    (``task_instance_heartbeat_timeout``, 30 s in the fixture)."""
    dag_id = "primus_live_reattach" if victim == "task-process" else "primus_live_reattach_lost_worker"
    with live.explain_failure(dag_id):
        client = PrimusClient(live.primus_home)
        live.wait_for_dag(dag_id)
        run_id = live.trigger_dag(dag_id)
        tags = ti_tags(dag_id, run_id)

        ti = live.wait_for_task_state(dag_id, run_id, "train", ("running", "failed", "success", "up_for_retry"))
        assert ti["state"] == "running" and ti["try_number"] == 1, ti
        job = job_of(client, tags, ("running",))
        app_id = job.app_id
        assert job.tags["try_number"] == "1"

        pid = task_process(ti["id"])
        # Ours: the scheduler -> LocalExecutor worker (the task's supervisor) -> this task runner.
        supervisor = ancestors(pid)[0]
        assert (cmdline(supervisor) or "").startswith("airflow worker -- LocalExecutor:"), cmdline(supervisor)
        assert live.procs["scheduler"].pid in ancestors(supervisor)
        assert pids_with_cmdline(f"airflow worker -- {ti['id']}") == [pid]
        victims = [pid] if victim == "task-process" else [supervisor, pid]
        for target in victims:
            os.kill(target, signal.SIGKILL)

        # Try 1 fails (at once, or after the heartbeat timeout), try 2 runs after retry_delay.
        run = live.wait_for_run_state(dag_id, run_id, timeout=300)
        ti = live.task_instance(dag_id, run_id, "train")
        assert (run["state"], ti["state"], ti["try_number"]) == ("success", "success", 2), (run, ti)

        first, second = (live.task_log(dag_id, run_id, "train", n) for n in (1, 2))
        assert f"Submitted Primus job {app_id}" in first
        assert f"Reattaching to Primus job {app_id}" in second
        assert "Submitted Primus job" not in second

        (only,) = client.list(tags)  # one job for both tries, by app id
        assert only.app_id == app_id
        assert client.status(app_id).job.state == "succeeded"
        assert live.xcom(dag_id, run_id, "train", "app_id") == app_id
        assert live.xcom(dag_id, run_id, "train", "return_value") == app_id


def test_a_run_triggered_again_with_the_same_run_id_never_reattaches_to_the_stale_job(live: LiveAirflow):
    """apache/airflow#71743's trap, Primus' way: a DAG run is failed and deleted while its job runs on
    (on_kill_action="keep"), then triggered again with the same run id. The new run's task carries the
    same tags as the stale job; it must submit its own job and say why it left the other alone."""
    dag_id, run_id = "primus_live_stale_job", "stale-check"
    with live.explain_failure(dag_id):
        client = PrimusClient(live.primus_home)
        live.wait_for_dag(dag_id)
        live.trigger_dag(dag_id, run_id=run_id)
        first = live.wait_for_task_state(dag_id, run_id, "train", ("running", "failed", "success"))
        assert first["state"] == "running", first
        stale = job_of(client, ti_tags(dag_id, run_id), ("running",)).app_id
        # A running run cannot be deleted: fail it (its task is killed, the job kept), then delete it.
        live.api("PATCH", f"/dags/{dag_id}/dagRuns/{run_id}", {"state": "failed"})
        wait_for(lambda: not pids_with_cmdline(f"airflow worker -- {first['id']}"), 120,
                 "the failed run's task process to exit", poll=1.0)
        live.delete_dag_run(dag_id, run_id)
        assert client.status(stale).job.state == "running"  # kept: on_kill_action="keep"

        live.trigger_dag(dag_id, run_id=run_id)
        ti = live.wait_for_task_state(dag_id, run_id, "train", ("running", "failed", "success"))
        assert ti["state"] == "running", ti

        def second_job() -> str | None:
            jobs = [job.app_id for job in client.list(ti_tags(dag_id, run_id)) if job.app_id != stale]
            return jobs[0] if jobs else None
        new = wait_for(second_job, 60, "the new run's own job", poll=0.5)
        log = wait_for(lambda: (text := live.task_log(dag_id, run_id, "train", 1)) and f"Submitted Primus job {new}"
                       in text and text, 60, "the task log to name its job", poll=1.0)
        assert f"Not reattaching to running Primus job {stale}" in log
        assert "submitted in an earlier run with this run id" in log
        assert f"Reattaching to Primus job {stale}" not in log
        assert client.spec(new).tags["submit_id"] != client.spec(stale).tags["submit_id"]
        for app_id in (new, stale):
            client.kill(app_id)


@pytest.mark.parametrize("dag_id", ["primus_quickstart", "primus_live_quickstart_deferred"])
def test_quickstart_dag_through_the_scheduler(live: LiveAirflow, dag_id: str):
    """The repository's quickstart DAG, unchanged (served from example_dags/ as a second DAG
    bundle), and the same job deferred, run by the scheduler and the triggerer."""
    with live.explain_failure(dag_id):
        client = PrimusClient(live.primus_home)
        live.wait_for_dag(dag_id)
        run_id = live.trigger_dag(dag_id)
        run = live.wait_for_run_state(dag_id, run_id, timeout=300)
        ti = live.task_instance(dag_id, run_id, "train")
        assert (run["state"], ti["state"]) == ("success", "success"), (run, ti)

        (job,) = client.list(ti_tags(dag_id, run_id))
        assert client.status(job.app_id).job.state == "succeeded"
        assert live.xcom(dag_id, run_id, "train", "app_id") == job.app_id
        log = live.task_log(dag_id, run_id, "train", 1)
        assert "succeeded: ps x2: 2 stopped | worker x2: 2 succeeded" in log  # role progress in the task log
        assert ("Pausing task as DEFERRED" in log) == dag_id.endswith("_deferred")
        # Said once per try (issue 27: the trigger said it again, in the triggerer, for each deferral).
        assert log.count("No connection 'primus_default': using the local backend") == 1, log
        fired = [record for record in live.task_log_records(dag_id, run_id, "train", 1)
                 if record.get("event") == "Trigger fired event"]
        assert len(fired) == dag_id.endswith("_deferred"), fired
        for record in fired:  # the event as Airflow logs it: small, no progress, no log paths
            assert len(str(record["result"])) < 300 and "progress" not in str(record["result"]), record



def test_the_daily_dag_runs_triggered_without_a_logical_date(live: LiveAirflow, tmp_path):
    """The REST API's default manual run (``"logical_date": null``, what trigger_dag posts) has no
    ``ds``: the daily example DAG trains on the day it was triggered (UTC) instead."""
    dag_id = "primus_daily_retraining"
    trainer = REPO / "examples" / "ps_worker" / "trainer.py"
    data_root, model_root = tmp_path / "data", tmp_path / "models"

    def write_partition(day: str) -> None:
        if not (data_root / day).exists():
            subprocess.run([sys.executable, str(trainer), "make-partition", str(data_root / day), "2000"], check=True)

    with live.explain_failure(dag_id):
        client = PrimusClient(live.primus_home)
        live.wait_for_dag(dag_id)
        # Unpaused at creation, the DAG got a scheduled run of the latest day, which waits for demo data
        # nobody writes, and max_active_runs=1 would queue this run behind it: once the scheduler made
        # every run due now (the next one is due after now), they are marked failed (as from the UI).
        wait_for(lambda: (after := live.api("GET", f"/dags/{dag_id}")["next_dagrun_run_after"]) is None
                 or epoch(after) > time.time(), 120, "the scheduler to create the runs due now", poll=1.0)
        for run in live.api("GET", f"/dags/{dag_id}/dagRuns")["dag_runs"]:
            if run["state"] not in ("success", "failed"):
                live.api("PATCH", f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run['dag_run_id'], safe='')}",
                         {"state": "failed"})
        write_partition(datetime.now(timezone.utc).strftime("%Y%m%d"))
        run_id = live.trigger_dag(dag_id, conf={"data_root": str(data_root), "model_root": str(model_root)})
        run = live.dag_run(dag_id, run_id)
        assert run["logical_date"] is None, run
        day = datetime.fromtimestamp(epoch(run["run_after"]), timezone.utc)
        write_partition(day.strftime("%Y%m%d"))  # midnight passed since the one above

        run = live.wait_for_run_state(dag_id, run_id, timeout=400)
        states = {task: live.task_instance(dag_id, run_id, task)["state"]
                  for task in ("wait_for_partition", "train", "data_consumed", "model_saved", "evaluate")}
        assert (run["state"], set(states.values())) == ("success", {"success"}), states
        (train,) = client.list({"dag_id": dag_id, "task_id": "train", "run_id": run_id})
        status = client.status(train.app_id)
        assert status.data is not None
        assert status.data.watermark == day.strftime("%Y-%m-%d") and status.data.records_done >= 2000
        assert sorted(p.name for p in (model_root / day.strftime("%Y%m%d")).iterdir()) == ["ps-0.json", "ps-1.json"]


def fetch(url: str, bearer: str | None = None, cookie: str | None = None,
          accept: str | None = None) -> tuple[int, str | None, str]:
    """GET ``url`` without following a redirect: (status, Location, body). ``bearer``: a JWT in the
    Authorization header (the REST API's way); ``cookie``: in the ``_token`` cookie (the UI's);
    ``accept``: the Accept header (a browser's asks for HTML)."""
    parts = urllib.parse.urlsplit(url)
    headers = {"Accept": accept} if accept else {}
    if bearer:
        headers["Authorization"] = f"Bearer {bearer}"
    if cookie:
        headers["Cookie"] = f"_token={cookie}"
    connection = http.client.HTTPConnection(parts.netloc, timeout=60)
    try:
        connection.request("GET", f"{parts.path}?{parts.query}", headers=headers)
        reply = connection.getresponse()
        return reply.status, reply.headers.get("Location"), reply.read().decode(errors="replace")
    finally:
        connection.close()


@contextlib.contextmanager
def api_server_with_sign_in(live: LiveAirflow) -> Iterator[str]:
    """A second api-server on the same home and database that signs users in (the fixture's lets
    every request in as admin, ``simple_auth_manager_all_admins``); its base URL. It checks the JWTs
    of the first one (the same secret)."""
    port = free_port()
    env = {**live.env, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "viewer:viewer",
           "AIRFLOW__API__PORT": str(port), "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}"}
    with open(live.log_dir / "api-server-sign-in.log", "ab") as log:
        proc = subprocess.Popen([AIRFLOW, "api-server"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            assert proc.poll() is None, f"the second api-server exited with {proc.returncode}"
            try:
                return fetch(f"{base_url}/api/v2/monitor/health")[0] == 200
            except OSError:
                return False
        wait_for(up, 120, "the second api-server to answer", poll=1.0)
        yield base_url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_job_link_leads_to_the_primus_tab_and_the_panel_reads_the_job_without_its_token(live: LiveAirflow):
    """The "Primus job" link as the UI gets it (the task instance's extra links), opened through an
    api-server that signs users in: the provider's plugin serves it, behind Airflow's authentication,
    and leads to the task instance's Primus tab, whose panel reads the job for the user (issue 26)."""
    dag_id = "primus_live_job_link"
    with live.explain_failure(dag_id), api_server_with_sign_in(live) as signing_in:
        client = PrimusClient(live.primus_home)
        live.wait_for_dag(dag_id)
        run_id = live.trigger_dag(dag_id)
        assert live.wait_for_run_state(dag_id, run_id)["state"] == "success"
        app_id = live.xcom(dag_id, run_id, "train", "app_id")
        links = live.api("GET", f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
                                "/taskInstances/train/links")
        url = links["extra_links"]["Primus job"]
        assert url.startswith(f"{live.base_url}/primus/jobs/{dag_id}/train?run_id="), url
        url = signing_in + url.removeprefix(live.base_url)

        for credentials in ({}, {"bearer": "not-a-jwt"}, {"cookie": "not-a-jwt"}):
            status, _, body = fetch(url, **credentials)  # Airflow's answer, nothing of the job
            assert status in (401, 403) and app_id not in body, (credentials, status, body)
        # A browser without a session is sent to Airflow's login, which leads it back to the page.
        status, location, body = fetch(url, accept="text/html,*/*;q=0.8")
        assert status == 303 and app_id not in body, (status, body)
        assert location == "/api/v2/auth/login?" + urllib.parse.urlencode({"next": url}), location
        status, location, _ = fetch(signing_in + location)
        assert status == 307 and location is not None and "login" in location, (status, location)

        assert client.status(app_id).job.state == "running"
        status, location, body = fetch(url, bearer=live.token())  # to the task instance's Primus tab
        assert status == 307, (status, body)
        assert location == (f"{signing_in}/dags/{dag_id}/runs/{urllib.parse.quote(run_id, safe='')}"
                            "/tasks/train/plugin/primus"), location
        _, token = client.cluster("local").am_endpoint(app_id)
        panel_api = (f"{signing_in}/primus/api/panel/{dag_id}/train?"
                     + urllib.parse.urlencode({"run_id": run_id, "map_index": -1}))
        status, _, body = fetch(panel_api, cookie=live.token())  # the panel's read, with the UI's session
        assert status == 200, (status, body)
        reply = json.loads(body)
        assert (reply["app_id"], reply["live"], reply["status"]["job"]["state"]) == (app_id, True, "running")
        assert token not in body

        client.kill(app_id, reason="the live test is done with it")
        status, _, body = fetch(panel_api, cookie=live.token())  # ended: its final page, from what the AM left
        assert status == 200, (status, body)
        reply = json.loads(body)
        assert (reply["live"], reply["status"]["job"]["state"]) == (False, "killed"), reply
        assert reply["status"]["job"]["reason"] == "the live test is done with it", reply
        assert f"ui {app_id}" in reply["ui_command"] and token not in body


RETRAIN_DAG = "primus_retrain_on_new_partition"


def retrain_runs(live: LiveAirflow) -> list[dict[str, Any]]:
    """The event-driven DAG's runs, oldest first."""
    runs = live.api("GET", f"/dags/{RETRAIN_DAG}/dagRuns?limit=100")["dag_runs"]
    return sorted(runs, key=lambda run: run["run_after"])


def partitions_of_run(live: LiveAirflow, run_id: str) -> list[str]:
    """The partitions carried by the asset events that triggered the run."""
    events = live.api("GET", f"/dags/{RETRAIN_DAG}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
                             "/upstreamAssetEvents")["asset_events"]
    return sorted(event["extra"]["payload"]["partition"] for event in events)


def test_event_driven_retraining_runs_once_per_new_partition_across_a_triggerer_restart(live: LiveAirflow):
    """The example DAG scheduled on an asset watched by PrimusPartitionEventTrigger: a partition
    written (as the upstream pipeline would: files, then _SUCCESS) -> one asset event -> one DAG
    run training on exactly that partition. A restarted triggerer resumes after the last partition
    announced (the asset state store): nothing again, and the next partition once it appears."""
    data_root = live.root / "retrain-data"
    trainer = REPO / "examples" / "ps_worker" / "trainer.py"

    def write_partition(day: str, rows: int) -> None:
        subprocess.run([sys.executable, str(trainer), "make-partition", str(data_root / day), str(rows)], check=True)

    def run_for(day: str, rows: int, earlier: int) -> dict[str, Any]:
        write_partition(day, rows)
        run = wait_for(lambda: (runs := retrain_runs(live))[earlier:] and runs[earlier], 120,
                       f"a DAG run for partition {day}", poll=1.0)
        run = live.wait_for_run_state(RETRAIN_DAG, run["dag_run_id"], timeout=180)
        assert run["state"] == "success", run
        assert run["run_type"] == "asset_triggered", run
        label = f"{day[:4]}-{day[4:6]}-{day[6:]}"
        assert partitions_of_run(live, run["dag_run_id"]) == [label]
        # The job read that partition, all of it (one worker): its output is in the task log.
        assert f"[worker-0] trained on {rows} samples" in live.task_log(RETRAIN_DAG, run["dag_run_id"], "train", 1)
        return run

    with live.explain_failure(RETRAIN_DAG):
        live.wait_for_dag(RETRAIN_DAG)
        assert retrain_runs(live) == []
        for n, (day, rows) in enumerate((("20261201", 640), ("20261202", 642), ("20261203", 644))):
            run_for(day, rows, earlier=n)
        assert len(retrain_runs(live)) == 3

        (asset,) = live.api("GET", "/assets?name_pattern=primus_new_partitions")["assets"]
        state = live.api("GET", f"/assets/{asset['id']}/state-store/primus_last_partition")
        assert state["value"] == "2026-12-03"

        live.restart("triggerer")
        # The new triggerer runs the watcher again, from the stored partition on.
        wait_for(lambda: "Watching " in live.log_since_start("triggerer")
                 and "next 2026-12-04" in live.log_since_start("triggerer"), 120,
                 "the watcher to run again in the restarted triggerer", poll=1.0)
        time.sleep(10)  # several polls: a repeated partition would have made an event, and a run, by now
        assert len(retrain_runs(live)) == 3
        events = live.api("GET", f"/assets/events?asset_id={asset['id']}&limit=100")["asset_events"]
        assert len(events) == 3

        run_for("20261204", 646, earlier=3)
        assert len(retrain_runs(live)) == 4
        events = live.api("GET", f"/assets/events?asset_id={asset['id']}&limit=100")["asset_events"]
        assert sorted(e["extra"]["payload"]["partition"] for e in events) == [
            "2026-12-01", "2026-12-02", "2026-12-03", "2026-12-04"]


def task_state_store(live: LiveAirflow, dag_id: str, run_id: str, key: str, task_id: str = "train") -> Any:
    """The value under ``key`` in the task instance's task state store (REST API), None while unset."""
    try:
        return live.api("GET", f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
                               f"/taskInstances/{task_id}/state-store/{key}")["value"]
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def progress_input(root: Path) -> tuple[Path, Path]:
    """live_dags/primus_live_progress.py's input (four files of 100 lines) and its trainer's gate."""
    data, gate = root / "data", root / "gate"
    data.mkdir()
    for f in range(4):
        (data / f"part-{f}.txt").write_text("".join(f"f{f}-{i:05d}\n" for i in range(100)))
    return data, gate


@pytest.mark.parametrize("dag_id", ["primus_live_progress", "primus_live_progress_deferred"])
def test_the_jobs_progress_is_in_the_task_state_store_during_and_after_the_run(live: LiveAirflow, dag_id: str,
                                                                                 tmp_path):
    """live_dags/primus_live_progress.py: a job over four files whose trainer holds after the first
    until the test opens its gate. Airflow's REST API shows ``primus_progress`` with part of the data
    done while the job runs (in a worker slot, or deferred: from a log hand-off), then the outcome."""
    data, gate = progress_input(tmp_path)
    with live.explain_failure(dag_id):
        live.wait_for_dag(dag_id)
        run_id = live.trigger_dag(dag_id, {"data": str(data), "gate": str(gate)})

        def part_done() -> dict[str, Any] | None:
            progress = task_state_store(live, dag_id, run_id, "primus_progress")
            if progress and progress["state"] == "running" and progress["data"] \
                    and 1 <= progress["data"]["done"] < progress["data"]["discovered"]:
                return progress
            return None
        during = wait_for(part_done, 180, "primus_progress with part of the data done", poll=0.5)
        app_id = live.xcom(dag_id, run_id, "train", "app_id")
        assert during["app_id"] == app_id and during["outcome"] is None, during
        assert during["roles"] == {"worker": "1/1 running"} and during["data"]["discovered"] == 4, during
        assert 0 < during["data"]["progress"] < 1, during
        assert during["summary"].startswith("running: worker x1: 1 running | data "), during

        if dag_id.endswith("_deferred"):  # back in the triggerer after the hand-off (see the DAG file)
            live.wait_for_task_state(dag_id, run_id, "train", ("deferred",))
        gate.touch()
        run = live.wait_for_run_state(dag_id, run_id)
        assert run["state"] == "success", run
        final = task_state_store(live, dag_id, run_id, "primus_progress")
        assert (final["app_id"], final["state"], final["outcome"]["status"]) == (app_id, "succeeded", "success"), final
        assert final["data"]["done"] == final["data"]["discovered"] == 4 and final["data"]["progress"] == 1.0, final
        assert final["roles"] == {"worker": "1/1 succeeded"}, final
        log = live.task_log(dag_id, run_id, "train", 1)
        assert ("Pausing task as DEFERRED" in log) == dag_id.endswith("_deferred")


def test_every_hand_off_of_a_deferred_task_survives_in_its_final_log(live: LiveAirflow):
    """Issue 27: with ``log_interval``, the trigger copied the trainer's lines into its own log file,
    which the triggerer opens afresh for the next trigger of the try: the final task log kept only
    the last segment. The task copies them on the worker now, whose log of the try is appended to."""
    dag_id = "primus_live_hand_off"
    with live.explain_failure(dag_id):
        live.wait_for_dag(dag_id)
        run_id = live.trigger_dag(dag_id)
        run = live.wait_for_run_state(dag_id, run_id)
        assert run["state"] == "success", run
        log = live.task_log(dag_id, run_id, "train", 1)
        assert log.count("Pausing task as DEFERRED") >= 3, log[-5000:]  # the first deferral and hand-offs
        ticks = [line.partition("] ")[2] for line in log.splitlines() if line.startswith("[worker-0 stdout] ")]
        assert ticks == [f"tick-{i}" for i in range(1, 61)], log[-5000:]  # each once, in order


def xcom_value(live: LiveAirflow, dag_id: str, run_id: str, key: str, task_id: str = "train") -> Any:
    """The XCom under ``key`` of the task instance (REST API) as JSON, None while unset."""
    try:
        value = live.xcom(dag_id, run_id, task_id, key)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return json.loads(value) if isinstance(value, str) else value


#: Issue 26's bound: what a reader sees of a running job is at most this many seconds old.
FRESH = 10.0


def test_a_deferred_tasks_progress_is_never_more_than_ten_seconds_old(live: LiveAirflow, tmp_path):
    """Issue 26: deferred, ``primus_progress`` said "starting, 0/2 ready" for the first minute while the
    trainers ran, then moved once a minute (written only at the task's stops on a worker). With the
    operator's defaults and no followed logs (no hand-off), the trigger now keeps the task's XCom at
    most 10 s old: read every second for 30 s while the task is deferred."""
    dag_id = "primus_live_progress_fresh"
    data, gate = progress_input(tmp_path)
    with live.explain_failure(dag_id):
        live.wait_for_dag(dag_id)
        run_id = live.trigger_dag(dag_id, {"data": str(data), "gate": str(gate)})
        live.wait_for_task_state(dag_id, run_id, "train", ("deferred",))
        running = wait_for(lambda: (doc := xcom_value(live, dag_id, run_id, "primus_progress")) is not None
                           and doc["roles"] == {"worker": "1/1 running"} and doc, 60,
                           "the progress to say the trainer runs", poll=0.5)
        ages = []
        until = time.monotonic() + 30
        while time.monotonic() < until:
            doc = xcom_value(live, dag_id, run_id, "primus_progress")
            read_at = time.time()  # after the read: the age it had at the latest
            ages.append(read_at - epoch(doc["updated_at"]))
            assert doc["state"] == "running" and doc["outcome"] is None, doc
            assert doc["roles"] == {"worker": "1/1 running"} and doc["data"]["done"] >= 1, doc
            time.sleep(1.0)
        assert live.task_instance(dag_id, run_id, "train")["state"] == "deferred"  # the trigger wrote them all
        print(f"primus_progress read {len(ages)} times while deferred: {max(ages):.1f} s old at most, "
              f"{sum(ages) / len(ages):.1f} s on average")
        assert max(ages) <= FRESH, f"progress read {max(ages):.1f} s old (every age: {[round(a, 1) for a in ages]})"
        assert running["app_id"] == live.xcom(dag_id, run_id, "train", "app_id")

        gate.touch()
        run = live.wait_for_run_state(dag_id, run_id)
        assert run["state"] == "success", run
        final = xcom_value(live, dag_id, run_id, "primus_progress")
        assert (final["state"], final["outcome"]["status"]) == ("succeeded", "success"), final
        assert final == task_state_store(live, dag_id, run_id, "primus_progress")  # the same last document
