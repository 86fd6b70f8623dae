"""The environment each framework's trainer gets: the AM's part (``trainer_env``) and what the executor
adds from the membership its start command carries (``protocol.membership_env``)."""

from __future__ import annotations

import json

import pytest

from primus_runtime import protocol
from primus_runtime.am.membership import Membership
from primus_runtime.am.state import Executor, ExecutorState, JobRecord, RoleState
from primus_runtime.am.trainer_env import tensorflow_task
from primus_runtime.am.trainer_env import trainer_env as am_env
from primus_runtime.spec import JobSpec, SpecError


def trainer_env(spec: JobSpec, record: JobRecord, ex: Executor, am_address: str) -> dict[str, str]:
    """What the trainer of ``ex`` gets: the AM's variables, then the executor's from the membership."""
    cluster = json.loads(Membership(record, spec.peer_views()).encoded(ex.role)[1])
    return {**am_env(spec, record, ex, am_address), **protocol.membership_env(cluster, tensorflow_task(spec, ex))}


def _record(spec: JobSpec) -> JobRecord:
    record = JobRecord(app_id="app-1", name=spec.name)
    for role in spec.roles:
        record.roles[role.name] = RoleState(role.name, role.replicas)
        for index in range(role.replicas):
            ex = Executor(role=role.name, index=index, incarnation=f"{role.name}{index}", attempt=0,
                          state=ExecutorState.REGISTERED, host=f"host-{role.name}-{index}",
                          ports=[1000 + index, 2000 + index])
            record.put_executor(ex)
    return record


def test_tensorflow_roles_get_tf_config_without_the_evaluator():
    spec = JobSpec.from_dict({"name": "tf", "roles": [
        {"name": "chief", "command": "x", "framework": "tensorflow"},
        {"name": "ps", "replicas": 2, "command": "x", "framework": "tensorflow"},
        {"name": "worker", "replicas": 2, "command": "x", "framework": "tensorflow"},
        {"name": "evaluator", "command": "x", "framework": "tensorflow"},
    ]})
    record = _record(spec)
    env = trainer_env(spec, record, record.executors["worker-1"], "am:1")
    tf = json.loads(env["TF_CONFIG"])
    assert tf["task"] == {"type": "worker", "index": 1}
    assert tf["cluster"] == {"chief": ["host-chief-0:1000"], "ps": ["host-ps-0:1000", "host-ps-1:1001"],
                             "worker": ["host-worker-0:1000", "host-worker-1:1001"]}
    evaluator = json.loads(trainer_env(spec, record, record.executors["evaluator-0"], "am:1")["TF_CONFIG"])
    assert evaluator["task"] == {"type": "evaluator", "index": 0}


def test_pytorch_roles_get_the_rendezvous_of_rank_zero():
    spec = JobSpec.from_dict({"name": "pt", "roles": [
        {"name": "worker", "replicas": 3, "command": "x", "framework": "pytorch", "resources": {"gpu": 1}}]})
    record = _record(spec)
    record.executors["worker-2"].gpus = [5]
    env = trainer_env(spec, record, record.executors["worker-2"], "am:1")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("host-worker-0", "1000")
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("2", "3", "0")
    assert env["CUDA_VISIBLE_DEVICES"] == "5"
    assert "TF_CONFIG" not in env


def test_every_trainer_gets_primus_variables_and_its_own_env():
    spec = JobSpec.from_dict({"name": "plain", "roles": [
        {"name": "ps", "command": "x"}, {"name": "worker", "replicas": 2, "command": "x", "env": {"LR": "0.1"}}]})
    record = _record(spec)
    env = trainer_env(spec, record, record.executors["worker-0"], "am:1")
    assert env["PRIMUS_ROLE"] == "worker" and env["PRIMUS_INDEX"] == "0"
    assert env["PRIMUS_PORTS"] == "1000,2000" and env["PRIMUS_PORT"] == "1000"
    assert json.loads(env["PRIMUS_ROLE_COUNTS"]) == {"ps": 1, "worker": 2}
    assert env["PRIMUS_NUM_PS"] == "1" and env["PRIMUS_NUM_WORKER"] == "2"
    assert json.loads(env["PRIMUS_CLUSTER"])["ps"] == ["host-ps-0:1000"]
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["LR"] == "0.1"
    assert "TF_CONFIG" not in env and "MASTER_ADDR" not in env


def test_consuming_roles_are_told_how_their_input_is_framed():
    spec = JobSpec.from_dict({"name": "data", "roles": [
        {"name": "worker", "command": "x", "consumes_input": True},
        {"name": "evaluator", "command": "x"},
    ], "input": {"sources": [{"name": "in", "path": "/data", "format": "tfrecord"}]}})
    record = _record(spec)
    assert trainer_env(spec, record, record.executors["worker-0"], "am:1")["PRIMUS_INPUT_FRAMING"] == \
        "length_prefixed"
    assert "PRIMUS_INPUT_FRAMING" not in trainer_env(spec, record, record.executors["evaluator-0"], "am:1")


def test_a_role_sees_only_its_peers_and_a_tensorflow_role_must_see_its_cluster():
    spec = JobSpec.from_dict({"name": "ps", "roles": [
        {"name": "ps", "replicas": 2, "command": "x", "peers": ["ps"]},
        {"name": "worker", "replicas": 3, "command": "x", "peers": ["ps"]},
        {"name": "chief", "command": "x"}]})
    record = _record(spec)
    assert json.loads(trainer_env(spec, record, record.executors["worker-2"], "am:1")["PRIMUS_CLUSTER"]) == \
        {"ps": ["host-ps-0:1000", "host-ps-1:1001"]}
    assert set(json.loads(trainer_env(spec, record, record.executors["chief-0"], "am:1")["PRIMUS_CLUSTER"])) == \
        {"ps", "worker", "chief"}
    with pytest.raises(SpecError, match=r"roles\[1\]\.peers: unknown role\(s\) \['pss'\]"):
        JobSpec.from_dict({"name": "x", "roles": [{"name": "ps", "command": "x"},
                                                  {"name": "worker", "command": "x", "peers": ["pss"]}]})
    with pytest.raises(SpecError, match=r"must see every role of TF_CONFIG's cluster .* missing \['worker'\]"):
        JobSpec.from_dict({"name": "x", "roles": [
            {"name": "ps", "command": "x", "framework": "tensorflow"},
            {"name": "worker", "command": "x", "framework": "tensorflow", "peers": ["ps"]}]})


def test_a_membership_too_long_for_a_variable_is_only_in_the_cluster_file():
    addresses = [f"host-{i:06d}.example.com:20000" for i in range(5000)]  # ~150 KB of JSON
    env = protocol.membership_env({"version": 1, "roles": {"worker": addresses}}, None)
    assert protocol.TRAINER_ENV_CLUSTER not in env


def test_membership_versions_move_only_for_the_roles_a_view_holds():
    spec = JobSpec.from_dict({"name": "ps", "roles": [
        {"name": "ps", "command": "x", "peers": ["ps"]}, {"name": "worker", "replicas": 2, "command": "x"}]})
    record = _record(spec)
    membership = Membership(record, spec.peer_views())
    ps_version, encoded = membership.encoded("ps")
    worker = record.executors["worker-1"]
    record.set_executor_state(worker, ExecutorState.FAILED, "gone")
    membership.changed(worker)
    assert membership.encoded("ps") == (ps_version, encoded)  # the same bytes: nothing the ps sees changed
    version, changed = membership.encoded("worker")
    assert version > ps_version and json.loads(changed)["roles"]["worker"] == ["host-worker-0:1000", None]
    record.roles["worker"].replicas = 3
    membership.resized("worker")
    assert json.loads(membership.encoded("worker")[1])["roles"]["worker"] == ["host-worker-0:1000", None, None]
