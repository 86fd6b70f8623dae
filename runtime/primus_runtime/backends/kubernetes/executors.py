"""The Kubernetes backend inside the AM: one pod per executor incarnation, watched (not polled)
through the API server; pod events become the failover engine's."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import Any

from ... import protocol
from ...hadoop import ENV_HADOOP_USER, ENV_WEBHDFS
from ...spec import JobSpec, Resources
from ..base import (
    Adoption,
    BackendEvents,
    ExecutorBackend,
    Exited,
    Launched,
    LaunchRequest,
    launched_at_start,
    slice_log,
)
from . import manifests as m
from .client import log_path

log = logging.getLogger("primus.kubernetes")

TERMINAL_PHASES = ("Succeeded", "Failed")
# DisruptionTarget reasons (Kubernetes 1.26+) that mean "made room or drained": not the executor's
# fault, never charged. The node-lifecycle ones (DeletionByTaintManager, DeletionByPodGC) mean the
# node is gone or unreachable: a loss like a crash, charged.
PREEMPTION_REASONS = ("PreemptionByScheduler", "EvictionByEvictionAPI", "TerminationByKubelet")
NODE_LOST_REASONS = ("DeletionByTaintManager", "DeletionByPodGC", "NodeLost")
WATCH_SECONDS = 300  # a watch is renewed (from the last resource version) this often
GONE_WAIT_SECONDS = 30.0  # how long a new AM attempt waits for the pods it deleted to be gone


def _condition(pod: Any, kind: str) -> Any:
    return next((c for c in (pod.status.conditions or []) if c.type == kind and c.status == "True"), None)


def _terminated(pod: Any) -> Any:
    for status in pod.status.container_statuses or []:
        if status.name == m.EXECUTOR_CONTAINER and status.state is not None and status.state.terminated:
            return status.state.terminated
    return None


def pod_exit(pod: Any, deleted: bool = False, stopped: bool = False) -> tuple[int | None, str, bool] | None:
    """(exit code, reason, preempted) of an executor pod that ended, or None while it has not:
    ``deleted``: the pod is gone; ``stopped``: the AM deleted it."""
    phase = pod.status.phase
    terminated = _terminated(pod)
    code = terminated.exit_code if terminated is not None else None
    disruption = _condition(pod, "DisruptionTarget")
    message = " ".join((pod.status.message or (disruption.message if disruption else "") or "").split())[:300]
    if pod.status.reason == "Evicted" or (disruption is not None and disruption.reason in PREEMPTION_REASONS):
        why = pod.status.reason if pod.status.reason == "Evicted" else disruption.reason
        return code, f"pod {why.lower() if why == 'Evicted' else f'disrupted ({why})'}: {message or 'no message'}", True
    if pod.status.reason in NODE_LOST_REASONS or (disruption is not None and disruption.reason in NODE_LOST_REASONS):
        node = pod.spec.node_name or "its node"
        return None, f"pod lost with {node} ({pod.status.reason or disruption.reason}): {message}".rstrip(": "), False
    if terminated is not None and terminated.reason == "OOMKilled":
        return 137, "OOMKilled", False
    if phase == "Succeeded":
        return 0, "executor exited 0", False
    if phase == "Failed":
        detail = f" ({terminated.reason})" if terminated is not None and terminated.reason not in (None, "Error") else ""
        return code, f"executor exited {code}{detail}" if code is not None else f"pod failed: {message}", False
    if deleted:
        return code, "stopped by the AM" if stopped else "pod deleted", False
    return None


def pending_reason_of(pod: Any) -> str | None:
    """Why a pod does not run yet: not scheduled (the scheduler's words), or its container waiting."""
    if pod.status.phase != "Pending":
        return None
    scheduled = next((c for c in (pod.status.conditions or []) if c.type == "PodScheduled"), None)
    if scheduled is not None and scheduled.status != "True":
        return f"pod {pod.metadata.name} not scheduled: {scheduled.message or scheduled.reason or 'waiting'}"
    for status in pod.status.container_statuses or []:
        waiting = status.state.waiting if status.state is not None else None
        if waiting is not None:
            return f"pod {pod.metadata.name}: container {waiting.reason or 'waiting'}" + (
                f": {waiting.message}" if waiting.message else "")
    return f"pod {pod.metadata.name} is pending"


# What the client told the AM about the job's other clusters, handed on to every executor.
CLUSTER_ENV = (ENV_WEBHDFS, ENV_HADOOP_USER)


class KubernetesExecutorBackend(ExecutorBackend):
    def __init__(self, core: Any, spec: JobSpec, app: str, namespace: str, am_uid: str, owner_kind: str = "Pod"):
        self.core = core  # kubernetes.client.CoreV1Api
        self.spec = spec
        self.app = app
        self.namespace = namespace
        self.am_uid = am_uid  # of the job's owner: the AM pod, or the AM's Job (owner_kind)
        self.owner_kind = owner_kind
        self.selector = m.executor_selector(app)
        self._events: BackendEvents | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._requests: dict[str, LaunchRequest] = {}  # pod name -> its executor, until it ended
        self._pods: dict[str, Any] = {}  # pod name -> the latest V1Pod seen
        self._running: set[str] = set()
        self._stopping: set[str] = set()
        self._closed = threading.Event()
        self._watcher: threading.Thread | None = None
        # Executors the client started with the job (their pods exist already), until adopted.
        self._unclaimed = {(role, i) for role, n in launched_at_start(spec).items() for i in range(n)}
        self._started_with_job: set[str] = set()

    # --- setup ---

    async def start(self, events: BackendEvents) -> None:
        self._events = events
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self._create_service)
        self._watcher = threading.Thread(target=self._watch_forever, name="pod-watch", daemon=True)
        self._watcher.start()

    def _create_service(self) -> None:
        try:
            self.core.create_namespaced_service(
                self.namespace, m.headless_service(self.spec, self.app, self.am_uid, self.owner_kind))
        except Exception as exc:
            if getattr(exc, "status", None) != 409:  # a restarted AM finds it there
                raise

    def check_fits(self, role: str, resources: Resources) -> str | None:
        return None  # the scheduler says it on the pod (pending_reason)

    def incarnation_for(self, role: str, index: int) -> str | None:
        if (role, index) not in self._unclaimed:
            return None
        self._unclaimed.discard((role, index))
        incarnation = m.first_incarnation(self.app, role, index)
        self._started_with_job.add(incarnation)
        return incarnation

    def pending_reason(self, incarnation: str) -> str | None:
        for name, request in self._requests.items():
            if request.incarnation == incarnation and name in self._pods:
                return pending_reason_of(self._pods[name])
        return None

    # --- launch and stop ---

    def pod_name(self, request: LaunchRequest) -> str:
        return m.Names(self.app).executor_pod(request.role, request.index, request.incarnation)

    async def launch(self, request: LaunchRequest) -> None:
        from os.path import basename

        body = m.executor_pod(self.spec, self.app, self.am_uid, request, request.env[protocol.ENV_AM_ADDRESS],
                              files=sorted({basename(f) for f in request.files}),
                              cluster_env={k: os.environ[k] for k in CLUSTER_ENV if k in os.environ},
                              owner_kind=self.owner_kind)
        name = body["metadata"]["name"]
        self._requests[name] = request  # before it exists: its first event may come at once
        if request.incarnation in self._started_with_job and await self._adopt(name):
            return
        try:
            await asyncio.to_thread(self.core.create_namespaced_pod, self.namespace, body)
        except Exception:
            self._requests.pop(name, None)
            raise
        log.info("%s: created pod %s", protocol.executor_id(request.role, request.index), name)

    async def _adopt(self, name: str) -> bool:
        """Take over the pod the client created with the job; False when it is gone (then the AM
        creates it as any other). Its state so far is handed in now: the watch dropped the events
        of a pod no executor claimed yet."""
        try:
            pod = await asyncio.to_thread(self.core.read_namespaced_pod, name, self.namespace)
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return False
            raise
        log.info("adopted pod %s, started with the job", name)
        self._on_pod("MODIFIED", pod)
        return True

    async def adopt(self, executors: list[Adoption]) -> set[str]:
        """Executor pods of an earlier AM attempt, found by their incarnation label, are watched from
        now on. Adopted: the running or pending pods of executors the journal saw register (``pid``).
        Deleted (and waited for, so that a relaunch under the same name does not clash): every other
        pod not ended, e.g. one whose registration the journal's copy missed, which the new AM would
        answer "unknown or stale incarnation" anyway; the AM replaces those executors."""
        wanted = {a.incarnation: a for a in executors if a.pid is not None}
        listing = await asyncio.to_thread(self.core.list_namespaced_pod, self.namespace, label_selector=self.selector)
        found: set[str] = set()
        stale: list[str] = []
        for pod in listing.items:
            if pod_exit(pod) is not None:
                continue
            adoption = wanted.get((pod.metadata.labels or {}).get(m.LABEL_INCARNATION, ""))
            if adoption is None:
                stale.append(pod.metadata.name)
                continue
            self._watch_adopted(pod, adoption)
            found.add(adoption.incarnation)
        if stale:
            log.info("deleting %d executor pod(s) no adopted executor owns: %s", len(stale), ", ".join(stale))
            await asyncio.to_thread(self._delete_and_wait, stale)
        return found

    def _watch_adopted(self, pod: Any, adoption: Adoption) -> None:
        name = pod.metadata.name
        self._requests[name] = LaunchRequest(adoption.role, adoption.index, adoption.incarnation, adoption.attempt,
                                             adoption.resources, {})
        self._running.add(name)  # it registered with an earlier attempt: launched, as the record knows
        self._pods[name] = pod

    def _delete_and_wait(self, names: list[str]) -> None:
        for name in names:
            self._delete(name, 0)
        deadline = time.monotonic() + GONE_WAIT_SECONDS
        while time.monotonic() < deadline:
            listing = self.core.list_namespaced_pod(self.namespace, label_selector=self.selector)
            if not {pod.metadata.name for pod in listing.items} & set(names):
                return
            time.sleep(0.2)
        log.warning("executor pods deleted %.0fs ago are still there: %s", GONE_WAIT_SECONDS, ", ".join(names))

    async def remove_all(self) -> None:
        """Delete every executor pod of the job (a new AM attempt that cannot take over starts afresh)."""
        listing = await asyncio.to_thread(self.core.list_namespaced_pod, self.namespace, label_selector=self.selector)
        names = [pod.metadata.name for pod in listing.items]
        if names:
            log.info("deleting the %d executor pod(s) of earlier AM attempts", len(names))
            await asyncio.to_thread(self._delete_and_wait, names)

    async def stop(self, role: str, index: int, incarnation: str, force: bool) -> None:
        name = next((n for n, r in self._requests.items() if r.incarnation == incarnation), None)
        if name is None:
            return
        self._stopping.add(name)
        await asyncio.to_thread(self._delete, name, 0 if force else None)

    def _delete(self, name: str, grace: int | None) -> None:
        """Delete a pod: ``grace`` None is its own terminationGracePeriodSeconds (SIGTERM first:
        the executor forwards it to the trainer), 0 at once."""
        try:
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=grace)
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                log.warning("deleting pod %s failed: %s", name, exc)

    async def read_log(self, path: str, offset: int, limit: int) -> tuple[bytes, int | None]:
        """A container's log (``pods/<pod>/<container>``) through the API server, which has no byte
        offset: read whole and sliced."""
        _, pod, container = path.split("/", 2)

        def fetch() -> bytes:
            try:
                return bytes(self.core.read_namespaced_pod_log(pod, self.namespace, container=container,
                                                               _preload_content=False).data)
            except Exception as exc:
                if getattr(exc, "status", None) in (400, 404):  # gone, or its container not started yet
                    return b""
                raise
        return slice_log(await asyncio.to_thread(fetch), offset, limit)

    async def close(self) -> None:
        """Delete the executor pods still running; those that ended stay (with their logs) until
        the AM pod, their owner, is deleted."""
        self._closed.set()
        pods = await asyncio.to_thread(self.core.list_namespaced_pod, self.namespace, label_selector=self.selector)
        for pod in pods.items:
            if pod.status.phase not in TERMINAL_PHASES:
                await asyncio.to_thread(self._delete, pod.metadata.name, 0)

    # --- watching ---

    def _watch_forever(self) -> None:
        """List the job's executor pods, then watch from that version; a version too old (410)
        lists again. Each pod seen goes to the AM's loop."""
        from kubernetes import watch

        version: str | None = None
        while not self._closed.is_set():
            try:
                if version is None:
                    listing = self.core.list_namespaced_pod(self.namespace, label_selector=self.selector)
                    version = listing.metadata.resource_version
                    self._hand("SYNC", listing.items)
                stream = watch.Watch().stream(self.core.list_namespaced_pod, self.namespace,
                                              label_selector=self.selector, resource_version=version,
                                              timeout_seconds=WATCH_SECONDS)
                for event in stream:
                    if self._closed.is_set():
                        return
                    if event["type"] == "ERROR":
                        raise _Expired() if event["raw_object"].get("code") == 410 else RuntimeError(event["raw_object"])
                    version = event["object"].metadata.resource_version
                    self._hand(event["type"], [event["object"]])
            except _Expired:
                version = None
            except Exception as exc:  # noqa: BLE001 - the API server restarts, connections drop: keep watching
                if getattr(exc, "status", None) == 410:
                    version = None
                else:
                    log.warning("watching the executor pods failed, again in 1s: %s", exc)
                    time.sleep(1)

    def _hand(self, kind: str, pods: list[Any]) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(self._on_pods, kind, pods)
        except RuntimeError:
            self._closed.set()  # the loop is closed: the AM is done

    def _on_pods(self, kind: str, pods: list[Any]) -> None:
        if kind == "SYNC":  # a fresh list: pods we wait for that are not in it were deleted meanwhile
            listed = {pod.metadata.name for pod in pods}
            for name in [n for n in self._requests if n in self._pods and n not in listed]:
                self._on_pod("DELETED", self._pods[name])
        for pod in pods:
            self._on_pod(kind, pod)

    def _on_pod(self, kind: str, pod: Any) -> None:
        assert self._events is not None
        name = pod.metadata.name
        request = self._requests.get(name)
        if request is None:
            return  # ended already, or not ours
        self._pods[name] = pod
        ended = pod_exit(pod, deleted=kind == "DELETED", stopped=name in self._stopping)
        if ended is None and pod.status.phase == "Running" and name not in self._running:
            self._running.add(name)
            where = log_path(name, m.EXECUTOR_CONTAINER)
            self._events.on_launched(Launched(request.role, request.index, request.incarnation,
                                              pod.spec.node_name or pod.status.pod_ip or "",
                                              list(range(request.resources.gpu)),
                                              {"executor": where, "stdout": where, "stderr": where}))
        if ended is not None:
            for known in (self._requests, self._pods):
                known.pop(name, None)
            self._running.discard(name)
            self._stopping.discard(name)
            code, reason, preempted = ended
            self._events.on_exited(Exited(request.role, request.index, request.incarnation, code, reason, preempted))


class _Expired(Exception):
    """The watch's resource version is too old (410 Gone): list again."""
