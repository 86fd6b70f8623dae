"""AM recovery on Kubernetes (am.max_attempts > 1), on the test cluster: the AM runs as a Job's pod;
when that pod dies the Job creates the next attempt, which takes the journal from its ConfigMap and
adopts the executor pods still running (the same pods) instead of starting them again."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from conftest import wait_for
from primus_runtime.backends.base import ClientOptions
from primus_runtime.backends.kubernetes import manifests as m
from primus_runtime.client import PrimusClient
from primus_runtime.models import ExecutorView


@pytest.fixture
def primus(k8s_cluster, k8s_namespace) -> PrimusClient:
    return PrimusClient(options=ClientOptions(kube_config=str(k8s_cluster.kubeconfig), namespace=k8s_namespace))


def sleeper_job(namespace: str, seconds: int, max_attempts: int = 3) -> dict[str, Any]:
    """Two workers that each sleep ``seconds`` (no input): the job succeeds when both exit 0."""
    return {"name": "recover-me", "am": {"max_attempts": max_attempts, "recovery_grace": 90},
            "backend": {"type": "kubernetes", "image": "primus-runtime:test", "namespace": namespace},
            "roles": [{"name": "worker", "replicas": 2, "command": f"python3 -c 'import time; time.sleep({seconds})'",
                       "resources": {"cpu": 0.2, "memory": "128Mi"}}]}


def pods(core: client.CoreV1Api, namespace: str, app: str, component: str) -> list[client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=f"{m.LABEL_APP}={app},{m.LABEL_COMPONENT}={component}").items


def running_executors(primus: PrimusClient, app_id: str) -> list[ExecutorView] | None:
    executors = primus.status(app_id).executors
    return executors if len(executors) == 2 and all(e.state == "running" for e in executors) else None


def test_a_deleted_am_pod_is_recreated_and_adopts_the_executor_pods(primus, k8s_core, k8s_namespace):
    app_id = primus.submit(sleeper_job(k8s_namespace, seconds=40))
    _, app = m.parse_app_id(app_id)
    wait_for(lambda: running_executors(primus, app_id), timeout=120, what="both workers running")
    before = {p.metadata.name: p.metadata.uid for p in pods(k8s_core, k8s_namespace, app, "executor")}
    first_am = pods(k8s_core, k8s_namespace, app, "am")
    assert len(first_am) == 1 and len(before) == 2
    wait_for(lambda: (k8s_core.read_namespaced_config_map(m.Names(app).journal, k8s_namespace).data or {})
             .get(m.JOURNAL_KEY), timeout=30, what="the AM journal's copy")

    k8s_core.delete_namespaced_pod(first_am[0].metadata.name, k8s_namespace, grace_period_seconds=0)

    status = primus.wait(app_id, timeout=240)
    assert status.job.state == "succeeded", status.job
    attempts = status.job.am_attempts
    assert [(a.attempt, a.adopted, a.gone) for a in attempts] == [(2, 2, 0)], attempts
    assert attempts[0].recovered_at is not None
    after = {p.metadata.name: p.metadata.uid for p in pods(k8s_core, k8s_namespace, app, "executor")}
    assert after == before  # the same pods: none deleted, none added
    assert all(e.attempt == 0 for e in status.executors)
    second_am = [p for p in pods(k8s_core, k8s_namespace, app, "am") if p.metadata.uid != first_am[0].metadata.uid]
    assert len(second_am) == 1


def test_with_one_attempt_the_am_is_a_bare_pod_that_owns_the_job(primus, k8s_core, k8s_namespace):
    app_id = primus.submit(sleeper_job(k8s_namespace, seconds=1, max_attempts=1))
    _, app = m.parse_app_id(app_id)
    status = primus.wait(app_id, timeout=180)
    assert status.job.state == "succeeded", status.job
    am = k8s_core.read_namespaced_pod(app, k8s_namespace)
    assert not am.metadata.owner_references
    owners = {o.uid for p in pods(k8s_core, k8s_namespace, app, "executor") for o in p.metadata.owner_references}
    assert owners == {am.metadata.uid}


def test_am_deaths_used_up_within_the_window_fail_the_job_naming_them(primus, k8s_core, k8s_namespace):
    """am.max_attempts 2 and the default 1h window: the second AM pod deleted, the Job (which allows more
    pod failures, as it cannot count in a window) starts a third, whose bootstrap counts two deaths
    within the hour and fails the job naming them, its executor pods stopped (issue 35)."""
    app_id = primus.submit(sleeper_job(k8s_namespace, seconds=120, max_attempts=2))
    _, app = m.parse_app_id(app_id)
    deleted: set[str] = set()
    for attempt in (1, 2):
        # Served by this attempt (it published its address, and with it the deaths before it).
        wait_for(lambda n=attempt: primus.status(app_id).job.attempt == n and running_executors(primus, app_id),
                 timeout=120, what=f"AM attempt {attempt} serving, both workers running")
        wait_for(lambda: (k8s_core.read_namespaced_config_map(m.Names(app).journal, k8s_namespace).data or {})
                 .get(m.JOURNAL_KEY), timeout=30, what="the AM journal's copy")
        am_pod = wait_for(lambda: next((p for p in pods(k8s_core, k8s_namespace, app, "am")
                                        if p.metadata.name not in deleted and p.status.phase == "Running"), None),
                          timeout=120, what=f"AM attempt {attempt}'s pod running")
        k8s_core.delete_namespaced_pod(am_pod.metadata.name, k8s_namespace, grace_period_seconds=0)
        deleted.add(am_pod.metadata.name)
    status = primus.wait(app_id, timeout=240)
    assert status.job.state == "failed", status.job
    assert status.job.reason.startswith("the AM died 2 times within 1h (am.max_attempts 2); the last: AM attempt 2 "), \
        status.job
    wait_for(lambda: not pods(k8s_core, k8s_namespace, app, "executor"), timeout=60, what="the executor pods gone")
