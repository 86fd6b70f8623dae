"""The provider under a real Airflow: scheduler, dag-processor, triggerer and api-server running.

Every test drives Airflow only through its public REST API (``/api/v2``), as the UI does:
trigger a DAG run, watch the task instance, mark it failed. The Primus side is checked with
``PrimusClient`` on the components' Primus home. See ``live_airflow.py`` for how the components
are started and stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import wait_for
from primus_runtime.backends.local.jobs import processes_of_job
from primus_runtime.client import PrimusClient

from .conftest import requires_airflow_3_3
from .live_airflow import REPO, LiveAirflow, ancestors, cmdline, pids_with_cmdline

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
           ) -> dict[str, Any]:
    """The one Primus job carrying ``tags``, once it is in one of ``states``."""
    def found() -> dict[str, Any] | None:
        jobs = client.list(tags)
        assert len(jobs) <= 1, f"more than one Primus job for {tags}: {jobs}"
        if jobs and client.status(jobs[0]["app_id"])["job"]["state"] in states:
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
        app_id = job["app_id"]
        assert live.xcom(dag_id, run_id, "train", "app_id") == app_id
        assert processes_of_job(app_id)  # AM, 2 executors, 2 trainers
        # The trigger runs in the triggerer and its progress lines reach the task log (REST API).
        wait_for(lambda: f"Primus job {app_id} running: worker x2: 2 running"
                   in live.task_log(dag_id, run_id, "train", 1), 60, "the trigger's progress in the task log", poll=1.0)

        marked = time.monotonic()
        live.set_task_state(dag_id, run_id, "train", "failed")  # the UI's "Mark as failed"

        def killed() -> dict[str, Any] | None:
            status = client.status(app_id)
            return status if status["job"]["state"] not in ("pending", "starting", "running") else None
        status = wait_for(killed, 60, f"Primus job {app_id} to end", poll=0.05)
        took = time.monotonic() - marked
        assert status["job"]["state"] == "killed", status["job"]
        # The trigger's on_kill did it (not a cleanup, not a timeout).
        assert "the deferred Airflow task was killed" in status["job"]["reason"]
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
        app_id = job_of(client, ti_tags(dag_id, run_id), ("running",))["app_id"]
        wait_for(lambda: f"Primus job {app_id} running: worker x2: 2 running"
                   in live.task_log(dag_id, run_id, "train", 1), 60, "the task to wait on the running job", poll=1.0)

        marked = time.monotonic()
        live.set_task_state(dag_id, run_id, "train", "failed")
        status = wait_for(lambda: (s := client.status(app_id))["job"]["state"] not in ("pending", "starting",
                                                                                          "running") and s,
                            60, f"Primus job {app_id} to end", poll=0.05)
        took = time.monotonic() - marked
        assert status["job"]["state"] == "killed", status["job"]
        assert "Airflow task train was killed" in status["job"]["reason"]
        wait_for(lambda: not processes_of_job(app_id), 30, f"every process of job {app_id} to exit")
        print(f"mark failed (running task) -> Primus job killed: {took:.2f} s")

        assert live.wait_for_run_state(dag_id, run_id)["state"] == "failed"
        assert live.task_instance(dag_id, run_id, "train")["state"] == "failed"
        assert not pids_with_cmdline(f"airflow worker -- {ti['id']}")  # the task process is gone too


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
        app_id = job["app_id"]
        assert job["tags"]["try_number"] == "1"

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
        assert only["app_id"] == app_id
        assert client.status(app_id)["job"]["state"] == "succeeded"
        assert live.xcom(dag_id, run_id, "train", "app_id") == app_id
        assert live.xcom(dag_id, run_id, "train", "return_value") == app_id


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
        assert client.status(job["app_id"])["job"]["state"] == "succeeded"
        assert live.xcom(dag_id, run_id, "train", "app_id") == job["app_id"]
        log = live.task_log(dag_id, run_id, "train", 1)
        assert "succeeded: ps x2: 2 stopped | worker x2: 2 succeeded" in log  # role progress in the task log
        assert ("Pausing task as DEFERRED" in log) == dag_id.endswith("_deferred")



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
