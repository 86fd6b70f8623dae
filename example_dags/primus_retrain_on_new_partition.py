"""Event-driven retraining: one DAG run per new daily partition, as soon as its ``_SUCCESS`` appears.

No schedule and no waiting task: the asset ``primus_new_partitions`` is watched in the triggerer by
``PrimusPartitionEventTrigger``, which fires one asset event per complete partition under
``DATA_ROOT`` (``YYYYMMDD/`` directories), oldest first, from ``PRIMUS_RETRAIN_START`` on. Each
event carries the partition (``{"partition": "2026-12-01", "path": ".../20261201"}``) and the
DAG, scheduled on the asset, trains a ps + worker job on exactly the partitions of its
triggering events (the scheduler may fold events that arrive together into one run: the job then
reads all of them, in order). The trigger keeps the last partition announced in the asset's
state store (Airflow 3.3), so a restarted triggerer neither repeats nor misses one.

Where the data is: ``$PRIMUS_RETRAIN_DATA_ROOT``, else ``$PRIMUS_HOME/retrain-data`` (PRIMUS_HOME
defaults to ``~/.primus``), read when the DAG file is parsed (the watcher is part of the DAG's
definition, not of a run). On a cluster, a ``hdfs://`` template and ``webhdfs_conn_id`` work the
same way. Try it with a running scheduler and triggerer::

    python3 examples/ps_worker/trainer.py make-partition ~/.primus/retrain-data/20261201 640

A manual run (``airflow dags test primus_retrain_on_new_partition``) has no asset event: it
trains on the ``partition`` Param instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from airflow.sdk import DAG, Asset, AssetWatcher, Param

from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator
from airflow_provider_primus.triggers.partition_events import PrimusPartitionEventTrigger

TRAINER = "../examples/ps_worker/trainer.py"  # relative to this file's folder
DATA_ROOT = os.environ.get("PRIMUS_RETRAIN_DATA_ROOT") or os.path.join(
    os.environ.get("PRIMUS_HOME") or os.path.expanduser("~/.primus"), "retrain-data")
START = os.environ.get("PRIMUS_RETRAIN_START", "2026-12-01")
# Seconds between checks for the next partition's marker.
POLL_INTERVAL = float(os.environ.get("PRIMUS_RETRAIN_POLL_INTERVAL", "10"))
PARTITION_PATH = DATA_ROOT + "/{{YYYY}}{{MM}}{{DD}}"

NEW_PARTITIONS = Asset(
    name="primus_new_partitions",
    uri="file://" + os.path.abspath(DATA_ROOT),
    watchers=[AssetWatcher(
        name="primus_new_partition_watcher",
        trigger=PrimusPartitionEventTrigger(path=PARTITION_PATH, start=START, granularity="day",
                                            poll_interval=POLL_INTERVAL),
    )],
)


def new_partitions(triggering_asset_events: Mapping[Any, Any], manual: str) -> list[str]:
    """The partitions this run was triggered for, oldest first; ``[manual]`` for a run without events."""
    events = triggering_asset_events.get(NEW_PARTITIONS, ())
    found = sorted({event.extra["payload"]["partition"] for event in events
                    if "partition" in (event.extra or {}).get("payload", {})})
    return found or [manual]


PARTITIONS = "new_partitions(triggering_asset_events, params.partition)"
TRAIN_JOB = {
    "name": "retrain-on-new-partition",
    "roles": [
        {"name": "ps", "replicas": 1, "ports": 1, "command": "python3 trainer.py", "files": [TRAINER],
         "env": {"LR": "0.1"}, "resources": {"cpu": 0.5, "memory": "256Mi"}},
        {"name": "worker", "replicas": 1, "ports": 0, "command": "python3 trainer.py", "files": [TRAINER],
         "consumes_input": True, "env": {"DATA": "stdin", "LOG_EVERY": "20"},
         "resources": {"cpu": 0.5, "memory": "256Mi"}},
    ],
    "scheduling": {"policy": "ordered", "order": ["ps", "worker"]},
    "input": {
        "sources": [{"name": "samples", "path": PARTITION_PATH, "pattern": "*.jsonl", "format": "jsonl"}],
        # The events' partitions are consecutive (the trigger never skips one): first to last is all of them.
        "time_range": {"start": "{{ " + PARTITIONS + "[0] }}", "end": "{{ " + PARTITIONS + "[-1] }}"},
        "task_size": "64Ki",
    },
    "am": {"heartbeat_interval": "500ms", "heartbeat_timeout": "10s", "shutdown_grace": "5s"},
}

with DAG(
    dag_id="primus_retrain_on_new_partition",
    schedule=[NEW_PARTITIONS],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    params={"partition": Param(START, type="string", description="A manual run's partition (YYYY-MM-DD)")},
    user_defined_macros={"new_partitions": new_partitions},
    tags=["primus", "example"],
    doc_md=__doc__,
):
    PrimusSubmitJobOperator(
        task_id="train",
        spec=TRAIN_JOB,
        wait_for_completion=True,  # the worker's output (samples read, loss) reaches the task log
        follow_logs=["worker-0"],
        poll_interval=1.0,
    )
