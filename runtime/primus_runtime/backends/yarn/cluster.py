"""What the YARN backend's client and AM share: the ResourceManager's REST API, how roles become
containers, the scripts containers run, and the job's files on HDFS."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import secrets
import shlex
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ... import protocol
from ...hadoop import ENV_WEBHDFS, hadoop_user
from ...spec import JobSpec, Resources, SpecError
from .kerberos import KerberosError, KerberosLogin, urlopen
from .settings import YarnBackend

log = logging.getLogger("primus.yarn")

BUNDLE_NAME = "primus-runtime.zip"
TOKEN_NAME = "token"
#: The trainer's working directory, inside the container's (see ``executor_script``).
TRAINER_WORK_DIR = "work"
# am.tls: the job's CA certificate (AM, executors, clients) and its key (the AM's container only).
CA_CERT_NAME = "ca.crt"
CA_KEY_NAME = "ca.key"
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
    """The few ResourceManager REST calls we need (standard library): simple authentication
    (``user.name=``), or SPNEGO with a Kerberos ``login`` (see kerberos.py)."""

    def __init__(self, web: str, timeout: float = 10.0, login: KerberosLogin | None = None):
        self.web = web.rstrip("/")
        self.timeout = timeout
        self.login = login

    def _call(self, path: str, method: str = "GET", body: dict[str, Any] | None = None) -> Any:
        sep = "&" if "?" in path else "?"
        url = f"{self.web}/ws/v1/cluster{path}" + ("" if self.login else f"{sep}user.name={hadoop_user()}")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method,
                                         headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urlopen(request, self.timeout, self.login) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise KeyError(path) from None
            if exc.code == 401 and self.login is None:
                raise KerberosError(f"ResourceManager {self.web} requires authentication (HTTP 401: a "
                                    "Kerberized cluster): set backend.principal and backend.keytab") from None
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

    def app_attempts(self, app_id: str) -> list[dict[str, Any]]:
        """The application's attempts, oldest first (id, startTime, finishedTime, diagnosticsInfo...)."""
        found = self._call(f"/apps/{app_id}/appattempts")["appAttempts"]
        return (found or {}).get("appAttempt", [])

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


def application_acls(config: YarnBackend) -> Any:
    """The application's ACLs (a ``skein.model.ACLs``), enforced: the submitting user (and the user
    it submits as) and the section's ``view_acls``/``modify_acls``, nobody else."""
    import skein

    owners = list(dict.fromkeys(user for user in (hadoop_user(), config.user) if user))
    return skein.model.ACLs(enable=True, view_users=list(dict.fromkeys([*owners, *config.view_acls])),
                            modify_users=list(dict.fromkeys([*owners, *config.modify_acls])))


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


def parse_prelaunched(value: str) -> dict[str, int]:
    return {role: int(n) for role, _, n in (item.partition("=") for item in value.split(",") if item)}


# The application of the container a script runs in: container_[e<epoch>_]<cluster ts>_<app>_<attempt>_<n>.
_APP_OF_CONTAINER = "application_$(echo \"$CONTAINER_ID\" | sed -E 's/^container_(e[0-9]+_)?([0-9]+_[0-9]+)_.*/\\2/')"


def executor_script(python: str, tls: bool = False, files: Iterable[str] = ()) -> str:
    """The container's command: paths the executor needs come from what YARN sets in it. A
    container started with the application (no incarnation in its environment yet) is named by
    skein's id for it, ``<role>_<n>``, and learns the AM's address from the job store once the AM
    has published it.

    The trainer works in ``work/`` of the container's directory, where the role's ``files`` (which
    YARN localizes beside the job's token, bundle and CA) are linked: a trainer that lists, reads or
    uploads its working directory meets its own files, not the job's token."""
    return "\n".join([
        f'export {protocol.ENV_WORK_DIR}="$PWD/{TRAINER_WORK_DIR}" {protocol.ENV_TOKEN_FILE}="$PWD/{TOKEN_NAME}"',
        f"mkdir -p {TRAINER_WORK_DIR}",
        *(f"ln -sfn \"$PWD\"/{shlex.quote(name)} {TRAINER_WORK_DIR}/{shlex.quote(name)}" for name in files),
        f'export {protocol.ENV_LOG_DIR}="${{LOG_DIRS%%,*}}"',
        f'export {protocol.ENV_EXECUTOR_HOST}="${{NM_HOST:-$(hostname -f)}}"',
        f'export {protocol.ENV_SIGTERM_IS_NOTICE}=0',  # see protocol.py: the container status tells
        *([f'export {protocol.ENV_TLS_CA_FILE}="$PWD/{CA_CERT_NAME}"'] if tls else []),
        f'if [ -z "${{{protocol.ENV_INCARNATION}:-}}" ]; then',
        f'  app="{_APP_OF_CONTAINER}"',
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
        # The application's id in the AM's environment, as its executors have it (`ps e` ties the
        # process to its job).
        f'export {protocol.ENV_APP_ID}="{_APP_OF_CONTAINER}"',
        f"exec {shlex.quote(python)} -m primus_runtime.am --backend yarn",
    ])


# --- the job's files on HDFS -------------------------------------------------------------------


class HdfsJobStore:
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
        # One RENAME that replaces the target (WebHDFS' renameoptions=OVERWRITE, HDFS' rename2): a
        # reader finds the old file or the new one, never none (status.json is read while written).
        self.fs._call("RENAME", method="put", path=tmp, destination=target, renameoptions="OVERWRITE")

    def read(self, app_id: str, name: str) -> bytes | None:
        try:
            return self.fs.cat_file(self.path(app_id, name))
        except FileNotFoundError:
            return None

    def read_json(self, app_id: str, name: str, tries: int = 3) -> dict[str, Any] | None:
        """A JSON object the AM writes; None if there is none. A file replaced while it is read comes
        short (its blocks go with the old file, and WebHDFS ends the response without an error): read
        again, the new one is whole."""
        data = b""
        for _ in range(tries):
            data = self.read(app_id, name) or b""
            if not data:
                return None
            try:
                found = json.loads(data)
            except ValueError:
                continue
            if isinstance(found, dict):
                return found
            break
        log.warning("ignoring %s: not a whole JSON object after %d reads: %r", self.path(app_id, name), tries,
                    data[:200])
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


def skein_client(login: KerberosLogin | None = None) -> Any:
    """skein's global driver when one runs (``skein driver start`` on the submitting machine
    saves the ~4 s JVM start of a driver per submit), else a driver for this submit. With a
    Kerberos login, always a driver of its own that logs in from the keytab (Java does not read
    ``KRB5_CONFIG``: it is passed on as ``java.security.krb5.conf``)."""
    import os

    import skein

    if login is not None:
        krb5 = os.environ.get("KRB5_CONFIG")
        return skein.Client(principal=login.principal, keytab=login.keytab, log=False,
                            java_options=[f"-Djava.security.krb5.conf={krb5}"] if krb5 else None)
    try:
        return skein.Client.from_global_driver()
    except skein.exceptions.DriverNotRunningError:
        return skein.Client(log=False)


def default_store_root() -> str:
    return f"/user/{hadoop_user()}/.primus"


def log_contents(body: bytes) -> bytes:
    """The file inside the NodeManager's framing (``Container: ...`` ``LogContents:`` the bytes
    ``End of LogType:...``). It frames the file by its length, so the content is cut by it too."""
    head, sep, rest = body.partition(b"\nLogContents:\n")
    if not sep:
        return body
    length = re.search(rb"\nLogLength:(\d+)", head)
    return rest[: int(length.group(1))] if length else rest.rpartition(b"\nEnd of LogType:")[0]
