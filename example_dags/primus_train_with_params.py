"""A training job started by hand from the Airflow UI ("Trigger DAG w/ config"), with a form.

The form asks for the number of workers, the training steps, the backend and an optional note; the
job spec takes them through templates (``{{ params.workers }}``). Every run is tagged with its
dag/task/run ids, so the job is easy to find later: ``primus list --tag dag_id=primus_train_with_params``.

``train`` waits for the job to end, deferred (in the triggerer, no worker slot held): the task's
outcome is the job's, and its log gets the role progress, a periodic summary and the newest lines of
worker 0's output. The backend ``yarn`` or ``kubernetes`` needs a ``primus_yarn`` or
``primus_kubernetes`` connection (the task's error says which fields). Unpausing it starts nothing:
it has no schedule.

    airflow dags test primus_train_with_params -c '{"workers": 3, "steps": 100}'
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param

from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator

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
    PrimusSubmitJobOperator(
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
        # Wait for the job where it costs nothing: the outcome and the trainer's output reach the task.
        deferrable=True,
        poll_interval=1,
    )
