"""Local backend specifics: the resource ledger, files, launch errors."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

from conftest import make_spec, read_log
from primus_runtime.backends.base import LaunchRequest
from primus_runtime.backends.local.executors import LocalExecutorBackend
from primus_runtime.backends.local.jobs import JobDir
from primus_runtime.backends.local.settings import LocalBackend
from primus_runtime.spec import Resources


def test_gpus_are_handed_out_exclusively_and_wait_when_taken(client):
    spec = make_spec([{"name": "worker", "replicas": 3, "min_replicas": 1,
                       "command": "echo gpus=$CUDA_VISIBLE_DEVICES; sleep 0.5",
                       "resources": {"gpu": 1}}],
                     scheduling={"policy": "dynamic"}, backend={"type": "local", "gpus": [3, 5]})
    app = client.submit(spec)
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded", status.job
    by_launch = sorted(status.executors, key=lambda e: e.registered_at)
    seen = [read_log(client, app, "worker", e.index).strip() for e in by_launch]
    assert sorted(seen[:2]) == ["gpus=3", "gpus=5"] and seen[2] in ("gpus=3", "gpus=5")
    assert [e.gpus for e in by_launch] == [[int(s.split("=")[1])] for s in seen]
    # Only two GPUs: the third executor launched after one of the first two ended.
    assert by_launch[2].registered_at > min(e.finished_at for e in by_launch[:2])
    # Launched in index order: worker-2 was the one that waited.
    assert sorted(e.index for e in by_launch[:2]) == [0, 1]


def test_executors_without_gpus_see_none(client):
    app = client.submit(make_spec([{"name": "worker", "command": "echo \"[$CUDA_VISIBLE_DEVICES]\""}]))
    client.wait(app, timeout=60)
    assert read_log(client, app, "worker", 0).strip() == "[]"


def test_files_are_available_in_the_trainer_working_directory(client, tmp_path):
    (tmp_path / "train.py").write_text("print('trained with', __file__)\n")
    spec = make_spec([{"name": "worker", "command": "python3 train.py", "files": [str(tmp_path / "train.py")]}])
    app = client.submit(spec)
    assert client.wait(app, timeout=60).job.state == "succeeded"
    assert "trained with" in read_log(client, app, "worker", 0)


def test_a_command_that_cannot_start_fails_with_the_reason(client):
    spec = make_spec([{"name": "worker", "command": ["/nonexistent/trainer"], "failover": {"restart": "never"}}])
    app = client.submit(spec)
    status = client.wait(app, timeout=60)
    assert status.job.state == "failed"
    assert "exit 127" in status.job.reason and "cannot launch '/nonexistent/trainer'" in status.job.reason


def test_missing_files_are_refused_at_submit(client, tmp_path):
    import pytest

    from primus_runtime.spec import SpecError

    with pytest.raises(SpecError, match=r"roles\[0\]\.files\[0\]: no such file or directory"):
        client.submit(make_spec([{"name": "worker", "command": "x", "files": [str(tmp_path / "nope.py")]}]))
    assert client.list() == []


def test_stderr_and_executor_logs_are_kept_per_attempt(client):
    fail_first = 'echo "attempt $PRIMUS_ATTEMPT" >&2; [ "$PRIMUS_ATTEMPT" != 0 ]'
    app = client.submit(make_spec([{"name": "worker", "command": fail_first}]))
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded"
    assert read_log(client, app, "worker", 0, "stderr").strip() == "attempt 1"
    first = client.cluster("local").jobs / app / "executors" / "worker-0" / "attempt-0"
    assert (first / "stderr.log").read_text().strip() == "attempt 0"
    assert "registered as worker-0" in (first / "executor.log").read_text()


def test_an_executor_waiting_for_resources_says_what_is_short_or_whom_it_waits_behind(tmp_path):
    backend = LocalExecutorBackend(JobDir(tmp_path), LocalBackend(cpus=4, memory="8Gi", gpus=[]), tmp_path / "b.zip")
    assert backend.ledger.take("running", Resources(cpu=3, memory="1Gi")) is not None
    big = LaunchRequest("ps", 0, "big", 0, Resources(cpu=2, memory="1Gi"), {})
    small = LaunchRequest("worker", 0, "small", 0, Resources(cpu=1, memory="1Gi"), {})
    backend._waiting = [big, small]
    assert backend.pending_reason("big") == "waits for cpu: needs 2, 1 free of 4"
    assert backend.pending_reason("small") == \
        "waits behind ps-0 in the local launch queue (first come, first served; 1 ahead of it)"
    assert backend.pending_reason("running") is None
    gpu = Resources(gpu=1)
    assert backend.ledger.shortage(gpu) == "gpu: needs 1, 0 free of 0"


# Prints where the trainer runs and what it was given.
SHOW_CWD_AND_ENV = [sys.executable, "-c", "import json, os; print(json.dumps([os.getcwd(), dict(os.environ)]))"]


def test_the_trainer_is_not_handed_the_token(client):
    app = client.submit(make_spec([{"name": "worker", "command": SHOW_CWD_AND_ENV}]))
    assert client.wait(app, timeout=60).job.state == "succeeded"
    cwd, env = json.loads(read_log(client, app, "worker", 0))
    job = client.cluster("local").jobs / app
    token = (job / "token").read_text().strip()
    assert not any(token in value or str(job / "token") in value for value in env.values())
    assert "PRIMUS_TOKEN_FILE" not in env
    for directory in (Path(cwd), *Path(cwd).parents):  # no relative path from its cwd reaches it
        assert not (directory / "token").exists(), directory
    assert not (Path(cwd) / "../../../token").exists()
    # Other users cannot read the job's secrets (its own user can: see the README's threat model).
    assert stat.S_IMODE(job.stat().st_mode) == 0o700
    assert stat.S_IMODE((job / "token").stat().st_mode) == 0o600
    assert stat.S_IMODE((job / "spec.json").stat().st_mode) == 0o600


def test_trainers_get_the_membership_of_their_peers_and_tf_config_from_the_executor(client):
    """The AM sends one encoded membership per role's view; the executor composes PRIMUS_CLUSTER and
    TF_CONFIG from it, so a real trainer sees only the roles its role names in ``peers``."""
    show = "python3 -c 'import os; print(os.environ.get(\"PRIMUS_CLUSTER\")); print(os.environ.get(\"TF_CONFIG\"))'"
    spec = make_spec([
        {"name": "ps", "command": show, "framework": "tensorflow", "peers": ["ps", "worker"],
         "success_percent": 100},
        {"name": "worker", "replicas": 2, "command": show, "framework": "tensorflow"},
        {"name": "evaluator", "command": show, "peers": ["evaluator"]},
    ])
    app = client.submit(spec)
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded", status.job
    cluster, tf_config = read_log(client, app, "worker", 1).splitlines()[:2]
    assert set(json.loads(cluster)) == {"ps", "worker", "evaluator"}
    tf = json.loads(tf_config)
    assert tf["task"] == {"type": "worker", "index": 1} and len(tf["cluster"]["worker"]) == 2
    assert set(tf["cluster"]) == {"ps", "worker"}  # the evaluator is not part of TF's cluster
    evaluator_cluster, evaluator_tf = read_log(client, app, "evaluator", 0).splitlines()[:2]
    assert set(json.loads(evaluator_cluster)) == {"evaluator"} and evaluator_tf == "None"


# Prints the trainer's environment and its executor's as the kernel shows it (/proc/<pid>/environ:
# a forked executor's is its fork server's).
SHOW_ENVS = [sys.executable, "-c", "import json, os; parent = open(f'/proc/{os.getppid()}/environ', 'rb').read(); "
             "print(json.dumps([dict(os.environ), parent.decode(errors='replace').split(chr(0))]))"]
WORKER_SECRETS = {"AIRFLOW__CORE__FERNET_KEY": "secret-x", "AIRFLOW_CTX_DAG_ID": "d",
                  "AWS_SECRET_ACCESS_KEY": "secret-aws", "AIRFLOW_CONN_WAREHOUSE": "postgres://u:secret-pw@db/x"}


def test_a_trainer_gets_none_of_the_submitting_workers_environment(client, monkeypatch):
    """An Airflow worker submits with its settings, context and secrets in its environment: none of
    them reaches the trainer (nor its executor), which gets the machine's basics, the spec's env and
    the runtime's variables."""
    for name, value in WORKER_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LC_TIME", "C")
    monkeypatch.setenv("HADOOP_USER_NAME", "alice")
    spec = make_spec([{"name": "worker", "command": SHOW_ENVS, "env": {"MODEL_DIR": "/models/x"},
                       "framework": "pytorch"}])
    app = client.submit(spec)
    assert client.wait(app, timeout=60).job.state == "succeeded"
    env, executor_env = json.loads(read_log(client, app, "worker", 0))
    leaked = [name for name in WORKER_SECRETS if name in env or any(v.startswith(name + "=") for v in executor_env)]
    assert leaked == []
    assert not any("secret" in value for value in [*env.values(), *executor_env])
    assert env["MODEL_DIR"] == "/models/x"  # the spec's env
    assert env["PRIMUS_ROLE"] == "worker" and env["PRIMUS_APP_ID"] == app and env["WORLD_SIZE"] == "1"
    assert env["PATH"] == os.environ["PATH"] and env["LC_TIME"] == "C"  # what running programs needs
    assert env["HADOOP_USER_NAME"] == "alice"  # the executor's WebHDFS reads act as the AM's scan does


def test_a_job_names_what_its_trainers_inherit_from_the_submitting_environment(client, monkeypatch):
    monkeypatch.setenv("TF_PYTHON", "/opt/tf/bin/python")
    monkeypatch.setenv("WANDB_API_KEY", "k1")
    monkeypatch.setenv("WANDB_PROJECT", "ctr")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-aws")
    spec = make_spec([{"name": "worker", "command": SHOW_CWD_AND_ENV}],
                     backend={"type": "local", "inherit_env": ["TF_PYTHON", "WANDB_*"]})
    app = client.submit(spec)
    assert client.wait(app, timeout=60).job.state == "succeeded"
    _, env = json.loads(read_log(client, app, "worker", 0))
    assert (env["TF_PYTHON"], env["WANDB_API_KEY"], env["WANDB_PROJECT"]) == ("/opt/tf/bin/python", "k1", "ctr")
    assert "AWS_SECRET_ACCESS_KEY" not in env
