"""What the AM gives a trainer's environment: PRIMUS_* for every role, the torch.distributed
variables for PyTorch roles, what TF_CONFIG needs for TensorFlow roles, and the role's ``env``. The
executor adds it to its own environment (``executor/main.py``: ``trainer_environment``).

What depends on the membership (PRIMUS_CLUSTER, TF_CONFIG's cluster) is not here: the executor
composes it from the membership its start command carries (``protocol.membership_env``), so that
one encoded membership serves every executor of a version (``am/membership.py``)."""

from __future__ import annotations

import json

from .. import protocol
from ..spec import JobSpec
from .state import Executor, JobRecord


def trainer_env(spec: JobSpec, record: JobRecord, ex: Executor, am_address: str) -> dict[str, str]:
    role = spec.role(ex.role)
    counts = {name: state.replicas for name, state in record.roles.items()}
    env = {
        "PRIMUS_APP_ID": record.app_id,
        "PRIMUS_JOB_NAME": record.name,
        "PRIMUS_ROLE": ex.role,
        "PRIMUS_INDEX": str(ex.index),
        "PRIMUS_INCARNATION": ex.incarnation,
        "PRIMUS_ATTEMPT": str(ex.attempt),
        "PRIMUS_HOST": ex.host or "",
        "PRIMUS_AM_ADDRESS": am_address,
        "PRIMUS_PORTS": ",".join(str(p) for p in ex.ports),
        "PRIMUS_PORT": str(ex.ports[0]) if ex.ports else "",
        "PRIMUS_ROLE_REPLICAS": str(counts[ex.role]),
        "PRIMUS_ROLE_COUNTS": json.dumps(counts, sort_keys=True),
        # Only the GPUs the backend gave this executor; "" hides every GPU.
        "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in ex.gpus),
    }
    for name, replicas in counts.items():
        env["PRIMUS_NUM_" + name.upper().replace("-", "_")] = str(replicas)
    if role.framework == "pytorch":
        env.update(_torch_env(record, ex))
    if role.consumes_input and spec.input is not None:
        # The records arrive on stdin; how they are framed (data.reader decodes both).
        env[protocol.TRAINER_ENV_INPUT_FRAMING] = spec.input.framing
    env.update(role.env)
    return env


def tensorflow_task(spec: JobSpec, ex: Executor) -> dict | None:
    """For a TensorFlow role, what the executor needs to compose TF_CONFIG from the membership: the
    roles of its cluster and this executor's task; None for other frameworks."""
    if spec.role(ex.role).framework != "tensorflow":
        return None
    return {"roles": tensorflow_cluster_roles(spec), "task": {"type": ex.role, "index": ex.index}}


def tensorflow_cluster_roles(spec: JobSpec) -> list[str]:
    # TensorFlow's convention: the evaluator is not part of the cluster it evaluates.
    return [r.name for r in spec.roles if r.framework == "tensorflow" and r.name != "evaluator"]


def _torch_env(record: JobRecord, ex: Executor) -> dict[str, str]:
    # The rendezvous (c10d TCPStore) lives on rank 0's first reserved port.
    master = record.executors[f"{ex.role}-0"]
    return {
        "MASTER_ADDR": master.host or "",
        "MASTER_PORT": str(master.ports[0]) if master.ports else "",
        "RANK": str(ex.index),
        "WORLD_SIZE": str(record.roles[ex.role].replicas),
        # One trainer per executor, and CUDA_VISIBLE_DEVICES holds only its GPUs.
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": str(ex.index),
    }
