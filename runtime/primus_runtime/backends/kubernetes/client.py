"""The Kubernetes backend from outside: submit the AM pod and its objects, then find, read and
kill jobs through the API server (the AM itself is reached through the API server's pod proxy:
from outside a cluster, pod IPs are not routable)."""

from __future__ import annotations

import base64
import json
import secrets
import shlex
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ... import protocol
from ...api_client import AMRejected
from ...bundle import runtime_digest
from ...hadoop import ENV_HADOOP_USER, ENV_WEBHDFS, HadoopConf, HadoopConfigError, hadoop_user, is_hdfs
from ...models import JobEntry
from ...spec import JobSpec, SpecError
from ...states import JOB_OUTCOMES, JobState
from ..base import ClientOptions, ClusterClient, LaunchRequest, launch_env, launched_at_start
from . import logs
from . import manifests as m
from .settings import KubernetesBackend

# A ConfigMap holds at most 1 MiB; the roles' files share one with the keys' overhead.
MAX_FILES_BYTES = 900 * 1024
AM_ALIVE_PHASES = ("Pending", "Running")
STORE_ADDRESS_KEY = "am.json"
STORE_STATUS_KEY = "status.json"
# Calls of one submit round at once (the API client's connection pool holds more).
SUBMIT_CONCURRENCY = 8


def api_client(options: ClientOptions) -> Any:
    """The ``kubernetes.client.ApiClient``: ``options.kube_api_client`` when given (Airflow's
    KubernetesHook), else the kubeconfig file/context of ``options``, else the in-cluster service
    account, else ``$KUBECONFIG`` or ``~/.kube/config``."""
    import os

    from kubernetes import client, config

    if options.kube_api_client is not None:
        return options.kube_api_client
    try:
        if options.kube_config or options.kube_context:
            return config.new_client_from_config(config_file=options.kube_config, context=options.kube_context)
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            return client.ApiClient(configuration)
        return config.new_client_from_config()
    except (config.ConfigException, OSError) as exc:
        raise ConnectionError(f"kubernetes: no usable cluster configuration ({exc}); pass --kubeconfig, "
                              f"run inside a cluster, or write ~/.kube/config") from None


def _not_found(exc: Exception) -> bool:
    return getattr(exc, "status", None) == 404


class KubernetesClusterClient(ClusterClient):
    """Jobs in the cluster of ``api`` (a ``kubernetes.client.ApiClient``). ``namespace``: where
    ``list_jobs`` looks (a job's id names its own; submit uses the spec's)."""

    am_reachable_directly = False  # pod IPs answer inside the cluster only: through the API server's proxy

    def __init__(self, api: Any, namespace: str | None = None, hadoop_conf_dir: str | None = None):
        from kubernetes import client

        self.api = api
        self.namespace = namespace or "default"
        self.hadoop_conf_dir = hadoop_conf_dir
        self._endpoints: dict[str, tuple[str, str]] = {}
        self._am_pods: dict[str, str] = {}  # app id -> the AM pod its endpoint is on
        self._log_cursors: dict[str, logs.LogCursor | None] = {}  # log path -> where its next read starts
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.rbac = client.RbacAuthorizationV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def location(self) -> str:
        return f"Kubernetes at {self.api.configuration.host}, namespace {self.namespace}"

    def cli_command(self, *args: str) -> str:
        return shlex.join(["primus", "--namespace", self.namespace, *args])

    def default_work_preserve_root(self) -> str:
        """There is none: the AM pod's disk goes with the pod (a restarted AM or the next try would
        not find it), and a cluster has no filesystem every pod shares unless someone mounts one."""
        raise SpecError(["work_preserve_root: the Kubernetes backend has no default place for data "
                         "checkpoints (the AM pod has no durable disk); set the connection's work_preserve_root "
                         "or the job's input.work_preserve_dir to an hdfs:// or webhdfs:// directory"])

    # --- submit ---

    def submit(self, spec: JobSpec) -> str:
        """Create the job's objects in three rounds of concurrent calls: everything the AM pod
        needs (its ServiceAccount, RBAC, ConfigMaps, Secret, Service); the owner (the AM pod or its
        Job); then the executors the AM starts with and the others' owner references. The AM pod
        thus starts after two round trips, not after one call per object."""
        config = spec.backend
        if not isinstance(config, KubernetesBackend):
            raise SpecError([f"backend.type: the Kubernetes backend cannot run a {config.type!r} job"])
        files = self._check(spec)
        cluster_env = hdfs_env(spec, self.hadoop_conf_dir)
        app = m.app_name(spec.name, secrets.token_hex(3))
        objects = m.submit_objects(spec, app, secrets.token_urlsafe(32), runtime_digest(), files, cluster_env)
        *others, owner = objects
        created: list[m.Manifest] = []
        with ThreadPoolExecutor(max_workers=SUBMIT_CONCURRENCY, thread_name_prefix="primus-submit") as pool:
            try:
                namespace = pool.submit(self._namespace_problem, config.namespace)
                self._each(pool, "create", others, created)
                owner_uid = self._call("create", owner).metadata.uid
                created.append(owner)
                # The executors the AM would launch first start now, beside the AM: they wait for it at
                # its stable address instead of for its start-up (a Python process importing its stack).
                reference = {"metadata": {"ownerReferences": [m.owner_reference(app, owner_uid, owner["kind"])]}}
                first = first_executor_pods(spec, app, owner_uid, files, cluster_env, owner["kind"])
                self._each(pool, "create", first, created, others=[("patch", body, reference) for body in others])
            except Exception:
                self._roll_back(pool, created)
                problem = namespace.result()  # a missing namespace is the cause to report
                if problem:
                    raise SpecError([problem]) from None
                raise
        return m.app_id(config.namespace, app)

    def _each(self, pool: ThreadPoolExecutor, verb: str, bodies: list[m.Manifest], created: list[m.Manifest],
              others: Sequence[tuple[str, m.Manifest, dict[str, Any] | None]] = ()) -> None:
        """``verb`` every body at once (and the ``others`` calls: verb, body, patch); ``created``
        gets the bodies created; the first error is raised once all have answered."""
        calls: list[tuple[str, m.Manifest, dict[str, Any] | None]] = [(verb, body, None) for body in bodies]
        calls += others
        futures = [pool.submit(self._call, v, body, patch) for v, body, patch in calls]
        first_error: Exception | None = None
        for (v, body, _), future in zip(calls, futures, strict=True):
            try:
                future.result()
                if v == "create":
                    created.append(body)
            except Exception as exc:  # noqa: BLE001 - the first one is raised below
                first_error = first_error or exc
        if first_error is not None:
            raise first_error

    def _roll_back(self, pool: ThreadPoolExecutor, created: list[m.Manifest]) -> None:
        """Delete what a failed submit created (best effort: the submit's own error is the one to report)."""
        for future in [pool.submit(self._call, "delete", body) for body in reversed(created)]:
            try:
                future.result()
            except Exception:  # noqa: BLE001,S110 - best effort; the first error is the one to report
                pass

    def _check(self, spec: JobSpec) -> dict[str, bytes]:
        """What can be checked before creating anything; the roles' files (name -> content)."""
        problems = m.spec_problems(spec)
        files, not_shippable = role_files(spec)
        problems += not_shippable
        if problems:
            raise SpecError(problems)
        return files

    def _namespace_problem(self, namespace: str) -> str | None:
        """Why the job's namespace cannot take it: missing (a 403, not allowed to look, says nothing)."""
        try:
            self.core.read_namespace(namespace)
        except Exception as exc:  # noqa: BLE001 - ApiException; 403: not allowed to look, creating will tell
            if _not_found(exc):
                return f"backend.namespace: no namespace {namespace!r} in the cluster at {self.api.configuration.host}"
        return None

    def _call(self, verb: str, body: m.Manifest, patch: dict[str, Any] | None = None) -> Any:
        """create/patch/delete one manifest of ``submit_objects``."""
        kind, ns, name = body["kind"], body["metadata"]["namespace"], body["metadata"]["name"]
        if kind == "PodGroup":
            group = ("scheduling.volcano.sh", "v1beta1", ns, "podgroups")
            if verb == "create":
                return self.custom.create_namespaced_custom_object(*group, body)
            if verb == "patch":
                return self.custom.patch_namespaced_custom_object(*group, name, patch)
            return self.custom.delete_namespaced_custom_object(*group, name)
        api, suffix = {"ServiceAccount": (self.core, "service_account"), "Role": (self.rbac, "role"),
                       "RoleBinding": (self.rbac, "role_binding"), "ConfigMap": (self.core, "config_map"),
                       "Secret": (self.core, "secret"), "Pod": (self.core, "pod"),
                       "Service": (self.core, "service"), "Job": (self.batch, "job")}[kind]
        method = getattr(api, f"{verb}_namespaced_{suffix}")
        if verb == "create":
            return method(ns, body)
        if verb == "patch":
            return method(name, ns, patch)
        return method(name, ns, propagation_policy="Background")

    # --- find and read ---

    def _am_pod(self, app_id: str) -> Any:
        """The AM pod (of a Job's, the newest), or None once it is gone; KeyError for an id that is
        not a Kubernetes one."""
        ns, app = m.parse_app_id(app_id)
        pods = self.core.list_namespaced_pod(ns, label_selector=_am_selector(app)).items
        return max(pods, key=lambda p: p.metadata.creation_timestamp) if pods else None

    def _recoverable(self, app_id: str) -> bool:
        try:
            return m.recoverable(self.spec(app_id))
        except KeyError:
            return False

    def _am_job(self, app_id: str) -> Any:
        """The Job that runs the AM of a job with ``am.max_attempts > 1``; None for another job."""
        ns, app = m.parse_app_id(app_id)
        try:
            return self.batch.read_namespaced_job(app, ns)
        except Exception as exc:
            if _not_found(exc):
                return None
            raise

    def _config_map(self, app_id: str, name: str) -> dict[str, str] | None:
        ns, _ = m.parse_app_id(app_id)
        try:
            return self.core.read_namespaced_config_map(name, ns).data or {}
        except Exception as exc:
            if _not_found(exc):
                return None
            raise

    def exists(self, app_id: str) -> bool:
        try:
            return self._config_map(app_id, m.Names(m.parse_app_id(app_id)[1]).spec) is not None
        except KeyError:
            return False

    def spec(self, app_id: str) -> JobSpec:
        data = self._config_map(app_id, m.Names(m.parse_app_id(app_id)[1]).spec)
        if data is None:
            raise KeyError(app_id)
        return JobSpec.model_validate_json(data[m.SPEC_KEY])

    def am_alive(self, app_id: str) -> bool:
        """An AM pod runs, or the Job that runs the AM has attempts left (between two attempts no
        pod may run)."""
        pod = self._am_pod(app_id)
        if pod is not None and pod.status.phase in AM_ALIVE_PHASES:
            return True
        run_by_job = _owned_by_job(pod) if pod is not None else self._recoverable(app_id)
        job = self._am_job(app_id) if run_by_job else None
        return job is not None and not any(c.type in ("Complete", "Failed") and c.status == "True"
                                           for c in job.status.conditions or [])

    def _store(self, app_id: str) -> dict[str, str]:
        return self._config_map(app_id, m.Names(m.parse_app_id(app_id)[1]).store) or {}

    def _am_address(self, app_id: str) -> str | None:
        """The address the running AM attempt published; its pod is remembered for the proxy."""
        info = self._store(app_id).get(STORE_ADDRESS_KEY)
        if not info:
            return None
        published = json.loads(info)
        self._am_pods[app_id] = published.get("pod") or m.parse_app_id(app_id)[1]
        return str(published["address"])

    def _token(self, app_id: str) -> str:
        ns, app = m.parse_app_id(app_id)
        secret = self.core.read_namespaced_secret(m.Names(app).token, ns)
        return base64.b64decode(secret.data[m.TOKEN_KEY]).decode().strip()

    def am_endpoint(self, app_id: str) -> tuple[str, str] | None:
        """The AM's pod address (reachable from inside the cluster only) and the token."""
        if not self.am_alive(app_id):
            return None
        return self._endpoint(app_id)

    def _endpoint(self, app_id: str) -> tuple[str, str] | None:
        """Read once per job: an AM pod keeps its address and a job its token (a watcher polling
        the status then costs one proxied request, not four API calls)."""
        if app_id not in self._endpoints:
            address = self._am_address(app_id)
            if address is None:
                return None
            self._endpoints[app_id] = (address, self._token(app_id))
        return self._endpoints[app_id]

    def _proxy_path(self, app_id: str, address: str) -> str:
        ns, app = m.parse_app_id(app_id)
        return f"/api/v1/namespaces/{ns}/pods/{self._am_pods.get(app_id, app)}:{address.rsplit(':', 1)[1]}/proxy"

    def am_request(self, app_id: str, method: str, path: str, body: dict[str, Any] | None,
                   timeout: float, user: str | None = None) -> dict[str, Any] | None:
        """Through the API server's pod proxy. The API server keeps the caller's ``Authorization``
        for itself, so the job token travels in ``X-Primus-Token``. An AM that is gone answers
        through the proxy with the API server's error: None, as for any AM that does not answer."""
        endpoint = self._endpoints.get(app_id) or self.am_endpoint(app_id)
        if endpoint is None:
            return None
        address, token = endpoint
        try:
            response = self.api.call_api(
                self._proxy_path(app_id, address) + protocol.API_PREFIX + path, method,
                header_params={protocol.TOKEN_HEADER: token, "Content-Type": "application/json",
                               "Accept": "application/json", **({protocol.USER_HEADER: user} if user else {})},
                body=body, auth_settings=["BearerToken"], _preload_content=False, _request_timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - ApiException, or urllib3's connection errors
            status, data = getattr(exc, "status", None), getattr(exc, "body", None) or b""
            self._proxy_error(status, data)  # raises the AM's own refusal
            self._endpoints.pop(app_id, None)  # the AM does not answer: a new attempt may be on another pod
            return None
        return json.loads(response[0].data if isinstance(response, tuple) else response.data)

    @staticmethod
    def _proxy_error(status: int | None, data: bytes | str) -> None:
        """A 4xx of the AM is its refusal; the API server's own errors (a ``Status`` object: the
        pod is gone, not serving yet...) mean the AM does not answer."""
        try:
            reply = json.loads(data)
        except (ValueError, TypeError):
            return None
        if status is not None and 400 <= status < 500 and isinstance(reply, dict) and "error" in reply \
                and reply.get("kind") != "Status":
            raise AMRejected(status, str(reply["error"]))
        return None

    def am_web_url(self, app_id: str) -> str | None:
        """The AM's status page through the API server's pod proxy (a browser needs credentials for
        the API server; ``kubectl proxy`` gives a local one)."""
        if not self.am_alive(app_id):
            return None
        address = self._am_address(app_id)
        return f"{self.api.configuration.host}{self._proxy_path(app_id, address)}/" if address else None

    def last_status(self, app_id: str) -> dict[str, Any] | None:
        text = self._store(app_id).get(STORE_STATUS_KEY)
        return json.loads(text) if text else None

    def final_status(self, app_id: str) -> dict[str, Any] | None:
        status = self.last_status(app_id)
        if status and status["job"]["state"] in JOB_OUTCOMES:
            return status
        return None

    def list_jobs(self, tags: dict[str, str] | None = None) -> list[JobEntry]:
        selector = ",".join([f"{k}={v}" for k, v in m.MANAGED_BY.items()] + [f"{m.LABEL_COMPONENT}=am"]
                            + [f"{k}={v}" for k, v in m.tag_labels(tags or {}).items()])
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        stores = {cm.metadata.name: cm.data or {} for cm in
                  self.core.list_namespaced_config_map(self.namespace, label_selector=selector).items}
        attempts: dict[str, list[Any]] = {}  # app -> its AM pods (a Job's: one per attempt)
        for pod in pods:
            attempts.setdefault(pod.metadata.labels[m.LABEL_APP], []).append(pod)
        out = []
        for app, am_pods in attempts.items():
            pod = max(am_pods, key=lambda p: p.metadata.creation_timestamp)
            annotations = pod.metadata.annotations or {}
            job_tags = json.loads(annotations.get(m.ANNOTATION_TAGS, "{}"))
            if tags and any(job_tags.get(k) != v for k, v in tags.items()):
                continue  # the labels are sanitized; the annotation has the exact tags
            job = json.loads(stores.get(m.Names(app).store, {}).get(STORE_STATUS_KEY) or "{}").get("job", {})
            state = job.get("state", JobState.PENDING.value)
            if pod.status.phase not in AM_ALIVE_PHASES and state not in JOB_OUTCOMES:
                state = JobState.LOST.value
            out.append(JobEntry(app_id=m.app_id(self.namespace, app), name=annotations.get(m.ANNOTATION_JOB_NAME, app),
                                state=state, tags=job_tags, reason=job.get("reason", ""),
                                finished_at=job.get("finished_at"),
                                created_at=min(p.metadata.creation_timestamp for p in am_pods).timestamp()))
        return sorted(out, key=lambda j: j.created_at, reverse=True)

    # --- control ---

    def force_kill(self, app_id: str) -> int:
        """Delete the job's owner (the AM pod, or the Job that runs the AM, with its AM pods) at
        once; the garbage collector deletes everything it owns (executor pods, Service, ConfigMaps,
        Secret, RBAC). The number of the job's pods that go."""
        ns, app = m.parse_app_id(app_id)
        pods = self.core.list_namespaced_pod(ns, label_selector=f"{m.LABEL_APP}={app}").items
        if not self._delete_owner(app_id, grace=0):
            return 0
        for pod in pods:
            if pod.metadata.labels.get(m.LABEL_COMPONENT) == "am":  # a Job's: the collector would take its grace
                self._delete_pod(ns, pod.metadata.name, grace=0)
        return len(pods)

    def remove(self, app_id: str) -> None:
        """Delete the job's owner with its grace period (an AM still stopping the job finishes that:
        it gets SIGTERM); the garbage collector deletes everything the owner owns."""
        self._delete_owner(app_id, grace=None)

    def _delete_owner(self, app_id: str, grace: int | None) -> bool:
        """Delete the AM pod, or else the Job that runs the AM (its pods have other names); False
        when neither is there."""
        ns, app = m.parse_app_id(app_id)
        for delete in (self.core.delete_namespaced_pod, self.batch.delete_namespaced_job):
            try:
                delete(app, ns, grace_period_seconds=grace, propagation_policy="Background")
                return True
            except Exception as exc:
                if not _not_found(exc):
                    raise
        return False

    def _delete_pod(self, ns: str, name: str, grace: int | None) -> None:
        try:
            self.core.delete_namespaced_pod(name, ns, grace_period_seconds=grace)
        except Exception as exc:
            if not _not_found(exc):
                raise

    # --- logs ---

    def am_log(self, app_id: str) -> str:
        """The log of the AM pod (of a Job's, the newest attempt)."""
        _, app = m.parse_app_id(app_id)
        pod = self._am_pod(app_id)
        return log_path(pod.metadata.name if pod is not None else app, m.AM_CONTAINER)

    def executor_log(self, app_id: str, role: str, index: int, stream: str) -> str | None:
        """The newest pod of the executor (its container log holds the executor's and the trainer's
        output: ``stream`` cannot be told apart there)."""
        ns, app = m.parse_app_id(app_id)
        selector = f"{m.LABEL_APP}={app},{m.LABEL_ROLE}={m.label_value(role)},{m.LABEL_INDEX}={index}"
        pods = self.core.list_namespaced_pod(ns, label_selector=selector).items
        if not pods:
            return None
        newest = max(pods, key=lambda p: p.metadata.creation_timestamp)
        return log_path(newest.metadata.name, m.EXECUTOR_CONTAINER)

    def read_log(self, app_id: str, path: str, offset: int = 0) -> bytes:
        """A container's log (``pods/<pod>/<container>``) from ``offset``. The API has no byte
        offset: the first read of a log reads it whole, the next ones from the second the last one
        ended in (``logs.LogCursor``), so following a long log does not read it again each time."""
        ns, app = m.parse_app_id(app_id)
        parts = path.split("/")
        if len(parts) != 3 or parts[0] != "pods":
            raise PermissionError(f"{path} is not a log of job {app_id}")
        pod_name, container = parts[1], parts[2]
        cursor = self._log_cursors.get(path)
        read = logs.plan(cursor, offset, None)
        try:
            if cursor is None:  # the first read of this log: check it is the job's
                pod = self.core.read_namespaced_pod(pod_name, ns)
                if (pod.metadata.labels or {}).get(m.LABEL_APP) != app:
                    raise PermissionError(f"{path} is not a log of job {app_id}")
            data = self._pod_log(ns, pod_name, container, read.since)
        except PermissionError:
            raise
        except Exception as exc:
            # Gone (404), or its container not started yet (400): no log to show.
            if getattr(exc, "status", None) in (400, 404):
                return b""
            raise
        chunk, self._log_cursors[path] = logs.take(data, read, offset, None, cursor)
        return chunk

    def _pod_log(self, namespace: str, pod: str, container: str, since: str | None) -> bytes:
        """``pods/log`` with timestamps, from ``since`` (the generated client has no sinceTime)."""
        query = [("container", container), ("timestamps", "true")] + ([("sinceTime", since)] if since else [])
        response = self.api.call_api(f"/api/v1/namespaces/{namespace}/pods/{pod}/log", "GET", query_params=query,
                                     header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
                                     _preload_content=False, _return_http_data_only=True)
        return bytes(response.data)


def role_files(spec: JobSpec) -> tuple[dict[str, bytes], list[str]]:
    """The roles' ``files`` by name, for the job's files ConfigMap, and why some cannot go there."""
    files: dict[str, bytes] = {}
    problems = []
    for role in spec.roles:
        for name in role.files:
            path = Path(name)
            if not path.is_file():
                problems.append(f"roles.{role.name}.files: {name} is not a file (the Kubernetes backend "
                                f"ships files, not directories, in a ConfigMap)")
            elif files.setdefault(path.name, path.read_bytes()) != path.read_bytes():
                problems.append(f"roles.{role.name}.files: two different files are named {path.name!r}")
    size = sum(len(data) for data in files.values())
    if size > MAX_FILES_BYTES:
        problems.append(f"roles[].files: {size} bytes in all, more than the {MAX_FILES_BYTES} a ConfigMap "
                        f"holds; put large files into the image or on HDFS")
    return files, problems


def submit_manifests(spec: JobSpec) -> list[m.Manifest]:
    """What a submit would create, with placeholders for the random parts (``primus k8s manifests``)."""
    if not isinstance(spec.backend, KubernetesBackend):
        raise SpecError([f"backend.type: must be kubernetes to make Kubernetes manifests, got {spec.backend.type!r}"])
    files, problems = role_files(spec)
    problems += m.spec_problems(spec)
    if problems:
        raise SpecError(problems)
    return m.submit_objects(spec, m.app_name(spec.name, "xxxxxx"), "<the job token, made at submit>",
                            runtime_digest(), files)


def first_executor_pods(spec: JobSpec, app: str, owner_uid: str, files: dict[str, bytes],
                        cluster_env: dict[str, str], owner_kind: str = "Pod") -> list[m.Manifest]:
    """The pods of the executors the AM launches the moment it starts (``launched_at_start``), under
    the first incarnations it will adopt them by (``manifests.first_incarnation``)."""
    config = spec.backend
    assert isinstance(config, KubernetesBackend)
    pods = []
    for role_name, replicas in launched_at_start(spec).items():
        role = spec.role(role_name)
        for index in range(replicas):
            incarnation = m.first_incarnation(app, role_name, index)
            env = launch_env(spec, m.app_id(config.namespace, app), role_name, index, incarnation,
                             m.am_address(spec, app))
            request = LaunchRequest(role_name, index, incarnation, 0, role.resources, env, role.files)
            pods.append(m.executor_pod(spec, app, owner_uid, request, env[protocol.ENV_AM_ADDRESS],
                                       files=sorted({Path(f).name for f in role.files} & set(files)),
                                       cluster_env=cluster_env, owner_kind=owner_kind))
    return pods


def hdfs_env(spec: JobSpec, conf_dir: str | None) -> dict[str, str]:
    """Where the job's ``hdfs://`` input is, for pods that have no Hadoop configuration: the
    NameNode's WebHDFS address from the submitting side's (``HADOOP_CONF_DIR``, the connection's
    ``hadoop_conf_dir``) and the HDFS user. ``webhdfs://host:port/...`` paths need neither."""
    if spec.input is None:
        return {}
    paths = {f"input.sources[{i}].path": s.path for i, s in enumerate(spec.input.sources)}
    paths |= {f"input.{key}": value for key in ("work_preserve_dir", "restore_from")
              if (value := getattr(spec.input, key))}
    on_hdfs = {field: path for field, path in paths.items() if path.startswith("hdfs://")}
    if not on_hdfs and not any(is_hdfs(path) for path in paths.values()):
        return {}
    env = {ENV_HADOOP_USER: hadoop_user()}
    if on_hdfs:
        try:
            env[ENV_WEBHDFS] = HadoopConf(conf_dir).webhdfs()
        except HadoopConfigError as exc:
            raise SpecError([f"{field}: an hdfs:// path needs the Hadoop cluster's configuration where the job "
                             f"is submitted ({exc}), got {path!r}; or name the NameNode: "
                             f"webhdfs://HOST:PORT/..." for field, path in on_hdfs.items()]) from None
    return env


def _am_selector(app: str) -> str:
    return f"{m.LABEL_APP}={app},{m.LABEL_COMPONENT}=am"


def _owned_by_job(pod: Any) -> bool:
    return any(o.kind == "Job" for o in pod.metadata.owner_references or [])


def log_path(pod: str, container: str) -> str:
    return f"pods/{pod}/{container}"


def cluster_client(options: ClientOptions) -> KubernetesClusterClient:
    return KubernetesClusterClient(api_client(options), options.namespace, options.hadoop_conf_dir)
