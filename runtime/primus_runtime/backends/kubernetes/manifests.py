"""A job's Kubernetes objects as plain JSON-able dicts (what ``kubectl apply`` would read).

Pure functions of the spec: the client creates the submit objects (``submit_objects``), the AM the
headless Service and one pod per executor incarnation (``executor_pod``). Every object carries the
job's labels; all are owned by the job's owner, so deleting it deletes the job. The owner is the AM
pod, or with ``am.max_attempts > 1`` the batch Job that runs the AM (``am_job``): it outlives an
AM pod, so the executors (and the store) survive the AM attempt that dies, and the Job's
controller creates the next AM pod.

Names: the application is the AM pod's name, ``primus-<job name>-<6 hex>``; the others derive from
it (``<app>-spec``, ``<app>-token``, ``<app>-store``, ``<app>-files``, the Service ``<app>``,
executor pods ``<app>-<role>-<index>-<incarnation>``). Names are DNS-1123 labels of at most 63
characters: ``_`` becomes ``-`` and a name that would be longer is cut and ends with a hash of the
whole, so two long names never meet.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from typing import Any

from ... import protocol
from ...spec import JobSpec, Role
from ..base import LaunchRequest
from .settings import KubernetesBackend

Manifest = dict[str, Any]

# Labels and annotations (the prefix marks them as Primus').
LABEL_APP = "primus.io/app"
LABEL_COMPONENT = "primus.io/component"
LABEL_ROLE = "primus.io/role"
LABEL_INDEX = "primus.io/index"
LABEL_INCARNATION = "primus.io/incarnation"
TAG_LABEL_PREFIX = "tags.primus.io/"
ANNOTATION_TAGS = "primus.io/tags"  # the exact tags, JSON: label values cannot hold every tag
ANNOTATION_JOB_NAME = "primus.io/job-name"
ANNOTATION_RUNTIME = "primus.io/runtime-digest"  # the submitting client's runtime sources
JOURNAL_KEY = "am-journal.jsonl"  # in the journal ConfigMap: the AM journal, for the next AM attempt
# The AM's exit codes that are its verdict (1: the job did not succeed; 2: the job cannot run here):
# the Job makes no further attempt for them. A killed, evicted or deleted AM pod is retried.
AM_VERDICT_EXIT_CODES = [1, 2]
MANAGED_BY = {"app.kubernetes.io/managed-by": "primus"}

# Where things are inside the pods.
SPEC_DIR = "/etc/primus/spec"
TOKEN_DIR = "/etc/primus/token"
FILES_DIR = "/etc/primus/files"
LOG_DIR = "/primus/logs"
WORK_DIR = "/primus/work"
SPEC_KEY = "spec.json"
TOKEN_KEY = "token"
READY_MARKER = "executor-ready"  # written into LOG_DIR by the executor once its trainer is ready
AM_CONTAINER = "am"
AM_HOSTNAME = "am"  # with the job's headless Service: am.<service>.<namespace>.svc
# The AM listens on its pod IP at this port unless the spec's am.port names one: executors started
# with the job (before the AM runs) are told where it will be.
DEFAULT_AM_PORT = 17070
EXECUTOR_CONTAINER = "executor"
GPU_RESOURCE = "nvidia.com/gpu"

# The AM's rights, in its namespace only: its pods and Service, its status ConfigMap.
AM_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "watch", "delete", "patch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["create", "get", "list", "delete"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch", "update"]},
]

_MAX_NAME = 63
_LABEL_VALUE_OK = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME_OK = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _hash(text: str, length: int = 6) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def dns_name(*parts: str, limit: int = _MAX_NAME) -> str:
    """A DNS-1123 label from ``parts`` joined by ``-``: lowercase, ``[a-z0-9-]``, at most ``limit``."""
    whole = "-".join(parts)
    name = re.sub(r"[^a-z0-9-]+", "-", whole.lower()).strip("-")
    if len(name) > limit:
        name = name[: limit - 7].rstrip("-") + "-" + _hash(whole)
    return name or _hash(whole)


def label_value(value: str) -> str:
    """``value`` as a valid label value (``[A-Za-z0-9._-]``, at most 63, alphanumeric at both ends);
    a cut value ends with a hash of the whole."""
    if _LABEL_VALUE_OK.match(value) and len(value) <= _MAX_NAME:
        return value
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", value)
    if len(cleaned) > _MAX_NAME:
        cleaned = cleaned[: _MAX_NAME - 7] + "-" + _hash(value)
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned)


def app_name(job_name: str, suffix: str) -> str:
    """The AM pod's name, which is the application's: short enough for the names derived from it."""
    return dns_name("primus", dns_name(job_name, limit=24), suffix, limit=40)


class Names:
    """The names of one application's objects."""

    def __init__(self, app: str):
        self.app = app
        self.service_account = self.role = self.role_binding = self.service = app
        self.spec = f"{app}-spec"
        self.token = f"{app}-token"
        self.store = f"{app}-store"
        self.files = f"{app}-files"
        self.journal = f"{app}-journal"
        self.pod_group = app

    def executor_pod(self, role: str, index: int, incarnation: str) -> str:
        return dns_name(self.app, role, str(index), incarnation[:8])


def hostname(role: str, index: int) -> str:
    """An executor's stable hostname, ``<role>-<index>``, valid as a DNS label."""
    return dns_name(role, str(index))


def spec_problems(spec: JobSpec) -> list[str]:
    """Why the spec cannot run on Kubernetes, checked before anything is created."""
    return _config(spec).submit_problems() + name_clashes(spec)


def name_clashes(spec: JobSpec) -> list[str]:
    """Roles whose executors would get the same hostname (``_`` and ``-`` look alike in DNS)."""
    hostnames = Counter(hostname(role.name, 0) for role in spec.roles)
    return [f"roles: role names {sorted(r.name for r in spec.roles if hostname(r.name, 0) == h)} give executors "
            f"the same hostname {h!r} on Kubernetes ('_' becomes '-')" for h, n in hostnames.items() if n > 1]


def executor_dns_name(app: str, namespace: str, role: str, index: int) -> str:
    """``<role>-<index>.<service>.<namespace>.svc``: resolves to the executor's current pod."""
    return f"{hostname(role, index)}.{Names(app).service}.{namespace}.svc"


def am_port(spec: JobSpec) -> int:
    return spec.am.port or DEFAULT_AM_PORT


def am_address(spec: JobSpec, app: str) -> str:
    """``am.<service>.<namespace>.svc:<port>``: where the AM will listen, known before it runs."""
    return f"{AM_HOSTNAME}.{Names(app).service}.{_config(spec).namespace}.svc:{am_port(spec)}"


def first_incarnation(app: str, role: str, index: int) -> str:
    """The first incarnation of an executor started with the job: the client that creates its pod
    and the AM that adopts it name it alike, without telling each other."""
    return hashlib.sha256(f"{app}/{role}/{index}".encode()).hexdigest()[:12]


def app_id(namespace: str, app: str) -> str:
    return f"k8s.{namespace}.{app}"


def parse_app_id(value: str) -> tuple[str, str]:
    """(namespace, AM pod name) of ``k8s.<namespace>.<name>``; KeyError for another id."""
    parts = value.split(".")
    if len(parts) != 3 or parts[0] != "k8s" or not all(parts[1:]):
        raise KeyError(value)
    return parts[1], parts[2]


# --- labels ------------------------------------------------------------------------


def tag_labels(tags: dict[str, str]) -> dict[str, str]:
    """``tags.primus.io/<key>: <value>`` for each tag whose key is a valid label name (values made
    valid; the exact tags are in the ``primus.io/tags`` annotation)."""
    return {TAG_LABEL_PREFIX + key: label_value(value) for key, value in tags.items() if _LABEL_NAME_OK.match(key)}


def job_labels(spec: JobSpec, app: str, component: str) -> dict[str, str]:
    config = _config(spec)
    return {**config.labels, **MANAGED_BY, **tag_labels(spec.tags), LABEL_APP: app, LABEL_COMPONENT: component}


def job_annotations(spec: JobSpec) -> dict[str, str]:
    return {**_config(spec).annotations, ANNOTATION_TAGS: json.dumps(spec.tags, sort_keys=True),
            ANNOTATION_JOB_NAME: spec.name}


def executor_selector(app: str) -> str:
    return f"{LABEL_APP}={app},{LABEL_COMPONENT}=executor"


def _config(spec: JobSpec) -> KubernetesBackend:
    if not isinstance(spec.backend, KubernetesBackend):
        raise TypeError(f"backend.type: not a kubernetes job, got {spec.backend.type!r}")
    return spec.backend


def _meta(name: str, namespace: str, labels: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": labels, **extra}


def owner_reference(name: str, uid: str, kind: str = "Pod") -> dict[str, Any]:
    """Owned by the job's owner (``kind``: the AM ``Pod``, or the AM's ``Job``): the garbage
    collector deletes the object with it. A Job's controller releases the pods it controls that its
    selector does not match: a Job owner is not their controller (nor blocks their deletion, which
    would need rights on the Job's finalizers)."""
    if kind == "Job":
        return {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid}
    return {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid, "controller": True, "blockOwnerDeletion": True}


def recoverable(spec: JobSpec) -> bool:
    """A dead AM gets another attempt: the AM runs as a Job's pod and journals into the store."""
    return spec.am_attempts > 1


# --- at submit ----------------------------------------------------------------------


def submit_objects(spec: JobSpec, app: str, token: str, runtime_digest: str,
                   files: dict[str, bytes] | None = None, cluster_env: dict[str, str] | None = None) -> list[Manifest]:
    """Every object of a submit, in creation order: the owner (the AM pod or Job) last (its owner
    references go onto the others once it exists). ``cluster_env``: where the job's other clusters are (HDFS), for
    the AM, which hands it on to its executors."""
    config = _config(spec)
    ns = config.namespace
    names = Names(app)
    labels = job_labels(spec, app, "am")
    objects: list[Manifest] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(names.service_account, ns, labels)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(names.role, ns, labels),
         "rules": AM_RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": _meta(names.role_binding, ns, labels),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": names.role},
         "subjects": [{"kind": "ServiceAccount", "name": names.service_account, "namespace": ns}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(names.spec, ns, labels),
         "data": {SPEC_KEY: spec.to_json()}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": _meta(names.token, ns, labels), "type": "Opaque",
         "stringData": {TOKEN_KEY: token}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(names.store, ns, labels), "data": {}},
        headless_service(spec, app),
    ]
    if files:
        objects.append(files_config_map(spec, app, files))
    if config.gang == "volcano":
        objects.append(pod_group(spec, app))
    if recoverable(spec):
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(names.journal, ns, labels),
                        "data": {}})
        objects.append(am_job(spec, app, runtime_digest, cluster_env or {}))
    else:
        objects.append(am_pod(spec, app, runtime_digest, cluster_env or {}))
    return objects


def files_config_map(spec: JobSpec, app: str, files: dict[str, bytes]) -> Manifest:
    """The roles' ``files`` (name -> content), mounted into every executor pod."""
    import base64

    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta(Names(app).files, _config(spec).namespace, job_labels(spec, app, "am")),
            "binaryData": {file_key(name): base64.b64encode(data).decode() for name, data in files.items()}}


def file_key(name: str) -> str:
    """A ConfigMap key for a file name (keys allow ``[-._a-zA-Z0-9]`` only)."""
    return re.sub(r"[^-._a-zA-Z0-9]", "_", name) + "." + _hash(name, 4)


def pod_group(spec: JobSpec, app: str) -> Manifest:
    """Volcano's gang: no executor pod is bound until all of every role's minimum can be."""
    config = _config(spec)
    body: Manifest = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                      "metadata": _meta(Names(app).pod_group, config.namespace, job_labels(spec, app, "am")),
                      "spec": {"minMember": sum(role.min_replicas or role.replicas for role in spec.roles)}}
    if config.queue:
        body["spec"]["queue"] = config.queue
    return body


def _pod_common(config: KubernetesBackend) -> dict[str, Any]:
    common: dict[str, Any] = {"restartPolicy": "Never"}
    if config.image_pull_secrets:
        common["imagePullSecrets"] = [{"name": s} for s in config.image_pull_secrets]
    if config.node_selector:
        common["nodeSelector"] = dict(config.node_selector)
    if config.tolerations:
        common["tolerations"] = [dict(t) for t in config.tolerations]
    if config.scheduler_name:
        common["schedulerName"] = config.scheduler_name
    return common


def _container(config: KubernetesBackend, name: str, command: list[str], env: list[dict[str, Any]],
               resources: dict[str, Any], mounts: list[dict[str, Any]]) -> dict[str, Any]:
    container = {"name": name, "image": config.image or "<backend.image>", "command": command, "env": env,
                 "resources": resources, "volumeMounts": mounts}
    if config.image_pull_policy:
        container["imagePullPolicy"] = config.image_pull_policy
    return container


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def am_pod(spec: JobSpec, app: str, runtime_digest: str, cluster_env: dict[str, str] | None = None) -> Manifest:
    config = _config(spec)
    names = Names(app)
    size = {"cpu": _cpu(config.am_cpu), "memory": _memory(config.am_memory)}
    env = [_field_env("POD_IP", "status.podIP"), _field_env("POD_NAME", "metadata.name"),
           _field_env("POD_NAMESPACE", "metadata.namespace"), {"name": "PYTHONUNBUFFERED", "value": "1"},
           # Where the AM listens before it imports anything (am/early.py): the address executors were given.
           {"name": protocol.ENV_AM_LISTEN, "value": f"{spec.am.host or '$(POD_IP)'}:{am_port(spec)}"},
           *({"name": k, "value": v} for k, v in sorted((cluster_env or {}).items()))]
    container = _container(
        config, AM_CONTAINER, ["python", "-m", "primus_runtime.am", "--backend", "kubernetes"], env,
        {"requests": size, "limits": size},
        [{"name": "spec", "mountPath": SPEC_DIR, "readOnly": True},
         {"name": "token", "mountPath": TOKEN_DIR, "readOnly": True},
         {"name": "work", "mountPath": WORK_DIR}])
    container["ports"] = [{"name": "api", "containerPort": am_port(spec)}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": _meta(app, config.namespace, job_labels(spec, app, "am"),
                              annotations={**job_annotations(spec), ANNOTATION_RUNTIME: runtime_digest}),
            "spec": {**_pod_common(config), "serviceAccountName": names.service_account,
                     "hostname": AM_HOSTNAME, "subdomain": names.service, "containers": [container],
                     "volumes": [{"name": "spec", "configMap": {"name": names.spec}},
                                 {"name": "token", "secret": {"secretName": names.token, "defaultMode": 0o400}},
                                 {"name": "work", "emptyDir": {}}]}}


# The Job's own limit on AM pod failures when AM deaths count within a window: the AM bootstrap counts
# them (backends/kubernetes/am.py); the Job stops only a crash loop its bootstrap cannot count.
WINDOWED_BACKOFF_LIMIT = 100


def am_backoff_limit(spec: JobSpec) -> int:
    """AM pod failures the Job allows: ``max_attempts - 1``, or more when deaths count only within
    ``am.attempt_failures_validity_interval``, which the AM's next attempt then enforces."""
    if spec.am.attempt_failures_validity_interval is None:
        return spec.am_attempts - 1
    return max(spec.am_attempts - 1, WINDOWED_BACKOFF_LIMIT)


def am_job(spec: JobSpec, app: str, runtime_digest: str, cluster_env: dict[str, str] | None = None) -> Manifest:
    """The AM as a batch Job named ``app`` of ``am.max_attempts`` pods at most: a pod that dies
    other than with the AM's verdict (``AM_VERDICT_EXIT_CODES``) is replaced by the next attempt,
    which adopts the executors still running. Its pods are named ``<app>-<5 chars>``."""
    pod = am_pod(spec, app, runtime_digest, cluster_env)
    template_meta = {key: pod["metadata"][key] for key in ("labels", "annotations")}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": _meta(app, _config(spec).namespace, job_labels(spec, app, "am"),
                              annotations=job_annotations(spec)),
            "spec": {"backoffLimit": am_backoff_limit(spec), "completions": 1, "parallelism": 1,
                     "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {
                         "containerName": AM_CONTAINER, "operator": "In", "values": AM_VERDICT_EXIT_CODES}}]},
                     "template": {"metadata": template_meta, "spec": pod["spec"]}}}


# --- by the AM ---------------------------------------------------------------------


def headless_service(spec: JobSpec, app: str, owner_uid: str | None = None, owner_kind: str = "Pod") -> Manifest:
    """Gives the AM and each executor pod (``hostname``/``subdomain``) a stable DNS name. Not-ready
    pods are published too: executors resolve the AM and each other before anyone is ready."""
    config = _config(spec)
    owners = {"ownerReferences": [owner_reference(app, owner_uid, owner_kind)]} if owner_uid else {}
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _meta(Names(app).service, config.namespace, job_labels(spec, app, "am"), **owners),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {LABEL_APP: app}}}


def executor_pod(spec: JobSpec, app: str, owner_uid: str, request: LaunchRequest,
                 am_address: str, files: list[str] | None = None,
                 cluster_env: dict[str, str] | None = None, owner_kind: str = "Pod") -> Manifest:
    """The pod of one executor incarnation, owned by the job's owner (``owner_kind``). ``files``:
    names in the job's files ConfigMap this role's executors get (linked into their working
    directory by the executor); ``cluster_env``: the AM's (where HDFS is)."""
    config = _config(spec)
    names = Names(app)
    role = spec.role(request.role)
    labels = {**job_labels(spec, app, "executor"), LABEL_ROLE: label_value(request.role),
              LABEL_INDEX: str(request.index), LABEL_INCARNATION: label_value(request.incarnation)}
    annotations = job_annotations(spec)
    if config.gang == "volcano":
        annotations["scheduling.k8s.io/group-name"] = names.pod_group
    elif config.gang == "kueue" and config.queue:
        labels["kueue.x-k8s.io/queue-name"] = config.queue
    env = {**(cluster_env or {}), **request.env,
           protocol.ENV_AM_ADDRESS: am_address,
           protocol.ENV_TOKEN_FILE: f"{TOKEN_DIR}/{TOKEN_KEY}",
           protocol.ENV_EXECUTOR_HOST: executor_dns_name(app, config.namespace, request.role, request.index),
           protocol.ENV_WORK_DIR: WORK_DIR, protocol.ENV_LOG_DIR: LOG_DIR,
           # The device plugin shows the container its own GPUs only, numbered from 0.
           protocol.ENV_GPUS: ",".join(str(g) for g in range(role.resources.gpu)),
           protocol.ENV_LOG_TO_CONSOLE: "1", protocol.ENV_READY_MARKER: f"{LOG_DIR}/{READY_MARKER}",
           "PYTHONUNBUFFERED": "1"}
    mounts: list[dict[str, Any]] = [{"name": "token", "mountPath": TOKEN_DIR, "readOnly": True},
              {"name": "logs", "mountPath": LOG_DIR}, {"name": "work", "mountPath": WORK_DIR}]
    volumes: list[dict[str, Any]] = [
        {"name": "token", "secret": {"secretName": names.token, "defaultMode": 0o400}},
        {"name": "logs", "emptyDir": {}}, {"name": "work", "emptyDir": {}}]
    if files:
        env[protocol.ENV_FILES_DIR] = FILES_DIR
        mounts.append({"name": "files", "mountPath": FILES_DIR, "readOnly": True})
        volumes.append({"name": "files", "configMap": {
            "name": names.files, "items": [{"key": file_key(name), "path": name} for name in files]}})
    container = _container(config, EXECUTOR_CONTAINER, ["python", "-m", "primus_runtime.executor"],
                           [{"name": k, "value": v} for k, v in env.items()], _executor_resources(role), mounts)
    # Ready once the trainer passed the role's readiness probe (the executor then writes the marker).
    container["readinessProbe"] = {"exec": {"command": ["test", "-e", f"{LOG_DIR}/{READY_MARKER}"]},
                                   "periodSeconds": 2}
    pod_spec: dict[str, Any] = {
        **_pod_common(config),
        "hostname": hostname(request.role, request.index), "subdomain": names.service,
        "terminationGracePeriodSeconds": math.ceil(config.termination_grace or spec.am.shutdown_grace + 5),
        "automountServiceAccountToken": False,  # executors never call the API server
        "containers": [container], "volumes": volumes}
    if config.service_account:
        pod_spec["serviceAccountName"] = config.service_account
    affinity = _anti_affinity(app, role)
    if affinity:
        pod_spec["affinity"] = affinity
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": _meta(names.executor_pod(request.role, request.index, request.incarnation),
                              config.namespace, labels, annotations=annotations,
                              ownerReferences=[owner_reference(app, owner_uid, owner_kind)]),
            "spec": pod_spec}


def _anti_affinity(app: str, role: Role) -> dict[str, Any] | None:
    if not role.placement.anti_affinity:
        return None
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {
            "matchLabels": {LABEL_APP: app, LABEL_COMPONENT: "executor"},
            "matchExpressions": [{"key": LABEL_ROLE, "operator": "In",
                                  "values": sorted(label_value(r) for r in role.placement.anti_affinity)}]}}]}}


def _executor_resources(role: Role) -> dict[str, Any]:
    # requests = limits: the Guaranteed QoS class, evicted last under node pressure.
    size = {"cpu": _cpu(role.resources.cpu), "memory": _memory(role.resources.memory)}
    limits = dict(size)
    if role.resources.gpu:
        limits[GPU_RESOURCE] = str(role.resources.gpu)
    return {"requests": size, "limits": limits}


def _cpu(cores: float) -> str:
    return f"{math.ceil(cores * 1000)}m"


def _memory(size: int) -> str:
    return str(size) if size % 2**20 else f"{size // 2**20}Mi"
