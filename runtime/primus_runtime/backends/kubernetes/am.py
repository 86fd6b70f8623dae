"""The Kubernetes backend's AM bootstrap, in the AM pod: the spec and token come mounted from the
job's ConfigMap and Secret, executors are pods, and the address and status go to the store
ConfigMap."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ...am.main import serve
from ...am.master import ApplicationMaster
from ...bundle import runtime_digest
from ...spec import JobSpec
from . import manifests as m
from .executors import KubernetesExecutorBackend
from .settings import KubernetesBackend
from .store import ConfigMapStore

log = logging.getLogger("primus.am")


async def run_am(args: list[str]) -> int:
    from kubernetes import client, config

    config.load_incluster_config()
    core = client.CoreV1Api()
    spec = JobSpec.model_validate_json(Path(m.SPEC_DIR, m.SPEC_KEY).read_text())
    if not isinstance(spec.backend, KubernetesBackend):
        log.error("a %r job cannot run on the Kubernetes backend", spec.backend.type)
        return 2
    namespace, app = os.environ["POD_NAMESPACE"], os.environ["POD_NAME"]
    pod = core.read_namespaced_pod(app, namespace)
    backend = KubernetesExecutorBackend(core, spec, app, namespace, pod.metadata.uid)
    status_path = Path(m.WORK_DIR, "status.json")  # the pod's own emptyDir: never another job's file
    am = ApplicationMaster(spec, m.app_id(namespace, app), backend, status_path=status_path)
    submitted = (pod.metadata.annotations or {}).get(m.ANNOTATION_RUNTIME)
    if submitted and submitted != runtime_digest():
        warning = (f"the image's runtime differs from the client's (runtime digest {runtime_digest()} in the "
                   f"image, {submitted} where the job was submitted): build the image from the same Primus version")
        log.warning("%s", warning)
        am.record.add_event("am", None, "warning", warning)
    store = ConfigMapStore(core, namespace, m.Names(app).store)
    token = Path(m.TOKEN_DIR, m.TOKEN_KEY).read_text().strip()
    # On its pod IP (other pods of the node may use the same port on theirs), at the port the
    # executors started with the job were told (manifests.am_address).
    return await serve(am, token, spec.am.host or os.environ["POD_IP"], None, store, port=m.am_port(spec))
