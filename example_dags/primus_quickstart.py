"""Quickstart: one Primus job (2 parameter servers + 2 workers, pure Python) on the local backend.

    airflow dags test primus_quickstart

Needs no connection: without a ``primus_default`` connection the hook uses the local backend
and the default Primus home ($PRIMUS_HOME, else ~/.primus). The task log shows the job's role
progress; the app id is the task's return value and its ``app_id`` XCom.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator

with DAG(
    dag_id="primus_quickstart",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["primus", "example"],
    doc_md=__doc__,
):
    PrimusSubmitJobOperator(
        task_id="train",
        # Relative to this file's folder: the repository's pure-Python ps/worker example.
        spec="../examples/ps_worker/job.yaml",
        poll_interval=1.0,
        retries=1,
    )
