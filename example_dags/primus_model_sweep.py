"""Dynamic task mapping: one Primus job per model configuration, then pick the best.

Each mapped ``train`` task instance submits its own job (tagged with its ``map_index``, so a
retry of one configuration reattaches to that configuration's job only); ``pick_best`` reads
every job's final loss from its worker log through ``PrimusHook``.

    airflow dags test primus_model_sweep
"""

from __future__ import annotations

import re
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator

TRAINER = "../examples/ps_worker/trainer.py"
LEARNING_RATES = [0.003, 0.01, 0.03]


def job_for(learning_rate: float) -> dict:
    return {
        "name": "sweep",
        "tags": {"learning_rate": str(learning_rate)},
        "roles": [
            {"name": "ps", "replicas": 1, "ports": 1, "command": "python3 trainer.py", "files": [TRAINER],
             "env": {"LR": str(learning_rate)}, "resources": {"cpu": 0.5, "memory": "256Mi"}},
            {"name": "worker", "replicas": 1, "ports": 0, "command": "python3 trainer.py", "files": [TRAINER],
             "env": {"STEPS": "300"}, "resources": {"cpu": 0.5, "memory": "256Mi"},
             # a configuration that does not converge fails its own job only
             "failover": {"restart": "never"}},
        ],
        "scheduling": {"policy": "ordered", "order": ["ps", "worker"]},
        "am": {"heartbeat_interval": "500ms", "heartbeat_timeout": "10s", "shutdown_grace": "5s"},
    }


with DAG(
    dag_id="primus_model_sweep",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["primus", "example"],
    doc_md=__doc__,
):
    train = PrimusSubmitJobOperator.partial(task_id="train", poll_interval=1).expand(
        spec=[job_for(lr) for lr in LEARNING_RATES]
    )

    @task(trigger_rule="all_done")
    def pick_best(app_ids: list[str | None]) -> dict:
        """The job with the lowest final loss among those that succeeded."""
        hook = PrimusHook()
        losses = {}
        for app_id in filter(None, app_ids):
            if hook.status(app_id).job.state != "succeeded":
                continue
            found = re.search(r"final loss ([\d.]+)", hook.tail_logs(app_id, "worker", 0, lines=5))
            if found:
                losses[app_id] = float(found.group(1))
        if not losses:
            raise ValueError(f"no configuration trained successfully: {app_ids}")
        best = min(losses, key=losses.__getitem__)
        learning_rate = hook.status(best).job.tags["learning_rate"]
        print(f"best: job {best}, learning rate {learning_rate}, final loss {losses[best]:.4f}")
        return {"app_id": best, "learning_rate": float(learning_rate), "loss": losses[best]}

    pick_best(train.output)
