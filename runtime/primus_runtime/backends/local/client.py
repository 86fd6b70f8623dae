"""The local backend from outside: submit, find, kill and read jobs under the Primus home."""

from __future__ import annotations

import itertools
import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ... import procfs, protocol
from ...bundle import build_bundle
from ...executor.proctree import Cgroup, signal_all
from ...home import default_home, write_private
from ...models import JobEntry, StatusDocument
from ...spec import JobSpec, SpecError
from ...states import JOB_OUTCOMES, JobState
from ..base import ClientOptions, ClusterClient
from .jobs import JobDir, ResourceLedger, processes_of_job
from .settings import LocalBackend
from .supervisor import GAVE_UP

# --- from outside: submit, find, kill -----------------------------------------------------

# Every AM attempt appends to am.log; the supervisor's line ending one and starting the next (its
# log() in supervisor.py: "... supervisor: AM attempt 1 killed by signal 9 ...: starting attempt 2").
_NEXT_AM_ATTEMPT = re.compile(rb"^[^\n]* supervisor: AM attempt \d+ [^\n]*: starting attempt \d+\n", re.MULTILINE)


class LocalClusterClient(ClusterClient):
    def __init__(self, home: str | Path | None = None):
        self.home = default_home(str(home) if home else None)
        self.jobs = self.home / "jobs"

    def cli_command(self, *args: str) -> str:
        return shlex.join(["primus", "--home", str(self.home), *args])

    def location(self) -> str:
        return str(self.jobs)

    def default_work_preserve_root(self) -> str:
        return str(self.home / "work-preserve")

    def job(self, app_id: str) -> JobDir:
        path = self.jobs / app_id
        if "/" in app_id or not (path / "spec.json").exists():
            raise KeyError(app_id)
        return JobDir(path)

    def submit(self, spec: JobSpec) -> str:
        config = spec.backend
        if not isinstance(config, LocalBackend):
            raise SpecError([f"backend.type: the local backend cannot run a {config.type!r} job"])
        ledger = ResourceLedger(config)
        problems = [why for role in spec.roles if (why := ledger.never_fits(role.name, role.resources))]
        problems += [f"roles.{role.name}.files: {f} does not exist" for role in spec.roles
                     for f in role.files if not Path(f).exists()]
        if problems:
            raise SpecError(problems)
        app_id = f"primus-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        job = JobDir(self.jobs / app_id)
        self.jobs.mkdir(parents=True, exist_ok=True)
        job.path.mkdir(0o700)  # the token, and the spec with the roles' env: the owner's only
        write_private(job.spec, spec.to_json())
        write_private(job.token, secrets.token_urlsafe(32))
        if spec.am.tls:
            from ...tls import new_ca  # cryptography: only for jobs that use it

            ca = new_ca(spec.name)
            write_private(job.ca_cert, ca.cert.decode())
            write_private(job.ca_key, ca.key.decode())
        bundle = build_bundle(self.home / "bundles")
        env = dict(os.environ)
        env[protocol.ENV_APP_ID] = app_id
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                             env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        if spec.am_attempts > 1:  # the AM's process forks a supervisor that restarts the AM (supervisor.py)
            env[protocol.ENV_AM_SUPERVISOR] = json.dumps({"job_dir": str(job.path), "bundle": str(bundle),
                                                          "max_attempts": spec.am_attempts,
                                                          "window": spec.am.attempt_failures_validity_interval,
                                                          "module": str(Path(__file__).with_name("supervisor.py"))})
        command = [sys.executable, "-m", "primus_runtime.am", "--backend", "local", str(job.path),
                   "--bundle", str(bundle)]
        with open(job.am_log, "ab") as log:
            proc = subprocess.Popen(
                command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # detached: the job outlives the submitting process
            )
        job.am_pid.write_text(str(proc.pid))
        return app_id

    def exists(self, app_id: str) -> bool:
        try:
            self.job(app_id)
        except KeyError:
            return False
        return True

    def spec(self, app_id: str) -> JobSpec:
        return JobSpec.model_validate_json(self.job(app_id).spec.read_text())

    def am_alive(self, app_id: str) -> bool:
        return self.am_pid(app_id) is not None

    def am_log(self, app_id: str) -> str:
        return str(self.job(app_id).am_log)

    def am_log_attempts(self, app_id: str) -> list[bytes] | None:
        """am.log cut after each of the supervisor's lines that start another attempt (each part ends
        with the line saying how its attempt ended)."""
        try:
            data = self.job(app_id).am_log.read_bytes()
        except FileNotFoundError:
            return [b""]
        cuts = [0, *(match.end() for match in _NEXT_AM_ATTEMPT.finditer(data)), len(data)]
        return [data[start:end] for start, end in itertools.pairwise(cuts)]

    def executor_log(self, app_id: str, role: str, index: int, stream: str) -> str | None:
        attempts = sorted(self.job(app_id).executor_dir(role, index).glob("attempt-*"),
                          key=lambda p: int(p.name.split("-")[1]))
        return str(attempts[-1] / f"{stream}.log") if attempts else None

    def am_endpoint(self, app_id: str) -> tuple[str, str] | None:
        job = self.job(app_id)
        info = job.read_json(job.am_info)
        if info is None or not procfs.alive(int(info["pid"])):
            return None
        return info["address"], job.token.read_text().strip()

    def am_ca_file(self, app_id: str) -> str | None:
        job = self.job(app_id)
        return str(job.ca_cert) if job.ca_cert.exists() else None

    def am_pid(self, app_id: str) -> int | None:
        """The pid in ``am.pid`` (the AM, or its supervisor) while it lives, else the AM's own while it
        lives (a supervisor that died leaves its AM running, which starts a new one within a second):
        None when neither does, the job is over or lost."""
        job = self.job(app_id)
        try:
            pid = int(job.am_pid.read_text())
        except (OSError, ValueError):
            return None
        if procfs.alive(pid):
            return pid
        info = job.read_json(job.am_info) or {}
        am = info.get("pid")
        return am if isinstance(am, int) and am != pid and procfs.alive(am) else None

    def final_status(self, app_id: str) -> dict[str, Any] | None:
        job = self.job(app_id)
        status = job.read_json(job.status)
        if status and status["job"]["state"] in JOB_OUTCOMES:
            return status
        return None

    def last_status(self, app_id: str) -> dict[str, Any] | None:
        job = self.job(app_id)
        return job.read_json(job.status)

    def am_gone_reason(self, app_id: str) -> str | None:
        try:
            return (self.job(app_id).path / GAVE_UP).read_text().strip() or None
        except OSError:
            return None

    def list_jobs(self, tags: dict[str, str] | None = None) -> list[JobEntry]:
        if not self.jobs.exists():
            return []
        out = []
        for path in self.jobs.iterdir():
            job = JobDir(path)
            spec = job.read_json(job.spec)
            if spec is None:
                continue
            if tags and any(spec.get("tags", {}).get(k) != v for k, v in tags.items()):
                continue
            status = job.read_json(job.status) or {}
            state = status.get("job", {}).get("state", "pending")
            reason = status.get("job", {}).get("reason", "")
            if state not in JOB_OUTCOMES and self.am_pid(job.app_id) is None:
                state = JobState.LOST.value  # the AM died without recording an outcome
                reason = self.am_gone_reason(job.app_id) or "the AM exited without recording an outcome"
            out.append(JobEntry(app_id=job.app_id, name=spec["name"], state=state, tags=spec.get("tags", {}),
                                reason=reason,
                                finished_at=status.get("job", {}).get("finished_at"),
                                created_at=job.spec.stat().st_mtime))  # spec.json is written once, at submit
        return sorted(out, key=lambda j: j.created_at, reverse=True)

    def force_kill(self, app_id: str) -> int:
        job = self.job(app_id)
        pids = processes_of_job(app_id)
        signal_all(pids, signal.SIGKILL)
        try:
            path = job.cgroup.read_text().strip()
            if Path(path).name == app_id:  # never some other cgroup the file may name
                Cgroup(path).remove()
            job.cgroup.unlink()
        except OSError:
            pass  # the job has no cgroup (left), or its AM removed it
        status = job.read_json(job.status)
        if status is None or status["job"]["state"] not in JOB_OUTCOMES:
            reason = "force-killed: the AM did not stop the job in time"
            if status is None:  # the AM wrote none: the job's name from its spec
                name = (job.read_json(job.spec) or {}).get("name") or app_id
                status = StatusDocument.without_am(app_id, name, JobState.KILLED, reason).model_dump(mode="json")
            status["job"].update(state=JobState.KILLED.value, reason=reason, finished_at=time.time())
            job.status.write_text(json.dumps(status, indent=1))
        return len(pids)

    def history_file(self, app_id: str, name: str) -> bytes | None:
        try:
            return (self.job(app_id).path / name).read_bytes()
        except FileNotFoundError:
            return None

    def read_log(self, app_id: str, path: str, offset: int = 0) -> bytes:
        job = self.job(app_id)
        target = Path(path).resolve()
        if job.path.resolve() not in target.parents:
            raise PermissionError(f"{path} is not a log of job {app_id}")
        try:
            with open(target, "rb") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            return b""


def cluster_client(options: ClientOptions) -> LocalClusterClient:
    return LocalClusterClient(options.home)
