"""YARN backend: the AM runs inside a YARN application started through skein.

Submitting (``YarnClusterClient.submit``, where the CLI or Airflow runs):

- the runtime bundle and each role's files are uploaded to HDFS once per content hash
  (``<store>/bundles``, ``<store>/files``), so resubmitting the same job uploads nothing;
- skein starts an application whose master script is the Primus AM and which has one skein
  service per role, with no instance: the AM asks for each executor container itself;
- the spec and the job token go to ``<store>/jobs/<app_id>/`` (the token mode 600), where the
  AM also publishes its address (``am.json``) and mirrors its status (``status.json``).

``<store>`` is ``/user/<user>/.primus`` on the cluster's default filesystem. After submitting,
nothing here needs skein's Java driver: status, listing and kill use the ResourceManager's
REST API and WebHDFS; logs come from the NodeManagers' REST API.

Inside the AM, ``YarnExecutorBackend`` asks skein for a container per executor
(``add_container`` with the executor's environment), watches container states, and maps their
ends to the failover engine's events (exit code, preemption, lost node).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import re
import secrets
import shlex
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .. import protocol
from ..bundle import build_bundle
from ..hadoop import ENV_WEBHDFS, HadoopConf, hadoop_user, hdfs_filesystem
from ..spec import JobSpec, Resources, SpecError, YarnBackend
from ..states import JOB_OUTCOMES, JobState
from .base import BackendEvents, ClusterClient, ExecutorBackend, Exited, Launched, LaunchRequest, role_env
from .local import default_home

log = logging.getLogger("primus.yarn")

BUNDLE_NAME = "primus-runtime.zip"
TOKEN_NAME = "token"
SPEC_NAME = "spec.json"
#: Environment of the AM container: where its job's files are on HDFS, WebHDFS and the RM.
ENV_JOB_STORE = "PRIMUS_JOB_STORE"
ENV_RM_WEB = "PRIMUS_RM_WEB"
ENV_PYTHON = "PRIMUS_PYTHON"
#: "role=n,...": executors 0..n-1 of these roles are started with the application (see prelaunched()).
#: (Not JSON: YARN's launch script does not keep the quotes of environment values.)
ENV_PRELAUNCHED = "PRIMUS_PRELAUNCHED"
ENV_HDFS_USER = "PRIMUS_HDFS_USER"
#: YARN refuses more tags, or longer ones (YarnConfiguration's application tag limits).
MAX_TAGS, MAX_TAG_LENGTH = 10, 100
#: ResourceManager application states in which the AM may still run.
YARN_ACTIVE = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")
YARN_DONE = ("FINISHED", "FAILED", "KILLED")


# --- the ResourceManager's REST API --------------------------------------------------------


class ResourceManager:
    """The few ResourceManager REST calls we need (standard library; simple authentication)."""

    def __init__(self, web: str, timeout: float = 10.0):
        self.web = web.rstrip("/")
        self.timeout = timeout

    def _call(self, path: str, method: str = "GET", body: dict[str, Any] | None = None) -> Any:
        sep = "&" if "?" in path else "?"
        url = f"{self.web}/ws/v1/cluster{path}{sep}user.name={hadoop_user()}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method,
                                         headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise KeyError(path) from None
            raise RuntimeError(f"ResourceManager {self.web}: {method} {path}: HTTP {exc.code} "
                               f"{exc.read()[:300].decode(errors='replace')}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ConnectionError(f"ResourceManager {self.web} is unreachable: {exc}") from None

    def app(self, app_id: str) -> dict[str, Any]:
        """The application report (state, finalStatus, diagnostics, amContainerLogs, ...)."""
        return self._call(f"/apps/{app_id}")["app"]

    def apps(self, tag: str) -> list[dict[str, Any]]:
        found = self._call(f"/apps?applicationTags={tag}")["apps"]
        return (found or {}).get("app", [])

    def kill(self, app_id: str) -> None:
        self._call(f"/apps/{app_id}/state", "PUT", {"state": "KILLED"})

    def node_capacities(self) -> list[dict[str, int]]:
        """Each running node's total resources: ``memory`` (MiB), ``vcores`` and ``gpus``."""
        nodes = (self._call("/nodes")["nodes"] or {}).get("node", [])
        capacities = []
        for node in nodes:
            if node.get("state") != "RUNNING":
                continue
            total = node.get("totalResource") or {}
            infos = (total.get("resourceInformations") or {}).get("resourceInformation", [])
            gpus = sum(int(i.get("value", 0)) for i in infos if i.get("name") == "yarn.io/gpu")
            capacities.append({"memory": int(total.get("memory", node.get("availMemoryMB", 0)
                                                        + node.get("usedMemoryMB", 0))),
                               "vcores": int(total.get("vCores", node.get("availableVirtualCores", 0)
                                                       + node.get("usedVirtualCores", 0))),
                               "gpus": gpus})
        return capacities


# --- how roles become YARN containers ---------------------------------------------------------


def container_resources(res: Resources) -> dict[str, int]:
    """YARN asks in MiB and whole vcores: round up, never down."""
    return {"memory": max(1, math.ceil(res.memory / 2**20)), "vcores": max(1, math.ceil(res.cpu)), "gpus": res.gpu}


def never_fits(role: str, res: Resources, nodes: list[dict[str, int]]) -> str | None:
    """Why no node of the cluster can ever hold one executor of ``role``, or None."""
    need = container_resources(res)
    if any(all(node[k] >= need[k] for k in need) for node in nodes):
        return None
    have = {k: max((node[k] for node in nodes), default=0) for k in need}
    short = [k for k in need if need[k] > have[k]]
    what = short[0] if short else "memory"
    unit = "Mi" if what == "memory" else ""
    return (f"roles.{role}.resources: one executor needs {what} {need[what]}{unit} but the largest YARN node "
            f"has {have[what]}{unit}" + (" (no node offers yarn.io/gpu)" if what == "gpus" and not have[what] else ""))


def application_tags(spec: JobSpec, config: YarnBackend) -> list[str]:
    """``primus`` plus ``key:value`` per tag. YARN lowercases tags; the exact ones stay in spec.json."""
    tags = ["primus"] + [f"{k}:{v}" for k, v in {**config.application_tags, **spec.tags}.items()]
    problems = [f"tags: YARN allows {MAX_TAG_LENGTH} characters per application tag, got {t!r}"
                for t in tags if len(t) > MAX_TAG_LENGTH]
    problems += [f"tags: YARN refuses ',' in application tags, got {t!r}" for t in tags if "," in t]
    if len(tags) > MAX_TAGS:
        problems.append(f"tags: YARN allows {MAX_TAGS} application tags, this job has {len(tags)} "
                        f"(primus + {len(tags) - 1} of tags and backend.application_tags)")
    if problems:
        raise SpecError(problems)
    return [t.lower() for t in tags]


def prelaunched(spec: JobSpec) -> dict[str, int]:
    """Roles whose executors the AM launches the moment it starts, and how many: these containers
    are asked for with the application itself. Containers the AM asks for later wait for a
    heartbeat of skein's master that is 5 s apart while it has nothing pending; these do not."""
    first = spec.start_order()[:1] if spec.scheduling.policy == "ordered" else spec.start_order()
    return {name: spec.role(name).replicas for name in first}


def parse_prelaunched(value: str) -> dict[str, int]:
    return {role: int(n) for role, _, n in (item.partition("=") for item in value.split(",") if item)}


def executor_script(python: str) -> str:
    """The container's command: paths the executor needs come from what YARN sets in it. A
    container started with the application (no incarnation in its environment yet) is named by
    skein's id for it, ``<role>_<n>``, and learns the AM's address from the job store once the AM
    has published it."""
    app_of_container = "$(echo \"$CONTAINER_ID\" | sed -E 's/^container_(e[0-9]+_)?([0-9]+_[0-9]+)_.*/\\2/')"
    return "\n".join([
        f'export {protocol.ENV_WORK_DIR}="$PWD" {protocol.ENV_TOKEN_FILE}="$PWD/{TOKEN_NAME}"',
        f'export {protocol.ENV_LOG_DIR}="${{LOG_DIRS%%,*}}"',
        f'export {protocol.ENV_EXECUTOR_HOST}="${{NM_HOST:-$(hostname -f)}}"',
        f'if [ -z "${{{protocol.ENV_INCARNATION}:-}}" ]; then',
        f'  app="application_{app_of_container}"',
        f'  export {protocol.ENV_INCARNATION}="$SKEIN_CONTAINER_ID" {protocol.ENV_INDEX}="${{SKEIN_CONTAINER_ID##*_}}"',
        f'  export {protocol.ENV_APP_ID}="$app"',
        f'  export {protocol.ENV_AM_INFO_URL}="${ENV_WEBHDFS}/webhdfs/v1${ENV_JOB_STORE}/jobs/$app/am.json'
        f'?op=OPEN&user.name=${ENV_HDFS_USER}"',
        "fi",
        # -E -S: the executor needs only the standard library (see bundle.py).
        f"exec {shlex.quote(python)} -E -S {BUNDLE_NAME} executor",
    ])


def am_script(python: str) -> str:
    return "\n".join([
        f'export PYTHONPATH="$PWD/{BUNDLE_NAME}${{PYTHONPATH:+:$PYTHONPATH}}"',
        f"exec {shlex.quote(python)} -m primus_runtime.am --yarn",
    ])


# --- the job's files on HDFS -------------------------------------------------------------------


class JobStore:
    """``<root>/jobs/<app_id>/`` on HDFS: spec, token, the AM's address and status (WebHDFS)."""

    def __init__(self, fs: Any, root: str):
        self.fs = fs
        self.root = root.rstrip("/")

    def path(self, app_id: str, name: str) -> str:
        return f"{self.root}/jobs/{app_id}/{name}"

    def write(self, app_id: str, name: str, data: bytes, private: bool = False) -> None:
        """Write whole (to a temporary name, then rename: readers never see half a file)."""
        target = self.path(app_id, name)
        tmp = f"{target}.{secrets.token_hex(4)}.tmp"
        job_dir = target.rsplit("/", 1)[0]
        self.fs.makedirs(job_dir, exist_ok=True)
        if private:
            # fsspec's WebHDFS ignores a permission given to open(): set it with SETPERMISSION. The
            # job's directory too, so that no one else can read the file while it is written.
            self.fs.chmod(job_dir, "700")
        with self.fs.open(tmp, "wb") as f:
            f.write(data)
        if private:
            self.fs.chmod(tmp, "600")
        if self.fs.exists(target):
            self.fs.rm(target)
        self.fs.mv(tmp, target)

    def read(self, app_id: str, name: str) -> bytes | None:
        try:
            return self.fs.cat_file(self.path(app_id, name))
        except FileNotFoundError:
            return None

    def read_json(self, app_id: str, name: str) -> dict[str, Any] | None:
        data = self.read(app_id, name)
        try:
            return json.loads(data) if data else None
        except ValueError:
            return None

    def upload_once(self, local: Path, kind: str) -> str:
        """Upload ``local`` to ``<root>/<kind>/<sha256>/<name>`` unless it is there; its HDFS path."""
        digest = hashlib.sha256()
        with open(local, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        target = f"{self.root}/{kind}/{digest.hexdigest()[:24]}/{local.name}"
        if self.fs.exists(target) and self.fs.size(target) == local.stat().st_size:
            return target
        self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
        tmp = f"{target}.{secrets.token_hex(4)}.tmp"
        self.fs.put_file(str(local), tmp)
        if not self.fs.exists(target):
            self.fs.mv(tmp, target)
        else:
            self.fs.rm(tmp)  # a concurrent submit uploaded the same content first
        return target


def _skein_client() -> Any:
    """skein's global driver when one runs (``skein driver start`` on the submitting machine
    saves the ~4 s JVM start of a driver per submit), else a driver for this submit."""
    import skein

    try:
        return skein.Client.from_global_driver()
    except skein.exceptions.DriverNotRunningError:
        return skein.Client(log=False)


def default_store_root() -> str:
    return f"/user/{hadoop_user()}/.primus"


# --- from outside: submit, find, kill ----------------------------------------------------------


@dataclass
class _Endpoint:
    address: str
    token: str


class YarnClusterClient(ClusterClient):
    """Jobs on the YARN cluster of ``$HADOOP_CONF_DIR`` (or ``conf_dir``)."""

    def __init__(self, conf_dir: str | None = None, store_root: str | None = None, home: str | None = None):
        self.conf = HadoopConf(conf_dir)
        self.rm = ResourceManager(self.conf.rm_web())
        self.fs = hdfs_filesystem(conf=self.conf)
        self.store = JobStore(self.fs, store_root or default_store_root())
        self.home = default_home(home)  # local cache of built bundles
        self._endpoints: dict[str, _Endpoint] = {}

    # --- submit ---

    def submit(self, spec: JobSpec) -> str:
        import skein

        config = spec.backend
        if not isinstance(config, YarnBackend):
            raise SpecError([f"backend.type: the YARN backend cannot run a {config.type!r} job"])
        tags = application_tags(spec, config)
        problems = [f"roles.{role.name}.files: {f} does not exist" for role in spec.roles
                    for f in role.files if not Path(f).exists()]
        nodes = self.rm.node_capacities()
        problems += [why for role in spec.roles if (why := never_fits(role.name, role.resources, nodes))]
        if problems:
            raise SpecError(problems)
        python = config.python or sys.executable
        bundle = self.fs_url(self.store.upload_once(build_bundle(self.home / "bundles"), "bundles"))
        token = secrets.token_urlsafe(32)
        with tempfile.TemporaryDirectory(prefix="primus-submit-") as tmp:
            token_file, spec_file = Path(tmp) / TOKEN_NAME, Path(tmp) / SPEC_NAME
            token_file.write_text(token)
            token_file.chmod(0o600)
            spec_file.write_text(spec.to_json())
            # skein uploads these two to the application's private staging directory.
            common = {BUNDLE_NAME: skein.File(bundle, type="file"), TOKEN_NAME: skein.File(str(token_file))}
            services = {}
            early = prelaunched(spec)
            store_env = {ENV_JOB_STORE: self.store.root, ENV_WEBHDFS: self.conf.webhdfs(),
                         ENV_HDFS_USER: hadoop_user()}
            for role in spec.roles:
                files = dict(common)
                for f in role.files:
                    files[Path(f).name] = skein.File(self.fs_url(self.store.upload_once(Path(f), "files")),
                                                     type="file")
                services[role.name] = skein.Service(
                    resources=skein.Resources(**container_resources(role.resources)),
                    script=executor_script(python), instances=early.get(role.name, 0), files=files,
                    env={**role_env(spec, role.name), **store_env},
                    max_restarts=0, allow_failures=True,  # the Primus AM decides about failures
                    node_label=config.node_label or "")
            master = skein.Master(
                resources=skein.Resources(memory=max(1, math.ceil(config.am_memory / 2**20)),
                                          vcores=config.am_vcores),
                script=am_script(python),
                files={**common, SPEC_NAME: skein.File(str(spec_file))},
                env={**store_env, ENV_RM_WEB: self.rm.web, ENV_PYTHON: python, "HADOOP_USER_NAME": hadoop_user(),
                     ENV_PRELAUNCHED: ",".join(f"{role}={n}" for role, n in early.items())})
            app_spec = skein.ApplicationSpec(
                name=spec.name, queue=config.queue, node_label=config.node_label or "", tags=tags,
                max_attempts=spec.am.max_attempts, user=config.user or "", master=master, services=services)
            with _skein_client() as client:
                app_id = client.submit(app_spec)
        # For other clients (an Airflow retry on another worker): the spec, and the token only
        # its owner can read.
        self.store.write(app_id, SPEC_NAME, spec.to_json().encode())
        self.store.write(app_id, TOKEN_NAME, token.encode(), private=True)
        self._endpoints.pop(app_id, None)
        log.info("submitted %s (%s) to YARN queue %s", app_id, spec.name, config.queue)
        return app_id

    def fs_url(self, path: str) -> str:
        return self.conf.default_fs() + path

    # --- find ---

    def _report(self, app_id: str) -> dict[str, Any]:
        if not re.fullmatch(r"application_\d+_\d+", app_id):
            raise KeyError(app_id)
        return self.rm.app(app_id)

    def exists(self, app_id: str) -> bool:
        try:
            self._report(app_id)
        except KeyError:
            return False
        return True

    def spec(self, app_id: str) -> JobSpec:
        data = self.store.read(app_id, SPEC_NAME)
        if data is None:
            self._report(app_id)  # KeyError for an unknown application
            raise KeyError(f"{app_id}: no Primus spec in {self.store.path(app_id, SPEC_NAME)}")
        return JobSpec.model_validate_json(data)

    def am_alive(self, app_id: str) -> bool:
        return self._report(app_id)["state"] in YARN_ACTIVE

    def am_endpoint(self, app_id: str) -> tuple[str, str] | None:
        if not self.am_alive(app_id):
            return None
        known = self._endpoints.get(app_id)
        if known is None:
            info = self.store.read_json(app_id, "am.json")
            token = self.store.read(app_id, TOKEN_NAME)
            if info is None or token is None:
                return None  # the AM has not published its address yet
            known = self._endpoints[app_id] = _Endpoint(info["address"], token.decode().strip())
        return known.address, known.token

    def last_status(self, app_id: str) -> dict[str, Any] | None:
        return self.store.read_json(app_id, "status.json")

    def final_status(self, app_id: str) -> dict[str, Any] | None:
        status = self.last_status(app_id)
        if status and status["job"]["state"] in JOB_OUTCOMES:
            return status
        report = self._report(app_id)
        if report["state"] not in YARN_DONE:
            return None
        # The application ended without the AM recording an outcome: YARN's word is all there is.
        status = status or {"job": {"app_id": app_id, "name": report.get("name")}, "roles": [],
                            "executors": [], "events": []}
        final = report.get("finalStatus")
        state = (JobState.KILLED if "KILLED" in (report["state"], final)
                 else JobState.SUCCEEDED if final == "SUCCEEDED" else JobState.FAILED).value
        status["job"].update(state=state, reason=f"YARN application {report['state'].lower()}: "
                                                 f"{(report.get('diagnostics') or '').strip()[:500]}",
                             finished_at=(report.get("finishedTime") or 0) / 1000 or time.time())
        return status

    def list_jobs(self, tags: dict[str, str] | None = None) -> list[dict[str, Any]]:
        wanted = {f"{k}:{v}".lower() for k, v in (tags or {}).items()}
        out = []
        for report in self.rm.apps("primus"):
            if not wanted <= set(report.get("applicationTags", "").split(",")):
                continue
            app_id = report["id"]
            spec = self.store.read_json(app_id, SPEC_NAME) or {}
            if tags and any(spec.get("tags", {}).get(k) != v for k, v in tags.items()):
                continue  # same tag lowercased, different case: not this job
            status = self.last_status(app_id) or {}
            state = status.get("job", {}).get("state", "pending")
            if report["state"] in YARN_DONE and state not in JOB_OUTCOMES:
                state = JobState.KILLED.value if report["state"] == "KILLED" else JobState.LOST.value
            out.append({"app_id": app_id, "name": spec.get("name", report.get("name")), "state": state,
                        "tags": spec.get("tags", {}), "created_at": report.get("startedTime", 0) / 1000})
        return sorted(out, key=lambda j: j["created_at"], reverse=True)

    # --- control ---

    def force_kill(self, app_id: str) -> int:
        """Kill the application through the ResourceManager: YARN stops the AM and every container."""
        if not self.am_alive(app_id):
            return 0
        self.rm.kill(app_id)
        return 1

    # --- logs ---

    def am_log(self, app_id: str) -> str:
        """The Primus AM's log: the output of skein's master script (skein's own is application.master.log)."""
        report = self._report(app_id)
        logs = report.get("amContainerLogs") or ""
        match = re.search(r"^(https?://[^/]+)/node/containerlogs/(container_[\w]+)", logs)
        if match is None:
            raise KeyError(f"{app_id}: YARN reports no AM container yet")
        return f"{match.group(1)}/ws/v1/node/containers/{match.group(2)}/logs/application.driver.log"

    def read_log(self, app_id: str, path: str, offset: int = 0) -> bytes:
        """A log file from the NodeManager that ran the container (``path`` is its REST URL)."""
        parts = urlsplit(path)
        # Container ids embed their application's: container_[e<epoch>_]<cluster ts>_<app seq>_...
        container = re.search(r"/ws/v1/node/containers/(container_[\w]+)/logs/", parts.path)
        if parts.scheme not in ("http", "https") or container is None or \
                f"_{app_id.removeprefix('application_')}_" not in container.group(1):
            raise PermissionError(f"{path} is not a log of job {app_id}")
        try:
            with urllib.request.urlopen(path, timeout=10) as response:
                data = response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return b""
            raise
        return log_contents(data)[offset:]


def log_contents(body: bytes) -> bytes:
    """The file inside the NodeManager's framing (``Container: ...`` ``LogContents:`` the bytes
    ``End of LogType:...``). It frames the file by its length, so the content is cut by it too."""
    head, sep, rest = body.partition(b"\nLogContents:\n")
    if not sep:
        return body
    length = re.search(rb"\nLogLength:(\d+)", head)
    return rest[: int(length.group(1))] if length else rest.rpartition(b"\nEnd of LogType:")[0]


# --- inside the AM -------------------------------------------------------------------------


def exit_code_of(message: str) -> int | None:
    match = re.search(r"[Ee]xit (?:code|status):? (-?\d+)", message)
    return int(match.group(1)) if match else None


#: ContainerExitStatus.INVALID: the NodeManager has no exit status (yet) for the container.
_NO_EXIT_STATUS = -1000


def node_exit_report(node_http: str, container_id: str, timeout: float = 5.0) -> tuple[int | None, str] | None:
    """(exit status, diagnostics) of a container from its NodeManager's REST API, or None once the
    NodeManager has forgotten it (a few seconds after the ResourceManager passed its end to the AM).

    skein replaces both by "Container failed during execution" for every positive exit status, so
    a container YARN killed from outside (``yarn container -signal``: exit 137, "Killed by external
    signal") would otherwise end without its exit code or why."""
    url = f"http://{node_http}/ws/v1/node/containers/{container_id}?user.name={hadoop_user()}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            info = json.loads(response.read())["container"]
    except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
        log.info("no exit status of %s from its NodeManager %s: %s", container_id, node_http, exc)
        return None
    code = info.get("exitCode")
    # Each diagnostics line starts with its time ("[2026-12-03 09:27:34.763]"): noise in a reason.
    diagnostics = re.sub(r"\[\d{4}-\d\d-\d\d [\d:.]+\]", " ", info.get("diagnostics") or "")
    return (code if isinstance(code, int) and code != _NO_EXIT_STATUS else None), " ".join(diagnostics.split())


def exited_from(state: str, message: str,
                node_report: tuple[int | None, str] | None = None) -> tuple[int | None, str, bool]:
    """(exit code, reason, preempted) of a container YARN reports as ended; ``node_report`` is its
    NodeManager's exit status and diagnostics when known (see node_exit_report)."""
    text = " ".join(message.split())
    if state == "SUCCEEDED":
        return 0, "container exited 0", False
    code = exit_code_of(text)
    if node_report is not None:
        code = node_report[0] if node_report[0] is not None else code
        text = node_report[1] or text
    preempted = "preempt" in text.lower()
    if preempted:
        return code, f"container preempted by YARN: {text[:300]}", True
    if re.search(r"lost\W*node|node\W*lost", text.lower()):  # "Container released on a *lost* node"
        return None, f"container lost with its node: {text[:300]}", False
    if state == "KILLED":
        return code, f"container killed: {text[:300] or 'by the AM'}", False
    return code, f"container failed{f' (exit {code})' if code is not None else ''}: {text[:300]}", False


class YarnExecutorBackend(ExecutorBackend):
    """Executors are containers of the skein services of their roles (one service per role)."""

    def __init__(self, app: Any, rm: ResourceManager | None = None, poll: float = 0.5,
                 prelaunched: dict[str, int] | None = None):
        self.app = app  # skein.ApplicationClient of this application
        self.rm = rm
        self.poll = poll
        # Containers started with the application, not yet given to an executor: (role, index).
        self._unclaimed = {(role, i) for role, n in (prelaunched or {}).items() for i in range(n)}
        self._events: BackendEvents | None = None
        self._nodes: list[dict[str, int]] = []
        self._containers: dict[str, LaunchRequest] = {}  # skein container id -> request
        self._running: set[str] = set()
        self._by_incarnation: dict[str, str] = {}
        self._watcher: asyncio.Task | None = None

    async def start(self, events: BackendEvents) -> None:
        self._events = events
        if self.rm is not None:
            try:
                self._nodes = await asyncio.to_thread(self.rm.node_capacities)
            except (ConnectionError, RuntimeError) as exc:
                log.warning("cannot read the cluster's node sizes, not checking them: %s", exc)
        self._watcher = asyncio.ensure_future(self._watch())

    def check_fits(self, role: str, resources: Resources) -> str | None:
        return never_fits(role, resources, self._nodes) if self._nodes else None

    def incarnation_for(self, role: str, index: int) -> str | None:
        if (role, index) not in self._unclaimed:
            return None
        self._unclaimed.discard((role, index))
        return f"{role}_{index}"  # skein's id of the container, which the executor takes as its name

    def pending_reason(self, incarnation: str) -> str | None:
        container_id = self._by_incarnation.get(incarnation)
        if container_id is None or container_id in self._running:
            return None
        ask = container_resources(self._containers[container_id].resources)
        gpus = f", {ask['gpus']} GPUs" if ask["gpus"] else ""
        return (f"waits for YARN container {container_id} ({ask['vcores']} vcores, {ask['memory']}Mi{gpus}): "
                f"requested, not running yet")

    async def launch(self, request: LaunchRequest) -> None:
        if request.incarnation == f"{request.role}_{request.index}":  # started with the application
            self._containers[request.incarnation] = request
            self._by_incarnation[request.incarnation] = request.incarnation
            return
        env = dict(request.env)
        container = await asyncio.to_thread(self.app.add_container, request.role, env)
        self._containers[container.id] = request
        self._by_incarnation[request.incarnation] = container.id
        log.info("%s: asked YARN for container %s", protocol.executor_id(request.role, request.index), container.id)

    async def stop(self, role: str, index: int, incarnation: str, force: bool) -> None:
        container_id = self._by_incarnation.get(incarnation)
        if container_id is None:
            return
        # A running executor was told to stop on its heartbeat and exits by itself; one still
        # waiting for a container cannot hear it, so it is withdrawn at once.
        if force or container_id not in self._running:
            try:
                await asyncio.to_thread(self.app.kill_container, container_id)
            except Exception as exc:  # noqa: BLE001 - the container may have ended meanwhile
                log.info("kill %s: %s", container_id, exc)

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        for container_id in list(self._containers):
            try:
                await asyncio.to_thread(self.app.kill_container, container_id)
            except Exception:  # noqa: BLE001,S110 - already ended
                pass

    async def _watch(self) -> None:
        while True:
            try:
                containers = await asyncio.to_thread(
                    self.app.get_containers, None, ["RUNNING", "SUCCEEDED", "FAILED", "KILLED"])
                reports = await asyncio.to_thread(self._node_reports, containers)
                self._update(containers, reports)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - keep watching; skein calls can fail transiently
                log.exception("reading container states from skein failed")
            await asyncio.sleep(self.poll)

    def _node_reports(self, containers: list[Any]) -> dict[str, tuple[int | None, str]]:
        """YARN's own exit status and diagnostics of our containers that just failed, asked at once:
        their NodeManager keeps them only a few seconds after the AM has been told."""
        reports = {}
        for c in containers:
            if c.id in self._containers and str(c.state) == "FAILED" and c.yarn_node_http_address:
                report = node_exit_report(c.yarn_node_http_address, c.yarn_container_id)
                if report is not None:
                    reports[c.id] = report
        return reports

    def _update(self, containers: list[Any], node_reports: dict[str, tuple[int | None, str]] | None = None) -> None:
        assert self._events is not None
        for c in containers:
            request = self._containers.get(c.id)
            if request is None:
                continue
            state = str(c.state)
            if state == "RUNNING" and c.id not in self._running and c.yarn_node_http_address:
                # (skein may report RUNNING a moment before it knows the node: wait for it.)
                self._running.add(c.id)
                node = c.yarn_node_http_address
                base = f"http://{node}/ws/v1/node/containers/{c.yarn_container_id}/logs"
                # The executor's own log is the service's log: skein sends the script's output there.
                logs = {"executor": f"{base}/{request.role}.log", "stdout": f"{base}/stdout.log",
                        "stderr": f"{base}/stderr.log"}
                self._events.on_launched(Launched(request.role, request.index, request.incarnation,
                                                  node.rsplit(":", 1)[0], [], logs))
            elif state in ("SUCCEEDED", "FAILED", "KILLED"):
                del self._containers[c.id]
                self._running.discard(c.id)
                self._by_incarnation.pop(request.incarnation, None)
                code, reason, preempted = exited_from(state, c.exit_message or "", (node_reports or {}).get(c.id))
                self._events.on_exited(Exited(request.role, request.index, request.incarnation, code, reason,
                                              preempted))
