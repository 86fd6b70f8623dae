"""The Kubernetes backend inside the AM: one pod per executor incarnation, watched (not polled)
through the API server (``api.KubeApi``, on the AM's loop); pod events become the failover engine's."""

from __future__ import annotations

import asyncio
import logging
import os
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
from . import logs
from . import manifests as m
from .api import ApiError, KubeApi, list_and_watch, pods_path, services_path
from .client import log_path
from .objects import Pod, pod_of

log = logging.getLogger("primus.kubernetes")

TERMINAL_PHASES = ("Succeeded", "Failed")
# DisruptionTarget reasons (Kubernetes 1.26+) that mean "made room or drained": not the executor's
# fault, never charged. The node-lifecycle ones (DeletionByTaintManager, DeletionByPodGC) mean the
# node is gone or unreachable: a loss like a crash, charged.
PREEMPTION_REASONS = ("PreemptionByScheduler", "EvictionByEvictionAPI", "TerminationByKubelet")
NODE_LOST_REASONS = ("DeletionByTaintManager", "DeletionByPodGC", "NodeLost")
GONE_WAIT_SECONDS = 30.0  # how long a new AM attempt waits for the pods it deleted to be gone
WATCH_RESTART_SECONDS = 1.0  # after an unexpected error of the pod watch


def _condition(pod: Pod, kind: str) -> Any:
    return next((c for c in pod.status.conditions if c.type == kind and c.status == "True"), None)


def _terminated(pod: Pod) -> Any:
    for status in pod.status.container_statuses:
        if status.name == m.EXECUTOR_CONTAINER and status.state is not None and status.state.terminated:
            return status.state.terminated
    return None


def pod_exit(pod: Pod, deleted: bool = False, stopped: bool = False) -> tuple[int | None, str, bool] | None:
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


def pending_reason_of(pod: Pod) -> str | None:
    """Why a pod does not run yet: not scheduled (the scheduler's words), or its container waiting."""
    if pod.status.phase != "Pending":
        return None
    scheduled = next((c for c in pod.status.conditions if c.type == "PodScheduled"), None)
    if scheduled is not None and scheduled.status != "True":
        return f"pod {pod.metadata.name} not scheduled: {scheduled.message or scheduled.reason or 'waiting'}"
    for status in pod.status.container_statuses:
        waiting = status.state.waiting if status.state is not None else None
        if waiting is not None:
            return f"pod {pod.metadata.name}: container {waiting.reason or 'waiting'}" + (
                f": {waiting.message}" if waiting.message else "")
    return f"pod {pod.metadata.name} is pending"


# What the client told the AM about the job's other clusters, handed on to every executor.
CLUSTER_ENV = (ENV_WEBHDFS, ENV_HADOOP_USER)


class KubernetesExecutorBackend(ExecutorBackend):
    def __init__(self, api: KubeApi, spec: JobSpec, app: str, namespace: str, am_uid: str, owner_kind: str = "Pod"):
        self.api = api
        self.spec = spec
        self.app = app
        self.namespace = namespace
        self.am_uid = am_uid  # of the job's owner: the AM pod, or the AM's Job (owner_kind)
        self.owner_kind = owner_kind
        self.selector = m.executor_selector(app)
        self._events: BackendEvents | None = None
        self._requests: dict[str, LaunchRequest] = {}  # pod name -> its executor, until it ended
        self._pods: dict[str, Pod] = {}  # pod name -> the latest state seen, of the pods of _requests
        self._seen: dict[str, Pod] = {}  # pod name -> the latest state seen, of every executor pod of the job
        self._running: set[str] = set()
        self._stopping: set[str] = set()
        self._watcher: asyncio.Task[None] | None = None
        self._synced = asyncio.Event()
        self._log_cursors: dict[str, logs.LogCursor] = {}  # log path -> where the next read starts
        # Executors the client started with the job (their pods exist already), until adopted.
        self._unclaimed = {(role, i) for role, n in launched_at_start(spec).items() for i in range(n)}
        self._started_with_job: set[str] = set()

    # --- setup ---

    async def start(self, events: BackendEvents) -> None:
        """The Service, and the watch's first listing (the pods the client started with the job are
        adopted from it), at the same time."""
        self._events = events
        self._watcher = asyncio.ensure_future(self._watch_forever())
        await asyncio.gather(self._create_service(), self._first_listing())

    async def _first_listing(self) -> None:
        """Until the watch listed the pods once; its error when it could not (e.g. no rights)."""
        assert self._watcher is not None
        synced = asyncio.ensure_future(self._synced.wait())
        await asyncio.wait({self._watcher, synced}, return_when=asyncio.FIRST_COMPLETED)
        if not synced.done():
            synced.cancel()
            self._watcher.result()  # it ended: raises its error

    async def _create_service(self) -> None:
        try:
            await self.api.create(services_path(self.namespace),
                                  m.headless_service(self.spec, self.app, self.am_uid, self.owner_kind))
        except ApiError as exc:
            if exc.status != 409:  # a restarted AM finds it there
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
            await self.api.create(pods_path(self.namespace), body)
        except Exception:
            self._requests.pop(name, None)
            raise
        log.info("%s: created pod %s", protocol.executor_id(request.role, request.index), name)

    async def _adopt(self, name: str) -> bool:
        """Take over the pod the client created with the job; False when it is gone (then the AM
        creates it as any other). Its latest state is handed in now: the watch passed over the
        events of a pod no executor claimed yet (it keeps the latest, else it is read)."""
        pod = self._seen.get(name)
        if pod is None:
            try:
                pod = pod_of(await self.api.get(pods_path(self.namespace, name)))
            except ApiError as exc:
                if exc.status == 404:
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
        found: set[str] = set()
        stale: list[str] = []
        for pod in await self._list():
            if pod_exit(pod) is not None:
                continue
            adoption = wanted.get(pod.metadata.labels.get(m.LABEL_INCARNATION, ""))
            if adoption is None:
                stale.append(pod.metadata.name)
                continue
            self._watch_adopted(pod, adoption)
            found.add(adoption.incarnation)
        if stale:
            log.info("deleting %d executor pod(s) no adopted executor owns: %s", len(stale), ", ".join(stale))
            await self._delete_and_wait(stale)
        return found

    async def _list(self) -> list[Pod]:
        listing = await self.api.get(pods_path(self.namespace), labelSelector=self.selector)
        return [pod_of(item) for item in listing.get("items") or []]

    def _watch_adopted(self, pod: Pod, adoption: Adoption) -> None:
        name = pod.metadata.name
        self._requests[name] = LaunchRequest(adoption.role, adoption.index, adoption.incarnation, adoption.attempt,
                                             adoption.resources, {})
        self._running.add(name)  # it registered with an earlier attempt: launched, as the record knows
        self._pods[name] = pod

    async def _delete_and_wait(self, names: list[str]) -> None:
        await asyncio.gather(*(self._delete(name, 0) for name in names))
        deadline = time.monotonic() + GONE_WAIT_SECONDS
        while time.monotonic() < deadline:
            if not {pod.metadata.name for pod in await self._list()} & set(names):
                return
            await asyncio.sleep(0.2)
        log.warning("executor pods deleted %.0fs ago are still there: %s", GONE_WAIT_SECONDS, ", ".join(names))

    async def remove_all(self) -> None:
        """Delete every executor pod of the job (a new AM attempt that cannot take over starts afresh)."""
        names = [pod.metadata.name for pod in await self._list()]
        if names:
            log.info("deleting the %d executor pod(s) of earlier AM attempts", len(names))
            await self._delete_and_wait(names)

    async def stop(self, role: str, index: int, incarnation: str, force: bool) -> None:
        name = next((n for n, r in self._requests.items() if r.incarnation == incarnation), None)
        if name is None:
            return
        self._stopping.add(name)
        await self._delete(name, 0 if force else None)

    async def _delete(self, name: str, grace: int | None) -> None:
        """Delete a pod: ``grace`` None is its own terminationGracePeriodSeconds (SIGTERM first:
        the executor forwards it to the trainer), 0 at once."""
        try:
            await self.api.delete(pods_path(self.namespace, name), grace)
        except Exception as exc:  # noqa: BLE001 - ApiError, ApiUnreachable: said, the sweep goes on
            log.warning("deleting pod %s failed: %s", name, exc)

    async def read_log(self, path: str, offset: int, limit: int) -> tuple[bytes, int | None]:
        """A container's log (``pods/<pod>/<container>``) through the API server, which has no byte
        offset: from the second of the last read on (``logs.LogCursor``), at most ``limit`` bytes,
        pages already read kept. A read from the end (negative ``offset``; the page opens a log so)
        reads the log whole, and sets the cursor for the reads that follow it."""
        _, pod, container = path.split("/", 2)
        whole = offset < 0
        cursor = None if whole else self._log_cursors.get(path)
        read = logs.plan(cursor, 0 if whole else offset, None if whole else limit)
        data = b"" if read.kept is not None else \
            await self._fetch_log(pod, container, read.since, read.limit_bytes, timestamps=True)
        chunk, cursor = logs.take(data, read, 0 if whole else offset, None if whole else limit, cursor)
        if cursor is not None:
            self._log_cursors[path] = cursor
        return slice_log(chunk, offset, limit) if whole else (chunk, None)

    async def _fetch_log(self, pod: str, container: str, since: str | None, limit_bytes: int | None,
                         timestamps: bool) -> bytes:
        try:
            return await self.api.read_log(self.namespace, pod, container, since_time=since,
                                           limit_bytes=limit_bytes, timestamps=timestamps)
        except ApiError as exc:
            if exc.status in (400, 404):  # gone, or its container not started yet
                return b""
            raise

    async def close(self) -> None:
        """Delete the executor pods still running; those that ended stay (with their logs) until
        the AM pod, their owner, is deleted."""
        if self._watcher is not None:
            self._watcher.cancel()
        running = [pod.metadata.name for pod in await self._list() if pod.status.phase not in TERMINAL_PHASES]
        await asyncio.gather(*(self._delete(name, 0) for name in running))
        await self.api.close()

    # --- watching ---

    async def _watch_forever(self) -> None:
        """The job's executor pods: listed, then watched from that version (``api.list_and_watch``:
        resumed after a disconnect, listed again after 410 Gone). Every pod seen is kept in
        ``_seen``; the ones of live executors become events. Anything else going wrong once the
        first listing is done (an object it cannot read) lists again: the AM never stops watching."""
        while True:
            try:
                async for kind, objects in list_and_watch(self.api, pods_path(self.namespace), self.selector):
                    self._on_pods(kind, [pod_of(obj) for obj in objects])
                    self._synced.set()
            except Exception:
                if not self._synced.is_set():
                    raise  # start() reports it
                log.exception("watching the executor pods failed: listing them again in %.0fs", WATCH_RESTART_SECONDS)
                await asyncio.sleep(WATCH_RESTART_SECONDS)

    def _on_pods(self, kind: str, pods: list[Pod]) -> None:
        if kind == "SYNC":  # a fresh list: pods we wait for that are not in it were deleted meanwhile
            listed = {pod.metadata.name for pod in pods}
            self._seen = {pod.metadata.name: pod for pod in pods}
            for name in [n for n in self._requests if n in self._pods and n not in listed]:
                self._on_pod("DELETED", self._pods[name])
        for pod in pods:
            if kind == "DELETED":
                self._seen.pop(pod.metadata.name, None)
            elif kind != "SYNC":
                self._seen[pod.metadata.name] = pod
            self._on_pod(kind, pod)

    def _on_pod(self, kind: str, pod: Pod) -> None:
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
            for known_pods in (self._requests, self._pods):
                known_pods.pop(name, None)
            self._running.discard(name)
            self._stopping.discard(name)
            self._log_cursors.pop(log_path(name, m.EXECUTOR_CONTAINER), None)
            code, reason, preempted = ended
            self._events.on_exited(Exited(request.role, request.index, request.incarnation, code, reason, preempted))

