"""DAGs that tests/provider/test_live_airflow.py runs through a real scheduler and triggerer."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator

FAST_AM = {"heartbeat_interval": "1s", "heartbeat_timeout": "10s", "shutdown_grace": "5s"}

# Deferred while a long job runs: the test marks the task failed and expects the job killed.
with DAG(dag_id="primus_live_deferred", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["primus", "live-test"]):
    PrimusSubmitJobOperator(
        task_id="train",
        deferrable=True,
        poll_interval=1.0,
        spec={
            "name": "live-deferred",
            "roles": [{"name": "worker", "replicas": 2, "command": "sleep 600"}],
            "am": FAST_AM,
            "backend": {"type": "local"},
        },
    )

# The same long job waited on in a worker slot: marking the running task failed makes Airflow
# SIGTERM the task, whose on_kill (on_kill_action="kill", the default) stops the job.
with DAG(dag_id="primus_live_running", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["primus", "live-test"]):
    PrimusSubmitJobOperator(
        task_id="train",
        deferrable=False,
        poll_interval=1.0,
        spec={
            "name": "live-running",
            "roles": [{"name": "worker", "replicas": 2, "command": "sleep 600"}],
            "am": FAST_AM,
            "backend": {"type": "local"},
        },
    )

# Waits in a worker slot while a job runs: the test SIGKILLs the task's process (or its whole
# worker) and expects the retry to reattach to the same job, which then succeeds. A lost worker is
# only noticed after [scheduler] task_instance_heartbeat_timeout, hence the longer job.
for dag_id, seconds in (("primus_live_reattach", 40), ("primus_live_reattach_lost_worker", 90)):
    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
             tags=["primus", "live-test"]):
        PrimusSubmitJobOperator(
            task_id="train",
            deferrable=False,
            poll_interval=1.0,
            retries=1,
            retry_delay=timedelta(seconds=1),
            on_kill_action="keep",
            spec={
                "name": dag_id.replace("_", "-"),
                "roles": [{"name": "worker", "replicas": 1, "command": f"sleep {seconds}"}],
                "am": FAST_AM,
                "backend": {"type": "local"},
            },
        )

# A job left running (on_kill_action="keep") when the test deletes its DAG run; the run triggered again
# with the same run id must submit its own job, not reattach to the stale one that carries its tags.
with DAG(dag_id="primus_live_stale_job", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["primus", "live-test"]):
    PrimusSubmitJobOperator(
        task_id="train",
        deferrable=False,
        poll_interval=1.0,
        on_kill_action="keep",
        spec={
            "name": "live-stale-job",
            "roles": [{"name": "worker", "replicas": 1, "command": "sleep 300"}],
            "am": FAST_AM,
            "backend": {"type": "local"},
        },
    )

# The quickstart's job (example_dags/primus_quickstart.py runs it waiting in a worker slot), deferred.
with DAG(dag_id="primus_live_quickstart_deferred", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["primus", "live-test"]):
    PrimusSubmitJobOperator(
        task_id="train",
        deferrable=True,
        spec="../../../examples/ps_worker/job.yaml",  # relative to this file's folder
        poll_interval=1.0,
    )

# Returns once the job is submitted; the job runs on: the test opens the task's "Primus job" link
# while the job runs (a redirect to its AM) and after it ended (its outcome).
with DAG(dag_id="primus_live_job_link", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["primus", "live-test"]):
    PrimusSubmitJobOperator(
        task_id="train",
        wait_for_completion=False,
        spec={
            "name": "live-job-link",
            "roles": [{"name": "worker", "replicas": 1, "command": "sleep 600"}],
            "am": FAST_AM,
            "backend": {"type": "local"},
        },
    )

# Deferred with a short log_interval: the test reads every trainer line, once and in order, from the
# try's final log. (Airflow's triggerer opens a trigger's log file afresh for each trigger of a try.)
with DAG(dag_id="primus_live_hand_off", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["primus", "live-test"]):
    PrimusSubmitJobOperator(
        task_id="train",
        deferrable=True,
        poll_interval=0.5,
        log_interval=3,
        spec={
            "name": "live-hand-off",
            "roles": [{"name": "worker", "command": "for i in $(seq 1 60); do echo tick-$i; sleep 0.25; done"}],
            "am": FAST_AM,
            "backend": {"type": "local"},
        },
    )
