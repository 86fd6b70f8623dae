"""Example DAGs: import cleanly, and run end to end with `airflow dags test`."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import airflow
import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.serialization.serialized_objects import BaseSerialization

from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.operators.primus import STATE_KEY
from airflow_provider_primus.version_compat import AIRFLOW_V_3_3_PLUS
from primus_runtime.client import PrimusClient

from .conftest import EXAMPLE_DAGS, airflow_env, run_airflow


def test_every_example_dag_imports_without_errors_or_warnings():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bag = DagBag(dag_folder=str(EXAMPLE_DAGS), safe_mode=False)
    assert bag.import_errors == {}
    assert bag.captured_warnings == {}
    ours = [w for w in caught if str(EXAMPLE_DAGS) in str(w.filename) or "airflow_provider_primus" in str(w.filename)]
    assert ours == [], [str(w.message) for w in ours]
    files = {str(path) for path in EXAMPLE_DAGS.glob("*.py")}
    assert files and files == {dag.fileloc for dag in bag.dags.values()}  # every file holds a DAG
    assert {"primus_quickstart", "primus_daily_retraining", "primus_train_with_params",
            "primus_model_sweep", "primus_retrain_on_new_partition"} <= set(bag.dag_ids)


@pytest.fixture(scope="module")
def example_dags() -> DagBag:
    return DagBag(dag_folder=str(EXAMPLE_DAGS), safe_mode=False)


def test_params_form_can_be_submitted_with_its_defaults(example_dags):
    dag = example_dags.dags["primus_train_with_params"]
    dag.params.validate()  # what the trigger form checks before it enables its button
    # The form marks a field required unless its schema allows null: an optional field must.
    serialized = dict(BaseSerialization._serialize_params_dict(dag.params))  # as the UI receives them
    assert serialized["note"]["default"] is None
    assert "null" in BaseSerialization.deserialize(serialized["note"]["schema"])["type"]
    # ... and the job spec still renders from the defaults into a valid job.
    train = dag.get_task("train")
    params = {name: dag.params[name] for name in dag.params}
    rendered = train.render_template(train.spec, {"params": params}, dag.get_template_env())
    job = PrimusHook().load_spec(rendered, base_dir=dag.folder)
    assert job.tags["note"] == "" and job.role("worker").replicas == 2


def test_examples_wait_where_their_outcome_shows_and_skip_a_day_without_data(example_dags):
    # Triggered from the form: the task waits for the job (deferred), so the job's outcome and
    # its output reach the task, instead of returning at submit.
    train = example_dags.dags["primus_train_with_params"].get_task("train")
    assert train.wait_for_completion and train.deferrable
    # Unpaused, the daily DAG must not wait half a day for demo data nobody writes: skipped soon.
    sensor = example_dags.dags["primus_daily_retraining"].get_task("wait_for_partition")
    assert sensor.soft_fail and sensor.timeout <= 3600


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker-waits", "deferred"])
def test_quickstart_dag_runs_end_to_end(migrated_airflow_home, tmp_path, deferrable):
    primus_home = tmp_path / "primus-home"
    env = airflow_env(migrated_airflow_home, primus_home)
    # `dags test` runs a deferred task's trigger inline: the trigger's serialization and
    # execute_complete go through Airflow for real.
    env["AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"] = str(deferrable)
    got = run_airflow("dags", "test", "primus_quickstart", env=env, timeout=180)
    output = got.stdout + got.stderr
    assert got.returncode == 0, output[-5000:]
    assert "succeeded: ps x2: 2 stopped | worker x2: 2 succeeded" in output  # role progress in the log

    db = sqlite3.connect(migrated_airflow_home / "airflow.db")
    (run_id, state), = db.execute("SELECT run_id, state FROM dag_run WHERE dag_id = 'primus_quickstart' "
                                  "ORDER BY id DESC LIMIT 1").fetchall()
    assert state == "success"
    xcoms = dict(db.execute("SELECT key, value FROM xcom WHERE dag_id = 'primus_quickstart' AND run_id = ?",
                            (run_id,)).fetchall())
    assert ("Pausing task as DEFERRED" in output) == deferrable
    if deferrable:  # the trigger logged the progress while the task was deferred
        assert "[airflow_provider_primus.triggers.primus.PrimusJobTrigger]" in output

    client = PrimusClient(primus_home)
    (job,) = client.list({"dag_id": "primus_quickstart", "task_id": "train", "run_id": run_id, "map_index": "-1"})
    assert job.state == "succeeded" and job.tags["try_number"] == "1"
    assert json.loads(xcoms["app_id"]) == json.loads(xcoms["return_value"]) == job.app_id
    # the "Primus job" link: the task's job page in the api-server, and the connection it reads the job with
    assert "/primus/jobs/primus_quickstart/train?run_id=" in json.loads(xcoms["primus_job_url"])
    assert json.loads(xcoms["primus_conn_id"]) == "primus_default"
    # Airflow 3.3's task state store holds the job's identity for a retry to reattach to (the table is new in 3.3).
    if not AIRFLOW_V_3_3_PLUS:
        pytest.skip(f"the rest passed; the task state store needs Airflow 3.3+, installed {airflow.__version__}")
    stored = dict(db.execute("SELECT key, value FROM task_state_store WHERE dag_id = 'primus_quickstart' "
                             "AND run_id = ?", (run_id,)).fetchall())
    # the job's identity, marked delivered once the task returned its success (a cleared task trains again)
    assert json.loads(stored[STATE_KEY]) == {"app_id": job.app_id, "submit_id": job.tags["submit_id"],
                                             "delivered": True}


def last_run(airflow_home: Path, dag_id: str) -> tuple[str, str]:
    db = sqlite3.connect(airflow_home / "airflow.db")
    return db.execute("SELECT run_id, state FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1",
                      (dag_id,)).fetchone()


def test_params_dag_takes_the_ui_form_values_into_the_job(migrated_airflow_home, tmp_path):
    primus_home = tmp_path / "primus-home"
    got = run_airflow("dags", "test", "primus_train_with_params", "-c",
                      json.dumps({"workers": 3, "steps": 50, "note": "from the form"}),
                      env=airflow_env(migrated_airflow_home, primus_home), timeout=180)
    assert got.returncode == 0, (got.stdout + got.stderr)[-5000:]
    run_id, state = last_run(migrated_airflow_home, "primus_train_with_params")
    assert state == "success"
    client = PrimusClient(primus_home)
    (job,) = client.list({"dag_id": "primus_train_with_params", "run_id": run_id})
    assert job.tags["note"] == "from the form"
    # the task waited for the job, deferred, and its log got the trainer's last lines and the outcome
    output = got.stdout + got.stderr
    assert "Pausing task as DEFERRED" in output and "[worker-0 stdout] [worker-0] final loss" in output
    assert f"Primus job {job.app_id} succeeded" in output
    status = client.status(job.app_id)
    assert {r.name: r.replicas for r in status.roles} == {"ps": 2, "worker": 3}
    assert client.spec(job.app_id).role("worker").env["STEPS"] == "50"


def test_a_bad_form_value_is_refused_before_anything_runs(migrated_airflow_home, tmp_path):
    primus_home = tmp_path / "primus-home"
    got = run_airflow("dags", "test", "primus_train_with_params", "-c", json.dumps({"workers": 0}),
                      env=airflow_env(migrated_airflow_home, primus_home), timeout=180)
    assert got.returncode != 0 and "workers" in got.stdout + got.stderr
    assert PrimusClient(primus_home).list() == []


def test_mapped_sweep_runs_one_job_per_configuration_and_picks_the_best(migrated_airflow_home, tmp_path):
    primus_home = tmp_path / "primus-home"
    got = run_airflow("dags", "test", "primus_model_sweep", env=airflow_env(migrated_airflow_home, primus_home),
                      timeout=240)
    output = got.stdout + got.stderr
    assert got.returncode == 0, output[-5000:]
    run_id, state = last_run(migrated_airflow_home, "primus_model_sweep")
    assert state == "success"
    jobs = PrimusClient(primus_home).list({"dag_id": "primus_model_sweep", "run_id": run_id})
    assert sorted(j.tags["map_index"] for j in jobs) == ["0", "1", "2"]  # one job per mapped instance
    assert sorted(j.tags["learning_rate"] for j in jobs) == ["0.003", "0.01", "0.03"]
    best, learning_rate, loss = re.search(r"best: job (\S+), learning rate ([\d.]+), final loss ([\d.]+)",
                                          output).groups()
    assert {j.app_id: j.tags["learning_rate"] for j in jobs}[best] == learning_rate and float(loss) < 0.1


def test_daily_retraining_trains_on_the_days_partition_and_evaluates_the_model(migrated_airflow_home, tmp_path):
    primus_home = tmp_path / "primus-home"
    data_root, model_root = tmp_path / "data", tmp_path / "models"
    trainer = EXAMPLE_DAGS.parent / "examples" / "ps_worker" / "trainer.py"
    # the upstream pipeline's part: the day's samples and their _SUCCESS marker
    made = subprocess.run([sys.executable, str(trainer), "make-partition", str(data_root / "20261201"), "3000"])
    assert made.returncode == 0
    conf = {"data_root": str(data_root), "model_root": str(model_root)}
    got = run_airflow("dags", "test", "primus_daily_retraining", "2026-12-01", "-c", json.dumps(conf),
                      env=airflow_env(migrated_airflow_home, primus_home), timeout=300)
    output = got.stdout + got.stderr
    assert got.returncode == 0, output[-5000:]
    run_id, state = last_run(migrated_airflow_home, "primus_daily_retraining")
    assert state == "success"
    # the partition was there already (the sensor checks once before deferring); the data
    # sensor had to wait, in the trigger
    assert "Partition " + str(data_root / "20261201" / "_SUCCESS") + " on the local filesystem: ready" in output
    assert "Pausing task as DEFERRED" in output
    client = PrimusClient(primus_home)
    (train,) = client.list({"dag_id": "primus_daily_retraining", "task_id": "train", "run_id": run_id})
    status = client.status(train.app_id)
    assert status.job.state == "succeeded"
    assert status.data is not None
    assert status.data.watermark == "2026-12-01" and status.data.records_done >= 3000
    assert sorted(p.name for p in (model_root / "20261201").iterdir()) == ["ps-0.json", "ps-1.json"]
    (evaluate,) = client.list({"dag_id": "primus_daily_retraining", "task_id": "evaluate", "run_id": run_id})
    assert evaluate.state == "succeeded"
    assert re.search(r"evaluation loss [\d.]+ on held-out data .*2 ps shards", output)


def test_retrain_on_new_partition_dag_trains_on_its_partition(migrated_airflow_home, tmp_path):
    """`dags test` creates no asset event: the run trains on the ``partition`` Param instead (the
    event-driven path runs in tests/provider/test_live_airflow.py, with a real triggerer)."""
    primus_home, data_root = tmp_path / "primus-home", tmp_path / "data"
    trainer = EXAMPLE_DAGS.parent / "examples" / "ps_worker" / "trainer.py"
    made = subprocess.run([sys.executable, str(trainer), "make-partition", str(data_root / "20261202"), "640"])
    assert made.returncode == 0
    env = airflow_env(migrated_airflow_home, primus_home)
    env["PRIMUS_RETRAIN_DATA_ROOT"] = str(data_root)
    got = run_airflow("dags", "test", "primus_retrain_on_new_partition", "-c", json.dumps({"partition": "2026-12-02"}),
                      env=env, timeout=240)
    output = got.stdout + got.stderr
    assert got.returncode == 0, output[-5000:]
    run_id, state = last_run(migrated_airflow_home, "primus_retrain_on_new_partition")
    assert state == "success"
    assert "[worker-0] trained on 640 samples" in output  # the trainer's output, followed into the task log
    client = PrimusClient(primus_home)
    (job,) = client.list({"dag_id": "primus_retrain_on_new_partition", "run_id": run_id})
    time_range = client.spec(job.app_id).input.time_range
    assert (time_range.start, time_range.end) == ("2026-12-02", "2026-12-02")
