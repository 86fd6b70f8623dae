"""Pod states as the failover engine's events (fed pods as the API server sends them, no cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from primus_runtime.backends.base import BackendEvents, Exited, Launched, LaunchRequest
from primus_runtime.backends.kubernetes.executors import KubernetesExecutorBackend, pending_reason_of, pod_exit
from primus_runtime.backends.kubernetes.objects import Pod, pod_of
from primus_runtime.spec import JobSpec, Resources


def pod(phase: str, exit_code: int | None = None, term_reason: str | None = None, reason: str | None = None,
        message: str | None = None, conditions: list[dict[str, Any]] | None = None, waiting: str | None = None,
        name: str = "p") -> Pod:
    """A pod in the API's JSON (camelCase, unset fields left out), read as the AM reads it."""
    state: dict[str, Any] = {}
    if exit_code is not None:
        state["terminated"] = {"exitCode": exit_code, **({"reason": term_reason} if term_reason else {})}
    if waiting:
        state["waiting"] = {"reason": waiting, "message": "back-off pulling"}
    status: dict[str, Any] = {"phase": phase, "podIP": "10.244.0.7", "containerStatuses": [
        {"name": "executor", "state": state, "image": "i", "imageID": "", "ready": False, "restartCount": 0}]}
    for key, value in (("reason", reason), ("message", message), ("conditions", conditions)):
        if value is not None:
            status[key] = value
    return pod_of({"kind": "Pod", "metadata": {"name": name, "resourceVersion": "7"},
                   "spec": {"containers": [], "nodeName": "node-1"}, "status": status})


def disruption(reason: str) -> list[dict[str, Any]]:
    return [{"type": "DisruptionTarget", "status": "True", "reason": reason, "message": f"{reason} happened"}]


@pytest.mark.parametrize("the_pod,expected", [
    (pod("Succeeded", 0, "Completed"), (0, "executor exited 0", False)),
    (pod("Failed", 3, "Error"), (3, "executor exited 3", False)),
    (pod("Failed", 137, "OOMKilled"), (137, "OOMKilled", False)),
    (pod("Failed", 143, "Error", reason="Evicted", message="The node was low on memory."),
     (143, "pod evicted: The node was low on memory.", True)),
    (pod("Failed", 143, "Error", conditions=disruption("PreemptionByScheduler")),
     (143, "pod disrupted (PreemptionByScheduler): PreemptionByScheduler happened", True)),
    (pod("Running", conditions=disruption("EvictionByEvictionAPI")),
     (None, "pod disrupted (EvictionByEvictionAPI): EvictionByEvictionAPI happened", True)),
    (pod("Failed", reason="NodeLost", message="node node-1 which was running the pod is unresponsive"),
     (None, "pod lost with node-1 (NodeLost): node node-1 which was running the pod is unresponsive", False)),
    (pod("Running", conditions=disruption("DeletionByPodGC")),
     (None, "pod lost with node-1 (DeletionByPodGC): DeletionByPodGC happened", False)),
    (pod("Running"), None),
    (pod("Pending"), None),
])
def test_how_a_pod_ended(the_pod, expected):
    assert pod_exit(the_pod) == expected


def test_a_deleted_pod_is_ended_by_whoever_deleted_it():
    assert pod_exit(pod("Running"), deleted=True) == (None, "pod deleted", False)
    assert pod_exit(pod("Running", 143, "Error"), deleted=True, stopped=True) == (143, "stopped by the AM", False)
    # A terminal phase says more than the deletion.
    assert pod_exit(pod("Failed", 2, "Error"), deleted=True) == (2, "executor exited 2", False)


def test_why_a_pod_is_pending():
    unscheduled = pod("Pending", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                              "message": "0/3 nodes have enough nvidia.com/gpu"}])
    assert pending_reason_of(unscheduled) == "pod p not scheduled: 0/3 nodes have enough nvidia.com/gpu"
    pulling = pod("Pending", waiting="ImagePullBackOff", conditions=[{"type": "PodScheduled", "status": "True"}])
    assert pending_reason_of(pulling) == "pod p: container ImagePullBackOff: back-off pulling"
    assert pending_reason_of(pod("Running")) is None


class Recorder(BackendEvents):
    def __init__(self) -> None:
        self.launched: list[Launched] = []
        self.exited: list[Exited] = []

    def on_launched(self, launched: Launched) -> None:
        self.launched.append(launched)

    def on_exited(self, exited: Exited) -> None:
        self.exited.append(exited)


def backend_with(*names: str) -> tuple[KubernetesExecutorBackend, Recorder]:
    spec = JobSpec.from_dict({"name": "j", "roles": [{"name": "w", "replicas": 3, "command": "x"}],
                              "backend": {"type": "kubernetes", "image": "i"}})
    backend = KubernetesExecutorBackend(api=None, spec=spec, app="a", namespace="ns", am_uid="u")
    events = Recorder()
    backend._events = events
    for i, name in enumerate(names):
        backend._requests[name] = LaunchRequest("w", i, f"inc{i}", 0, Resources(gpu=1), {})
    return backend, events


def test_events_become_one_launch_and_one_exit_per_pod():
    backend, events = backend_with("p")
    for kind, state in (("ADDED", pod("Pending")), ("MODIFIED", pod("Running")), ("MODIFIED", pod("Running")),
                        ("MODIFIED", pod("Failed", 1, "Error")), ("DELETED", pod("Failed", 1, "Error"))):
        backend._on_pods(kind, [state])
    assert [(x.role, x.index, x.incarnation, x.host, x.gpus) for x in events.launched] == [("w", 0, "inc0", "node-1", [0])]
    assert events.launched[0].logs["stdout"] == "pods/p/executor"
    assert events.exited == [Exited("w", 0, "inc0", 1, "executor exited 1", False)]


def test_a_relist_reports_the_pods_deleted_while_the_watch_was_away():
    backend, events = backend_with("p0", "p1", "p2")
    backend._on_pods("SYNC", [pod("Running", name="p0"), pod("Running", name="p1")])
    backend._on_pods("SYNC", [pod("Running", name="p1")])  # p0 went while disconnected; p2 never seen yet
    assert [(x.index, x.reason, x.exit_code) for x in events.exited] == [(0, "pod deleted", None)]
