"""One spec file, three backends: the ps + worker example runs on the local machine, on YARN (the
Hadoop minicluster) and on Kubernetes (the test cluster) in one test run; only `backend` differs,
and every backend tells the same story in its status."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cluster.conftest import Minicluster, minicluster  # noqa: F401 - the session's Hadoop minicluster

from primus_runtime.backends.base import ClientOptions
from primus_runtime.client import PrimusClient
from primus_runtime.spec import JobSpec

pytestmark = pytest.mark.timeout(600)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ps_worker"


def test_the_ps_worker_spec_succeeds_on_local_yarn_and_kubernetes(k8s_cluster, k8s_namespace,
                                                                  minicluster: Minicluster,  # noqa: F811
                                                                  tmp_path):
    shutil.copytree(EXAMPLE, tmp_path / "ps_worker")
    job = JobSpec.from_file(tmp_path / "ps_worker" / "job.yaml")
    sections = {"local": {"type": "local"}, "yarn": {"type": "yarn"},
                "kubernetes": {"type": "kubernetes", "namespace": k8s_namespace, "image": "primus-runtime:test"}}
    client = PrimusClient(options=ClientOptions(home=str(tmp_path / "home"), kube_config=str(k8s_cluster.kubeconfig),
                                                namespace=k8s_namespace))
    submitted = {}
    for name, section in sections.items():
        spec = job.to_dict() | {"backend": section}
        submitted[name] = client.submit(spec)
    finals = {name: client.wait(app_id, timeout=420) for name, app_id in submitted.items()}
    for name, status in finals.items():
        assert status.job.state == "succeeded", (name, status.job)
        roles = {role.name: role for role in status.roles}
        assert {k: n for k, n in roles["worker"].states.items() if n} == {"succeeded": 2}, (name, roles["worker"])
        assert roles["ps"].replicas == 2, (name, roles["ps"])
    assert [client.cluster_for(app_id).location().split()[0] for app_id in submitted.values()] == [
        str(tmp_path / "home" / "jobs").split()[0], "YARN", "Kubernetes"]
