"""The DAG whose job tests/ui/test_airflow_panel.py watches in the Primus panel of Airflow's UI.

A deferred task runs a job over the files of ``dag_run.conf["data"]`` (one input task per file) whose
trainer holds after the first file until ``dag_run.conf["more"]`` exists, then reads the rest and
holds again, running, until ``dag_run.conf["finish"]`` exists: the test sees part of the data done,
opens the first gate and sees the panel update, looks at the live job as two users, then lets it end.
"""

from __future__ import annotations

import sys
from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator

RECORDS_PER_FILE = 100
GATED_TRAINER = f"""
import os, time
from primus_runtime.data.reader import records

def hold(gate):
    while not os.path.exists(os.environ[gate]):
        time.sleep(0.2)

for n, _ in enumerate(records()):
    if n == {RECORDS_PER_FILE}:  # the first file is read: the rest waits for the first gate
        hold("PRIMUS_GATE_MORE")
hold("PRIMUS_GATE_FINISH")  # every file read: still running until the second gate
"""

with DAG(dag_id="primus_live_panel", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["primus", "live-test"]):
    PrimusSubmitJobOperator(
        task_id="train",
        deferrable=True,
        poll_interval=1.0,
        spec={
            "name": "live-panel",
            "roles": [{"name": "worker", "consumes_input": True, "command": [sys.executable, "-c", GATED_TRAINER],
                       "env": {"PRIMUS_GATE_MORE": "{{ dag_run.conf['more'] }}",
                               "PRIMUS_GATE_FINISH": "{{ dag_run.conf['finish'] }}"}}],
            "input": {"sources": [{"name": "lines", "path": "{{ dag_run.conf['data'] }}", "pattern": "*.txt",
                                   "success_marker": None}],
                      "prefetch": 0},
            "am": {"heartbeat_interval": "1s", "heartbeat_timeout": "10s", "shutdown_grace": "5s"},
            "backend": {"type": "local"},
        },
    )
