"""The Kubernetes backend's AM bootstrap, in the AM pod: the spec and token come mounted from the
job's ConfigMap and Secret, executors are pods, and the address and status go to the store
ConfigMap.

With ``am.max_attempts > 1`` the AM pod is a Job's (``manifests.am_job``): the Job creates the next
attempt when this pod dies. Each attempt uploads its journal to the journal ConfigMap; the next one
downloads it and adopts the executor pods still running (``KubernetesExecutorBackend.adopt``)."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import time
from pathlib import Path

from ... import am_attempts, protocol
from ...am import journal, journal_copy
from ...am.main import fail_unstarted, serve
from ...am.master import ApplicationMaster
from ...bundle import runtime_digest
from ...spec import JobSpec
from . import manifests as m
from .api import ApiError, KubeApi, in_cluster, pods_path
from .executors import KubernetesExecutorBackend
from .objects import Pod, pod_of
from .settings import KubernetesBackend
from .store import ConfigMapStore, JournalConfigMap

log = logging.getLogger("primus.am")

# How often, at most, the journal's copy is replaced (what a new attempt can miss: am/journal_copy.py).
# An executor pod the copy does not know as registered is deleted and the executor replaced (were it
# left running, the new AM would answer it "unknown or stale incarnation").
JOURNAL_UPLOAD_SECONDS = 1.0
# How long an ending attempt (SIGTERM) tries to bring the journal's copy up to date before it exits.
LAST_UPLOAD_SECONDS = 5.0


async def run_am(args: list[str]) -> int:
    api = KubeApi(in_cluster())
    try:
        return await _run(api)
    finally:
        await api.close()


async def _run(api: KubeApi) -> int:
    namespace, pod_name = os.environ["POD_NAMESPACE"], os.environ["POD_NAME"]
    own = asyncio.ensure_future(api.get(pods_path(namespace, pod_name)))  # read while the spec is parsed
    spec = JobSpec.model_validate_json(Path(m.SPEC_DIR, m.SPEC_KEY).read_text())
    if not isinstance(spec.backend, KubernetesBackend):
        own.cancel()
        log.error("a %r job cannot run on the Kubernetes backend", spec.backend.type)
        return 2
    pod = pod_of(await own)
    app = pod.metadata.labels[m.LABEL_APP]  # the pod's own name unless a Job runs it
    job = next((o for o in pod.metadata.owner_references if o.kind == "Job"), None)
    owner_uid, owner_kind = (job.uid, "Job") if job is not None else (pod.metadata.uid, "Pod")
    backend = KubernetesExecutorBackend(api, spec, app, namespace, owner_uid, owner_kind)
    status_path = Path(m.WORK_DIR, "status.json")  # the pod's own emptyDir: never another job's file
    store = ConfigMapStore(api, namespace, m.Names(app).store, asyncio.get_running_loop())
    copy = JournalConfigMap(api, namespace, m.Names(app).journal) if m.recoverable(spec) else None
    recovered = None
    if copy is not None:
        store.attempt = await _attempt(api, store, namespace, pod_name)
        used_up = _attempts_used_up(spec, store)
        if used_up is not None:  # the verdict: nothing of the job may keep running
            await backend.remove_all()
            am = ApplicationMaster(spec, m.app_id(namespace, app), backend, status_path=status_path,
                                   attempt=store.attempt)
            return await fail_unstarted(am, store, used_up)
        if store.attempt > 1:
            recovered = await journal_copy.download(copy, status_path.parent / journal.JOURNAL)
            if recovered is None:  # it starts afresh: nothing of the earlier attempts may keep running
                await backend.remove_all()
    am = ApplicationMaster(spec, m.app_id(namespace, app), backend, status_path=status_path,
                           attempt=store.attempt, recovered=recovered)
    checked = asyncio.ensure_future(_check_runtime(am, pod))  # hashing the sources waits for no one
    token = Path(m.TOKEN_DIR, m.TOKEN_KEY).read_text().strip()
    uploader = asyncio.ensure_future(journal_copy.keep_uploaded(am, copy, JOURNAL_UPLOAD_SECONDS)) \
        if copy is not None else None
    try:
        # On its pod IP (other pods of the node may use the same port on theirs), at the port the
        # executors started with the job were told (manifests.am_address).
        return await serve(am, token, spec.am.host or os.environ["POD_IP"], None, store, port=m.am_port(spec),
                           on_signal=functools.partial(_end_attempt, am, copy) if copy is not None else None)
    finally:
        checked.cancel()
        if uploader is not None:
            uploader.cancel()


async def _check_runtime(am: ApplicationMaster, pod: Pod) -> None:
    """Warn (log and event) when the image's runtime is not the submitting client's."""
    submitted = pod.metadata.annotations.get(m.ANNOTATION_RUNTIME)
    digest = await asyncio.to_thread(runtime_digest) if submitted else None
    if submitted and submitted != digest:
        warning = (f"the image's runtime differs from the client's (runtime digest {digest} in the "
                   f"image, {submitted} where the job was submitted): build the image from the same Primus version")
        log.warning("%s", warning)
        am.record.add_event("am", None, "warning", warning)


def _end_attempt(am: ApplicationMaster, copy: JournalConfigMap, sig: int) -> None:
    """SIGTERM to a Job's AM pod (deleted, evicted, drained) ends this attempt, not the job: the
    journal's copy is brought up to date and the AM exits at once, leaving its executors running
    for the next attempt (``primus kill`` stops a job through the API; deleting the Job deletes
    everything it owns)."""
    log.warning("AM received %s: this attempt ends, the job goes on with the next one", signal.Signals(sig).name)
    asyncio.ensure_future(_last_upload_and_exit(am, copy, sig))


async def _last_upload_and_exit(am: ApplicationMaster, copy: JournalConfigMap, sig: int) -> None:
    try:
        if am.journal is not None:
            await asyncio.wait_for(copy.upload(am.journal.compacted()[0]), LAST_UPLOAD_SECONDS)
    except Exception:  # noqa: BLE001 - the copy of the last upload is what the next attempt gets
        log.exception("uploading the AM journal failed")
    logging.shutdown()
    os._exit(128 + sig)


async def _attempt(api: KubeApi, store: ConfigMapStore, namespace: str, pod_name: str) -> int:
    """This AM pod's attempt: one more than the attempt that published its address before (an
    attempt that died before publishing one left nothing to take over: this one is the first
    again). The moment the earlier pod ended and why go to the master as ``PRIMUS_AM_DOWN_SINCE`` and
    ``_CAUSE``; every AM death so far to the store (``store.deaths``, published with the address)."""
    earlier = await store.published()
    if earlier is None or earlier.get("pod") == pod_name:
        return 1
    attempt = int(earlier.get("attempt", 1))
    down_since, cause = await _ended(api, namespace, str(earlier.get("pod")))
    if down_since is not None:
        os.environ[protocol.ENV_AM_DOWN_SINCE] = repr(down_since)
    os.environ[protocol.ENV_AM_DOWN_CAUSE] = f"AM attempt {attempt} {cause}"
    store.deaths = [*map(float, earlier.get("deaths", [])), down_since or time.time()]
    return attempt + 1


async def _ended(api: KubeApi, namespace: str, pod_name: str) -> tuple[float | None, str]:
    """When the AM pod ``pod_name`` ended (its container's end, else its deletion; None once it is
    gone) and how ("exited 137 (OOMKilled)", "deleted")."""
    try:
        pod = pod_of(await api.get(pods_path(namespace, pod_name)))
    except ApiError as exc:  # gone (404) or not readable: unknown either way
        log.info("the earlier AM pod %s: %s", pod_name, exc.reason or exc)
        return None, "ended (its pod is gone)"
    for status in pod.status.container_statuses:
        terminated = status.state.terminated if status.state is not None else None
        if status.name == m.AM_CONTAINER and terminated is not None and terminated.finished_at is not None:
            why = f" ({terminated.reason})" if terminated.reason else ""
            return terminated.finished_at.timestamp(), f"exited {terminated.exit_code}{why}"
    deleted = pod.metadata.deletion_timestamp
    return (deleted.timestamp(), "deleted") if deleted is not None else (None, "ended")


def _attempts_used_up(spec: JobSpec, store: ConfigMapStore) -> str | None:
    """Why this attempt must not run the job: the AM died ``am.max_attempts`` times within the
    validity interval (the Job's own backoffLimit is higher when there is one: it cannot count in a
    window)."""
    window = spec.am.attempt_failures_validity_interval
    if not am_attempts.used_up(store.deaths, time.time(), spec.am_attempts, window):
        return None
    return am_attempts.used_up_reason(store.deaths, time.time(), spec.am_attempts, window,
                                      os.environ.get(protocol.ENV_AM_DOWN_CAUSE, "unknown"))
