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

# Waits in a worker slot while a ~40 s job runs: the test SIGKILLs the task's process and expects
# the retry to reattach to the same job, which then succeeds.
with DAG(dag_id="primus_live_reattach", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["primus", "live-test"]):
    PrimusSubmitJobOperator(
        task_id="train",
        deferrable=False,
        poll_interval=1.0,
        retries=1,
        retry_delay=timedelta(seconds=1),
        on_kill_action="keep",
        spec={
            "name": "live-reattach",
            "roles": [{"name": "worker", "replicas": 1, "command": "sleep 40"}],
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
