"""Scheduled retraining: every day, train a ps + worker model on that day's new partition.

    wait_for_partition -> train -> data_consumed -> model_saved -> evaluate

* ``wait_for_partition`` waits (in the triggerer) for the day's ``_SUCCESS`` marker under
  ``data_root`` (a local path here; an ``hdfs://`` path with a ``webhdfs`` connection on a cluster),
  at most 10 minutes: a day whose data did not come is skipped (``soft_fail``), not failed, and
  nothing downstream runs. Unpausing the DAG starts today's run (``catchup=False``); without the
  demo partition below it ends skipped after those 10 minutes.
* ``train`` submits the job and returns at once: two ps shards and two workers; the AM splits
  the day's files into tasks and feeds them to the workers' stdin. A retry of this task
  reattaches to a job still running, or resumes the data where the failed job stopped.
* ``data_consumed`` waits until the job's watermark passed the day: every record of it was read.
* ``model_saved`` waits for the job to succeed (the ps save the model when it ends).
* ``evaluate`` runs an evaluator job on the saved model; it fails if the model did not learn.

A run's day is its logical date's (``@daily``: the day it starts at midnight UTC). A run without a
logical date (Airflow 3's default for one triggered through the REST API, ``"logical_date": null``)
trains on the day it was triggered, in UTC (its ``run_after``).

The job specs name no backend: they run where the ``primus_default`` connection points. With
``{"backend": "yarn"}`` in its extra and ``data_root`` an ``hdfs:///...`` path (and a
``webhdfs_default`` connection for the sensor), the same DAG trains on YARN with its data on
HDFS; the test suite runs it so against the Hadoop minicluster.

Try it on this machine (writes a partition first, as the upstream pipeline would)::

    python3 examples/ps_worker/trainer.py make-partition /tmp/primus-demo/data/20261201 2000
    airflow dags test primus_daily_retraining 2026-12-01
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator
from airflow_provider_primus.sensors.primus import PrimusDataProgressSensor, PrimusJobSensor, PrimusPartitionSensor

TRAINER = "../examples/ps_worker/trainer.py"  # relative to this file's folder
# The run's day: its logical date's; for a run without one (Airflow 3's default for a run triggered
# through the REST API, or from the UI without a date), the day it was triggered (`run_after`).
# Such a run has no `ds`: a template naming it fails with "'ds' is undefined".
RUN_DAY = "(dag_run.logical_date or dag_run.run_after)"
DAY = "{{ " + RUN_DAY + " | ds }}"
MODEL_DIR = "{{ params.model_root }}/{{ " + RUN_DAY + " | ds_nodash }}"
FAST_AM = {"heartbeat_interval": "500ms", "heartbeat_timeout": "10s", "shutdown_grace": "5s"}

TRAIN_JOB = {
    "name": "daily-retrain",
    "roles": [
        {"name": "ps", "replicas": 2, "ports": 1, "command": "python3 trainer.py", "files": [TRAINER],
         "env": {"LR": "0.01", "MODEL_DIR": MODEL_DIR}, "resources": {"cpu": 0.5, "memory": "256Mi"}},
        {"name": "worker", "replicas": "{{ params.workers }}", "ports": 0, "command": "python3 trainer.py",
         "files": [TRAINER], "consumes_input": True, "env": {"DATA": "stdin", "LOG_EVERY": "50"},
         "resources": {"cpu": 0.5, "memory": "256Mi"}},
    ],
    "scheduling": {"policy": "ordered", "order": ["ps", "worker"]},
    "input": {
        "sources": [{"name": "samples", "path": "{{ params.data_root }}/{{YYYY}}{{MM}}{{DD}}",
                     "pattern": "*.jsonl", "format": "jsonl"}],
        "time_range": {"start": DAY, "end": DAY},
        "task_size": "64Ki",
    },
    "am": FAST_AM,
}

EVAL_JOB = {
    "name": "daily-eval",
    "roles": [{"name": "evaluator", "ports": 0, "command": "python3 trainer.py", "files": [TRAINER],
               "env": {"MODEL_DIR": MODEL_DIR}, "failover": {"restart": "never"}}],
    "am": FAST_AM,
}

with DAG(
    dag_id="primus_daily_retraining",
    schedule="@daily",
    start_date=datetime(2026, 12, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=10)},
    params={
        "data_root": Param("/tmp/primus-demo/data", type="string", description="Daily partitions YYYYMMDD/"),
        "model_root": Param("/tmp/primus-demo/models", type="string", description="One model per day"),
        "workers": Param(2, type="integer", minimum=1, maximum=16),
    },
    tags=["primus", "example"],
    doc_md=__doc__,
):
    wait_for_partition = PrimusPartitionSensor(
        task_id="wait_for_partition",
        path="{{ params.data_root }}/{{YYYY}}{{MM}}{{DD}}",
        partition=DAY,
        deferrable=True,
        poke_interval=30,
        timeout=10 * 60,  # a day without data is skipped, not waited for all day; raise it for late data
        soft_fail=True,
    )
    train = PrimusSubmitJobOperator(task_id="train", spec=TRAIN_JOB, wait_for_completion=False)
    app_id = "{{ ti.xcom_pull(task_ids='train', key='app_id') }}"
    data_consumed = PrimusDataProgressSensor(task_id="data_consumed", app_id=app_id, partition=DAY,
                                             deferrable=True, poke_interval=2)
    model_saved = PrimusJobSensor(task_id="model_saved", app_id=app_id, deferrable=True, poke_interval=2)
    evaluate = PrimusSubmitJobOperator(task_id="evaluate", spec=EVAL_JOB, poll_interval=1)

    wait_for_partition >> train >> data_consumed >> model_saved >> evaluate
