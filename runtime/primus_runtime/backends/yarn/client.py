"""The YARN backend from outside: submit through skein, then find, read and kill jobs through
the ResourceManager's REST API and WebHDFS."""

from __future__ import annotations

import logging
import math
import os
import re
import secrets
import shlex
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ...bundle import build_bundle
from ...hadoop import ENV_WEBHDFS, HadoopConf, hadoop_user, hdfs_filesystem
from ...home import default_home, write_private
from ...models import JobEntry, StatusDocument
from ...spec import JobSpec, SpecError
from ...states import JOB_OUTCOMES, JobState
from ..base import ClientOptions, ClusterClient, launched_at_start, role_env
from .cluster import (
    BUNDLE_NAME,
    CA_CERT_NAME,
    CA_KEY_NAME,
    ENV_HDFS_USER,
    ENV_JOB_STORE,
    ENV_PRELAUNCHED,
    ENV_PYTHON,
    ENV_RM_WEB,
    SPEC_NAME,
    TOKEN_NAME,
    YARN_ACTIVE,
    YARN_DONE,
    HdfsJobStore,
    ResourceManager,
    am_script,
    application_acls,
    application_tags,
    container_resources,
    default_store_root,
    executor_script,
    log_contents,
    never_fits,
    skein_client,
)
from .kerberos import ENV_KEYTAB, ENV_PRINCIPAL, KEYTAB_NAME, KerberosLogin, login_from, urlopen
from .settings import YarnBackend

log = logging.getLogger("primus.yarn")

# --- from outside: submit, find, kill ----------------------------------------------------------


@dataclass
class _Endpoint:
    address: str
    token: str
    ca_file: str | None  # am.tls: the job's CA certificate, copied from the job store


class YarnClusterClient(ClusterClient):
    """Jobs on the YARN cluster of ``$HADOOP_CONF_DIR`` (or ``conf_dir``), read on first use: making
    the client touches nothing (a missing configuration is reported by the call that needs it)."""

    def __init__(self, conf_dir: str | None = None, store_root: str | None = None, home: str | None = None,
                 principal: str | None = None, keytab: str | None = None):
        self.conf_dir = conf_dir
        self.store_root = store_root or default_store_root()
        self.home = default_home(home)  # local cache of built bundles
        self._endpoints: dict[str, _Endpoint] = {}
        self._kerberos = (principal or os.environ.get(ENV_PRINCIPAL), keytab or os.environ.get(ENV_KEYTAB))

    @cached_property
    def login(self) -> KerberosLogin | None:
        """SPNEGO for every REST call when a keytab is configured (checked on first use)."""
        principal, keytab = self._kerberos
        return login_from(principal, keytab, (f"principal (${ENV_PRINCIPAL})", f"keytab (${ENV_KEYTAB})"))

    def _use_login(self, login: KerberosLogin | None) -> None:
        """A spec's own principal and keytab: the REST clients are made again with them."""
        for name in ("rm", "fs", "store"):
            self.__dict__.pop(name, None)
        self.__dict__["login"] = login

    @cached_property
    def conf(self) -> HadoopConf:
        return HadoopConf(self.conf_dir)

    @cached_property
    def rm(self) -> ResourceManager:
        return ResourceManager(self.conf.rm_web(), login=self.login)

    @cached_property
    def fs(self) -> Any:
        return hdfs_filesystem(conf=self.conf, login=self.login)

    @cached_property
    def store(self) -> HdfsJobStore:
        return HdfsJobStore(self.fs, self.store_root)

    def location(self) -> str:
        return f"YARN at {self.rm.web}"

    def default_work_preserve_root(self) -> str:
        return f"hdfs://{self.store_root}/work-preserve"

    # --- submit ---

    def submit(self, spec: JobSpec) -> str:
        import skein

        config = spec.backend
        if not isinstance(config, YarnBackend):
            raise SpecError([f"backend.type: the YARN backend cannot run a {config.type!r} job"])
        tags = application_tags(spec, config)
        if config.principal or config.keytab:
            # Checked before anything is uploaded or submitted (a KerberosError names the field).
            self._use_login(login_from(config.principal, config.keytab, ("backend.principal", "backend.keytab")))
        login = self.login
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
            # skein uploads these to the application's private staging directory.
            common = {BUNDLE_NAME: skein.File(bundle, type="file"), TOKEN_NAME: skein.File(str(token_file))}
            am_only = {SPEC_NAME: skein.File(str(spec_file))}
            kerberos_env = {}
            if login is not None:
                # The AM's REST calls (RM, NodeManagers, WebHDFS) log in from the keytab: in its
                # container only, as the CA key.
                am_only[KEYTAB_NAME] = skein.File(login.keytab)
                kerberos_env = {ENV_PRINCIPAL: login.principal, ENV_KEYTAB: KEYTAB_NAME}
            ca = _write_ca(spec, Path(tmp)) if spec.am.tls else None
            if ca is not None:
                common[CA_CERT_NAME] = skein.File(str(Path(tmp) / CA_CERT_NAME))
                am_only[CA_KEY_NAME] = skein.File(str(Path(tmp) / CA_KEY_NAME))
            services = {}
            # Under Kerberos no executor starts with the application: such a container learns the
            # AM's address from am.json on WebHDFS with ``user.name=``, which a secure NameNode
            # refuses, and executors get no keytab. The AM starts them all, their launch
            # environment carrying its address (a few seconds later than a pre-launch).
            early = {} if login else launched_at_start(spec)
            store_env = {ENV_JOB_STORE: self.store.root, ENV_WEBHDFS: self.conf.webhdfs(),
                         ENV_HDFS_USER: hadoop_user()}
            for role in spec.roles:
                files = dict(common)
                for f in role.files:
                    files[Path(f).name] = skein.File(self.fs_url(self.store.upload_once(Path(f), "files")),
                                                     type="file")
                services[role.name] = skein.Service(
                    resources=skein.Resources(**container_resources(role.resources)),
                    script=executor_script(python, tls=spec.am.tls, files=[Path(f).name for f in role.files]),
                    instances=early.get(role.name, 0), files=files,
                    env={**role_env(spec, role.name), **store_env},
                    max_restarts=0, allow_failures=True,  # the Primus AM decides about failures
                    node_label=config.node_label or "")
            master = skein.Master(
                resources=skein.Resources(memory=max(1, math.ceil(config.am_memory / 2**20)),
                                          vcores=config.am_vcores),
                script=am_script(python),
                files={**common, **am_only},
                env={**store_env, ENV_RM_WEB: self.rm.web, ENV_PYTHON: python, "HADOOP_USER_NAME": hadoop_user(),
                     ENV_PRELAUNCHED: ",".join(f"{role}={n}" for role, n in early.items()), **kerberos_env})
            app_spec = skein.ApplicationSpec(
                name=spec.name, queue=config.queue, node_label=config.node_label or "", tags=tags,
                max_attempts=spec.am_attempts, user=config.user or "", master=master, services=services,
                acls=application_acls(config))
            with skein_client(login) as client:
                app_id = client.submit(app_spec)
        # For other clients (an Airflow retry on another worker): the spec, the CA certificate,
        # and the token only its owner can read (written last: a client that finds the token
        # finds the CA of a TLS job too).
        self.store.write(app_id, SPEC_NAME, spec.to_json().encode())
        if ca is not None:
            self.store.write(app_id, CA_CERT_NAME, ca, private=True)
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
            known = self._endpoints[app_id] = _Endpoint(info["address"], token.decode().strip(),
                                                        self._cache_ca(app_id))
        return known.address, known.token

    def am_ca_file(self, app_id: str) -> str | None:
        if app_id not in self._endpoints and self.am_endpoint(app_id) is None:
            return None
        return self._endpoints[app_id].ca_file

    def _cache_ca(self, app_id: str) -> str | None:
        """The job's CA certificate from the job store, as a local file (what TLS clients load)."""
        ca = self.store.read(app_id, CA_CERT_NAME)
        if ca is None:
            return None
        cached = self.home / "ca" / f"{app_id}.crt"
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{secrets.token_hex(4)}.tmp")
        tmp.write_bytes(ca)
        os.replace(tmp, cached)
        return str(cached)

    def cli_command(self, *args: str) -> str:
        command = super().cli_command(*args)
        return f"HADOOP_CONF_DIR={shlex.quote(self.conf_dir)} {command}" if self.conf_dir else command

    def app_page_url(self, app_id: str) -> str | None:
        return f"{self.rm.web}/cluster/app/{app_id}"

    def last_status(self, app_id: str) -> dict[str, Any] | None:
        status = self.store.read_json(app_id, "status.json")
        if status is not None and not isinstance(status.get("job"), dict):
            log.warning("ignoring %s's status.json: no job in it (keys %s)", app_id, sorted(status)[:10])
            return None
        return status

    def final_status(self, app_id: str) -> dict[str, Any] | None:
        status = self.last_status(app_id)
        if status and status["job"]["state"] in JOB_OUTCOMES:
            return status
        report = self._report(app_id)
        if report["state"] not in YARN_DONE:
            return None
        # The application ended without the AM recording an outcome: YARN's word is all there is. Killed
        # through YARN, it was killed; else its last AM died (`lost`, as `primus list` says), and no
        # executor of the last snapshot is still running: YARN stopped every container of it.
        state, reason = outcome_without_am(report)
        finished = (report.get("finishedTime") or 0) / 1000 or time.time()
        if state is JobState.LOST:
            document = StatusDocument.model_validate(status) if status else StatusDocument.without_am(
                app_id, report.get("name") or app_id, JobState.LOST, reason)
            return document.lost(reason, finished_at=finished).model_dump(mode="json")
        status = status or StatusDocument.without_am(app_id, report.get("name") or app_id, state, reason
                                                     ).model_dump(mode="json")
        status["job"].update(state=state.value, reason=reason, finished_at=finished)
        return status

    def list_jobs(self, tags: dict[str, str] | None = None) -> list[JobEntry]:
        wanted = {f"{k}:{v}".lower() for k, v in (tags or {}).items()}
        out = []
        for report in self.rm.apps("primus"):
            if not wanted <= set(report.get("applicationTags", "").split(",")):
                continue
            app_id = report["id"]
            spec = self.store.read_json(app_id, SPEC_NAME) or {}
            if tags and any(spec.get("tags", {}).get(k) != v for k, v in tags.items()):
                continue  # same tag lowercased, different case: not this job
            job = (self.last_status(app_id) or {}).get("job", {})
            state, reason = job.get("state", JobState.PENDING.value), job.get("reason", "")
            if report["state"] in YARN_DONE and state not in JOB_OUTCOMES:
                state, reason = outcome_without_am(report)  # as `primus status` says it (final_status)
            finished = job.get("finished_at") or (report.get("finishedTime") or 0) / 1000 or None
            out.append(JobEntry(app_id=app_id, name=spec.get("name", report.get("name")), state=state,
                                tags=spec.get("tags", {}), reason=reason, finished_at=finished,
                                created_at=report.get("startedTime", 0) / 1000))
        return sorted(out, key=lambda j: j.created_at, reverse=True)

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

    def history_file(self, app_id: str, name: str) -> bytes | None:
        return self.store.read(app_id, name)

    def read_log(self, app_id: str, path: str, offset: int = 0) -> bytes:
        """A log file from the NodeManager that ran the container (``path`` is its REST URL)."""
        parts = urlsplit(path)
        # Container ids embed their application's: container_[e<epoch>_]<cluster ts>_<app seq>_...
        container = re.search(r"/ws/v1/node/containers/(container_[\w]+)/logs/", parts.path)
        if parts.scheme not in ("http", "https") or container is None or \
                f"_{app_id.removeprefix('application_')}_" not in container.group(1):
            raise PermissionError(f"{path} is not a log of job {app_id}")
        try:
            with urlopen(path, 10, self.login) as response:
                data = response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return b""
            raise
        return log_contents(data)[offset:]



def outcome_without_am(report: dict[str, Any]) -> tuple[JobState, str]:
    """A YARN application that ended with no outcome recorded by a Primus AM: killed through YARN,
    succeeded by YARN's word, or else ``lost`` (its last AM attempt died), with YARN's diagnostics."""
    final = report.get("finalStatus")
    diagnostics = " ".join((report.get("diagnostics") or "").split())[:500]
    if "KILLED" in (report["state"], final):
        return JobState.KILLED, f"YARN application killed: {diagnostics}"
    if final == "SUCCEEDED":
        return JobState.SUCCEEDED, f"YARN application succeeded: {diagnostics}"
    return JobState.LOST, f"the AM exited without recording an outcome: {diagnostics or 'YARN gives no diagnostics'}"


def _write_ca(spec: JobSpec, directory: Path) -> bytes:
    """Make the job's CA into ``directory`` (the key 0600); its certificate."""
    from ...tls import new_ca  # cryptography: only for jobs that use it

    ca = new_ca(spec.name)
    write_private(directory / CA_CERT_NAME, ca.cert.decode())
    write_private(directory / CA_KEY_NAME, ca.key.decode())
    return ca.cert


def cluster_client(options: ClientOptions) -> YarnClusterClient:
    return YarnClusterClient(options.hadoop_conf_dir, home=options.home, principal=options.kerberos_principal,
                             keytab=options.kerberos_keytab)
