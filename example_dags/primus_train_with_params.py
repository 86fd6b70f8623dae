"""A training job started by hand from the Airflow UI ("Trigger DAG w/ config"), with a form.

The form asks for the number of workers, the training steps, the backend and a note; the job
spec takes them through templates (``{{ params.workers }}``). Every run is tagged with its
dag/task/run ids, so the job is easy to find later: ``primus list --tag dag_id=primus_train_with_params``.

    airflow dags test primus_train_with_params -c '{"workers": 3, "steps": 100}'
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param

from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator
from airflow_provider_primus.sensors.primus import PrimusRoleSensor

TRAINER = "../examples/ps_worker/trainer.py"

with DAG(
    dag_id="primus_train_with_params",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={
        "workers": Param(2, type="integer", minimum=1, maximum=32, title="Workers",
                         description="Worker executors (the ps role keeps 2 shards)."),
        "steps": Param(200, type="integer", minimum=10, maximum=100_000, title="Training steps per worker"),
        "learning_rate": Param(0.01, type="number", exclusiveMinimum=0, maximum=1, title="Learning rate"),
        "backend": Param("local", enum=["local", "yarn", "kubernetes"], title="Backend",
                         description="Where the job runs: needs a primus_<backend> connection, except local."),
        # Optional: a field the form may leave empty must allow null (Airflow's documented way),
        # else the form marks it required and keeps the Trigger button disabled.
        "note": Param(None, type=["null", "string"], title="Note",
                      description="Optional; kept as the job's 'note' tag."),
    },
    render_template_as_native_obj=True,  # numbers from the form stay numbers in the spec
    tags=["primus", "example"],
    doc_md=__doc__,
):
    train = PrimusSubmitJobOperator(
        task_id="train",
        primus_conn_id="{{ 'primus_default' if params.backend == 'local' else 'primus_' ~ params.backend }}",
        spec={
            "name": "ui-training",
            "tags": {"note": "{{ params.note or '' }}"},  # an empty form field is None
            "roles": [
                {"name": "ps", "replicas": 2, "ports": 1, "command": "python3 trainer.py", "files": [TRAINER],
                 "env": {"LR": "{{ params.learning_rate }}"}, "resources": {"cpu": 0.5, "memory": "256Mi"}},
                {"name": "worker", "replicas": "{{ params.workers }}", "ports": 0, "command": "python3 trainer.py",
                 "files": [TRAINER], "env": {"STEPS": "{{ params.steps }}"},
                 "resources": {"cpu": 0.5, "memory": "256Mi"}},
            ],
            "scheduling": {"policy": "ordered", "order": ["ps", "worker"]},
            "backend": {"type": "{{ params.backend }}"},
            "am": {"heartbeat_interval": "500ms", "heartbeat_timeout": "10s", "shutdown_grace": "5s"},
        },
        wait_for_completion=False,
    )
    workers_running = PrimusRoleSensor(
        task_id="workers_running",
        app_id="{{ ti.xcom_pull(task_ids='train', key='app_id') }}",
        role="worker",
        state="succeeded",
        poke_interval=1,
    )
    train >> workers_running
