"""DAGs whose job's progress tests/provider/test_live_airflow.py reads through the REST API (task state store).

The job reads the files of ``dag_run.conf["data"]`` (one task per file) with a trainer that holds
after the first file until ``dag_run.conf["gate"]`` exists: the test sees the job running with
part of its data done, opens the gate, and sees the outcome.
"""

from __future__ import annotations

import sys
from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator

FAST_AM = {"heartbeat_interval": "1s", "heartbeat_timeout": "10s", "shutdown_grace": "5s"}
RECORDS_PER_FILE = 100
GATED_TRAINER = f"""
import os, time
from primus_runtime.data.reader import records
for n, _ in enumerate(records()):
    if n == {RECORDS_PER_FILE}:  # the first file is read: hold the rest until the test opens the gate
        while not os.path.exists(os.environ["PRIMUS_GATE"]):
            time.sleep(0.2)
"""
SPEC = {
    "name": "live-progress",
    "roles": [{"name": "worker", "consumes_input": True, "command": [sys.executable, "-c", GATED_TRAINER],
               "env": {"PRIMUS_GATE": "{{ dag_run.conf['gate'] }}"}}],
    "input": {"sources": [{"name": "lines", "path": "{{ dag_run.conf['data'] }}", "pattern": "*.txt",
                           "success_marker": None}],
              "prefetch": 0},
    "am": FAST_AM,
    "backend": {"type": "local"},
}

# Waits in a worker slot, publishing the progress every second.
with DAG(dag_id="primus_live_progress", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["primus", "live-test"]):
    PrimusSubmitJobOperator(task_id="train", deferrable=False, poll_interval=0.5, progress_interval=1.0, spec=SPEC)

# Deferred: published at the submit, at each log hand-off and at the end. Not a hand-off every few
# seconds: Airflow 3.3 fails a task whose trigger fires before the scheduler has taken the worker's
# exit on deferring (5-6 s here) once the resumed try runs (apache/airflow#72716, #71580).
with DAG(dag_id="primus_live_progress_deferred", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["primus", "live-test"]):
    PrimusSubmitJobOperator(task_id="train", deferrable=True, poll_interval=0.5, log_interval=15.0, spec=SPEC)

# Deferred with the defaults (a status read every 5 s, the progress written at least every 5 s), no
# followed logs, so no hand-off: only the trigger keeps the progress fresh (the XCom).
with DAG(dag_id="primus_live_progress_fresh", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["primus", "live-test"]):
    PrimusSubmitJobOperator(task_id="train", deferrable=True, follow_logs=[], spec=SPEC)
