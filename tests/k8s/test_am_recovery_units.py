"""AM recovery on Kubernetes without a cluster: the Job and the ownership (manifests), what a new AM
attempt adopts or deletes (fed pods as the API server sends them), and the journal's copy in its
ConfigMap."""

from __future__ import annotations

import asyncio
from typing import Any

from primus_runtime.backends.base import Adoption
from primus_runtime.backends.kubernetes import manifests as m
from primus_runtime.backends.kubernetes.executors import KubernetesExecutorBackend
from primus_runtime.backends.kubernetes.store import MAX_JOURNAL_BYTES, JournalConfigMap
from primus_runtime.spec import JobSpec, Resources

APP = "primus-x-abc123"


def job(max_attempts: int, **am: Any) -> JobSpec:
    return JobSpec.from_dict({"name": "x", "am": {"max_attempts": max_attempts, **am},
                              "roles": [{"name": "worker", "replicas": 2, "command": "x"}],
                              "backend": {"type": "kubernetes", "image": "registry/primus:1", "namespace": "ml"}})


def test_with_max_attempts_the_am_is_a_job_of_that_many_pods_and_verdicts_are_not_retried():
    objects = m.submit_objects(job(3, attempt_failures_validity_interval=None), APP, "token", "digest")
    owner = objects[-1]
    assert (owner["kind"], owner["metadata"]["name"], owner["spec"]["backoffLimit"]) == ("Job", APP, 2)
    # Deaths counted in a window (the default, 1h): the AM's next attempt enforces max_attempts; the
    # Job's limit only stops a crash loop it cannot count.
    assert m.submit_objects(job(3), APP, "token", "digest")[-1]["spec"]["backoffLimit"] == m.WINDOWED_BACKOFF_LIMIT
    assert owner["spec"]["podFailurePolicy"]["rules"] == [{"action": "FailJob", "onExitCodes": {
        "containerName": m.AM_CONTAINER, "operator": "In", "values": [1, 2]}}]
    template = owner["spec"]["template"]
    assert template["metadata"]["labels"][m.LABEL_APP] == APP  # what the Service and the client select by
    assert (template["spec"]["restartPolicy"], template["spec"]["hostname"]) == ("Never", m.AM_HOSTNAME)
    journal = next(o for o in objects if o["metadata"]["name"] == m.Names(APP).journal)
    assert (journal["kind"], journal["data"]) == ("ConfigMap", {})
    assert [o["kind"] for o in m.submit_objects(job(1), APP, "t", "d")][-1] == "Pod"
    assert m.Names(APP).journal not in [o["metadata"]["name"] for o in m.submit_objects(job(1), APP, "t", "d")]


def test_a_job_owner_is_not_the_controller_of_what_it_owns():
    assert m.owner_reference(APP, "uid-1", "Job") == {"apiVersion": "batch/v1", "kind": "Job", "name": APP,
                                                      "uid": "uid-1"}
    assert m.headless_service(job(2), APP, "uid-1", "Job")["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert m.owner_reference(APP, "uid-1")["controller"] is True  # an AM pod still is


def executor(incarnation: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": f"{APP}-worker-{incarnation}", "labels": {m.LABEL_INCARNATION: incarnation}},
            "spec": {"containers": []}, "status": {"phase": phase}}


class FakeApi:
    """list and delete of pods (``api.KubeApi``'s calls): deleted pods leave the listing at once."""

    def __init__(self, pods: list[dict[str, Any]]):
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.deleted: list[str] = []

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        return {"items": list(self.pods.values())}

    async def delete(self, path: str, grace_seconds: int | None = None, missing_ok: bool = True) -> bool:
        name = path.rsplit("/", 1)[1]
        self.deleted.append(name)
        return self.pods.pop(name, None) is not None


def adoption(incarnation: str, pid: int | None) -> Adoption:
    return Adoption("worker", 0, incarnation, 0, pid, Resources(), [], {})


def test_a_stale_journal_adopts_registered_executors_only_and_deletes_the_pods_it_does_not_know():
    api = FakeApi([executor("registered"), executor("unregistered"), executor("unknown"),
                   executor("ended", phase="Succeeded")])
    backend = KubernetesExecutorBackend(api, job(2), APP, "ml", "uid-1", "Job")  # type: ignore[arg-type]
    # The copy saw "registered" register, "unregistered" only launched (it registered in the last
    # second), and never heard of "unknown" (launched in the last second).
    found = asyncio.run(backend.adopt([adoption("registered", 7), adoption("unregistered", None)]))
    assert found == {"registered"}
    assert sorted(api.deleted) == [f"{APP}-worker-unknown", f"{APP}-worker-unregistered"]
    assert f"{APP}-worker-registered" in backend._requests  # watched from now on


class FakeConfigMapApi:
    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.data.update(patch["data"])
        return {"data": dict(self.data)}

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        return {"data": dict(self.data)}


def test_a_journal_that_outgrows_its_configmap_empties_the_copy():
    copy = JournalConfigMap(FakeConfigMapApi(), "ml", m.Names(APP).journal)  # type: ignore[arg-type]
    assert asyncio.run(copy.download()) is None
    assert asyncio.run(copy.upload('{"k":"job"}\n')) and asyncio.run(copy.download()) == '{"k":"job"}\n'
    assert not asyncio.run(copy.upload("x" * (MAX_JOURNAL_BYTES + 1)))
    assert asyncio.run(copy.download()) == ""  # no later attempt takes over from the outdated copy


def test_an_am_attempt_past_max_attempts_deaths_within_the_window_fails_the_job_naming_them(monkeypatch):
    """The Job counts every AM pod failure since submit; the AM bootstrap counts only those within
    am.attempt_failures_validity_interval (issue 35: a job of days is not lost for the sum of its AM deaths)."""
    import time
    from types import SimpleNamespace

    from primus_runtime import protocol
    from primus_runtime.backends.kubernetes.am import _attempts_used_up

    now = time.time()
    monkeypatch.setenv(protocol.ENV_AM_DOWN_CAUSE, "AM attempt 3 exited 137 (OOMKilled)")
    spec = job(3, attempt_failures_validity_interval="1h")
    assert _attempts_used_up(spec, SimpleNamespace(deaths=[now - 7200, now - 60, now - 1])) is None  # 2 in 1h
    assert _attempts_used_up(spec, SimpleNamespace(deaths=[now - 600, now - 60, now - 1])) == (
        "the AM died 3 times within 1h (am.max_attempts 3); the last: AM attempt 3 exited 137 (OOMKilled)")
    every = job(3, attempt_failures_validity_interval=None)
    assert "since the job started" in _attempts_used_up(every, SimpleNamespace(deaths=[now - 9e5, now - 9e4, now]))
