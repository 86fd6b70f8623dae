"""Local backend: the AM and its executors are processes on this machine.

A job lives in ``<home>/jobs/<app_id>/`` (see ``JobDir``); the AM runs
detached (its own session), so the job outlives whoever submitted it, and any
later ``status``/``kill``/``logs`` finds it by id. Executors are forked by a
fork server (``executor/forkserver.py``), each into a session of its own; a
forced stop kills that whole session, the trainer's process group included.

Processes a trainer moves to a session of their own are still ended: where cgroup v2 is
writable, each executor's trainer runs in a cgroup of the job's (``<mount>/<AM's
cgroup>/<app_id>/<incarnation>``), killed when the executor ends and removed with
the job; everywhere, the executor is its trainer's subreaper, and when the job ends the
AM kills every process whose environment carries the job's ``PRIMUS_APP_ID``.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import protocol
from ..bundle import build_bundle
from ..executor.proctree import Cgroup, cgroup2_mount, own_cgroup, signal_all
from ..spec import JobSpec, LocalBackend, Resources, SpecError
from ..states import JOB_OUTCOMES, JobState
from .base import BackendEvents, ClusterClient, ExecutorBackend, Exited, Launched, LaunchRequest

LOCAL_HOST = "127.0.0.1"
# Set (to anything but "" or "0") in the AM's environment: no cgroups, only the subreaper and the
# environment sweep (what runs where cgroup v2 is not writable; tests use it to run that path).
ENV_NO_CGROUPS = "PRIMUS_NO_CGROUPS"


def default_home(configured: str | None = None) -> Path:
    return Path(configured or os.environ.get("PRIMUS_HOME") or Path.home() / ".primus").expanduser()


class JobDir:
    """Where a local job keeps its spec, token, AM address, status and logs."""

    def __init__(self, path: Path):
        self.path = path
        self.app_id = path.name

    spec = property(lambda self: self.path / "spec.json")
    token = property(lambda self: self.path / "token")
    am_info = property(lambda self: self.path / "am.json")
    am_pid = property(lambda self: self.path / "am.pid")
    status = property(lambda self: self.path / "status.json")
    am_log = property(lambda self: self.path / "am.log")
    cgroup = property(lambda self: self.path / "cgroup")  # the job's cgroup directory, if it has one

    def executor_dir(self, role: str, index: int) -> Path:
        """The executor's logs, one ``attempt-<n>`` directory per incarnation."""
        return self.path / "executors" / protocol.executor_id(role, index)

    def work_dir(self, role: str, index: int) -> Path:
        """The trainer's working directory: ``<home>/work/<app_id>/<role>-<index>``, outside the job
        directory, so that nothing above or below it holds the token."""
        return self.path.parent.parent / "work" / self.app_id / protocol.executor_id(role, index)

    def read_json(self, path: Path) -> dict[str, Any] | None:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None


# --- the resource ledger ---------------------------------------------------------


@dataclass
class _Held:
    cpu: float
    memory: int
    gpus: list[int]


class ResourceLedger:
    """CPU, memory and GPU slots of this machine, handed to executors."""

    def __init__(self, config: LocalBackend):
        self.cpus = config.cpus or 4.0 * (os.cpu_count() or 1)
        self.memory = config.memory or _physical_memory()
        self.gpus = list(config.gpus) if config.gpus is not None else _visible_gpus()
        self._held: dict[str, _Held] = {}

    def never_fits(self, role: str, res: Resources) -> str | None:
        for what, need, have in (("cpu", res.cpu, self.cpus), ("memory", res.memory, self.memory),
                                 ("gpu", res.gpu, len(self.gpus))):
            if need > have:
                return (f"roles.{role}.resources.{what}: one executor needs {_show(what, need)} but the local "
                        f"backend has {_show(what, have)} in all (set backend.cpus/memory/gpus to change it)")
        return None

    def take(self, key: str, res: Resources) -> list[int] | None:
        """Reserve the resources; the GPU ids given, or None if they are not free now."""
        used_cpu = sum(h.cpu for h in self._held.values())
        used_mem = sum(h.memory for h in self._held.values())
        busy = {g for h in self._held.values() for g in h.gpus}
        free_gpus = [g for g in self.gpus if g not in busy]
        if used_cpu + res.cpu > self.cpus + 1e-9 or used_mem + res.memory > self.memory \
                or len(free_gpus) < res.gpu:
            return None
        self._held[key] = _Held(res.cpu, res.memory, free_gpus[: res.gpu])
        return self._held[key].gpus

    def release(self, key: str) -> None:
        self._held.pop(key, None)

    def shortage(self, res: Resources) -> str | None:
        """What is missing for one more executor with ``res`` now, e.g. "memory: needs 8Gi, 2Gi free of 16Gi"."""
        free_gpus = len(self.gpus) - sum(len(h.gpus) for h in self._held.values())
        for what, need, free, have in (
                ("cpu", res.cpu, self.cpus - sum(h.cpu for h in self._held.values()), self.cpus),
                ("memory", res.memory, self.memory - sum(h.memory for h in self._held.values()), self.memory),
                ("gpu", res.gpu, free_gpus, len(self.gpus))):
            if need > free + (1e-9 if what == "cpu" else 0):
                return f"{what}: needs {_show(what, need)}, {_show(what, max(free, 0))} free of {_show(what, have)}"
        return None


def _show(what: str, value: float) -> str:
    return f"{value / 2**20:.0f}Mi" if what == "memory" else f"{value:g}"


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 * 2**30


def _visible_gpus() -> list[int]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return [int(g) for g in visible.split(",") if g.strip().isdigit()]


# --- process helpers ----------------------------------------------------------------


def _proc_stat_fields(pid: str) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()
    except OSError:
        return None


def kill_session(sid: int, sig: int = signal.SIGKILL) -> int:
    """Signal every process of session ``sid`` (an executor and all it started)."""
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        fields = _proc_stat_fields(pid)
        if fields and fields[3] == str(sid):  # after "pid (comm)": state ppid pgrp session
            try:
                os.kill(int(pid), sig)
                count += 1
            except OSError:
                pass
    return count


def processes_of_job(app_id: str, incarnation: str | None = None) -> list[int]:
    """Pids whose environment carries PRIMUS_APP_ID=app_id (AM, executors, trainers and what they
    started), only those of one executor's ``incarnation`` if given."""
    needles = {f"{protocol.ENV_APP_ID}={app_id}".encode()}
    if incarnation is not None:
        needles.add(f"{protocol.ENV_INCARNATION}={incarnation}".encode())
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needles <= set(f.read().split(b"\0")):
                    found.append(int(pid))
        except OSError:
            pass
    return [p for p in found if p != os.getpid()]


def job_cgroup(app_id: str) -> Cgroup | None:
    """A cgroup v2 for the job's trainers, below the calling process's own cgroup; None where
    cgroup v2 is not mounted or not writable (or ``PRIMUS_NO_CGROUPS`` is set)."""
    if os.environ.get(ENV_NO_CGROUPS, "") not in ("", "0"):
        return None
    mount, own = cgroup2_mount(), own_cgroup()
    if mount is None or own is None:
        return None
    return Cgroup.create(os.path.join(mount, own.lstrip("/")), app_id)  # local app ids read primus-<time>-<random>


def pid_alive(pid: int) -> bool:
    fields = _proc_stat_fields(str(pid))
    return fields is not None and fields[0] != "Z"


# --- inside the AM -----------------------------------------------------------------------


class LocalExecutorBackend(ExecutorBackend):
    """Executors are forked by a fork server (``executor/forkserver.py``) that
    has the executor already imported: a launch costs a fork, not an interpreter."""

    def __init__(self, job: JobDir, config: LocalBackend, bundle: Path):
        self.job = job
        self.ledger = ResourceLedger(config)
        self.bundle = bundle
        self._events: BackendEvents | None = None
        self._server: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task | None = None  # held: the loop keeps only weak references
        self._forking: dict[str, Launched] = {}  # incarnation -> asked of the fork server
        self._running: dict[str, tuple[Launched, int]] = {}  # incarnation -> (launch, executor pid)
        self._waiting: list[LaunchRequest] = []  # not enough resources yet, FIFO
        self.cgroup: Cgroup | None = None  # the job's, holding one cgroup per executor incarnation

    async def start(self, events: BackendEvents) -> None:
        self._events = events
        self.cgroup = job_cgroup(self.job.app_id)
        if self.cgroup is not None:
            self.job.cgroup.write_text(self.cgroup.path)  # for a forced kill once this AM is gone
        await self._start_server()

    async def _start_server(self) -> None:
        self._server = await asyncio.create_subprocess_exec(
            # -E -S: no PYTHON* variables, no site-packages: the executor needs only the
            # standard library, and skipping site saves part of the start.
            sys.executable, "-E", "-S", str(self.bundle), "forkserver",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=str(self.job.path),
        )
        self._reader = asyncio.ensure_future(self._read_server(self._server))

    def check_fits(self, role: str, resources: Resources) -> str | None:
        return self.ledger.never_fits(role, resources)

    def pending_reason(self, incarnation: str) -> str | None:
        for position, request in enumerate(self._waiting):
            if request.incarnation == incarnation:
                short = self.ledger.shortage(request.resources)
                if short is not None:
                    return f"waits for {short}"
                first = self._waiting[0]
                return (f"waits behind {protocol.executor_id(first.role, first.index)} in the local launch queue "
                        f"(first come, first served; {position} ahead of it)")
        return None

    async def launch(self, request: LaunchRequest) -> None:
        if self._server is None or self._server.returncode is not None:
            await self._start_server()
        self._waiting.append(request)
        self._launch_waiting()

    def _launch_waiting(self) -> None:
        # Requests are only written here; the fork server's replies arrive in _read_server.
        # So a launch never waits for the one before it, nor for the AM's loop.
        while self._waiting:
            request = self._waiting[0]
            gpus = self.ledger.take(request.incarnation, request.resources)
            if gpus is None:
                return  # first come, first served: wait for resources to free up
            self._waiting.pop(0)
            try:
                self._ask_fork(request, gpus)
            except (OSError, RuntimeError) as exc:
                self.ledger.release(request.incarnation)
                self._exited(request.role, request.index, request.incarnation, None,
                             f"cannot start the executor process: {exc}")

    def _ask_fork(self, request: LaunchRequest, gpus: list[int]) -> None:
        work = self.job.work_dir(request.role, request.index)
        logs = self.job.executor_dir(request.role, request.index) / f"attempt-{request.attempt}"
        work.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        _link_files(request.files, work)
        env = dict(os.environ)
        env.update(request.env)
        env.update({
            protocol.ENV_TOKEN_FILE: str(self.job.token),
            protocol.ENV_LOG_DIR: str(logs),
            protocol.ENV_WORK_DIR: str(work),
            protocol.ENV_GPUS: ",".join(map(str, gpus)),
            protocol.ENV_EXECUTOR_HOST: LOCAL_HOST,
        })
        executor_cgroup = self._executor_cgroup(request.incarnation)
        if executor_cgroup is not None:
            env[protocol.ENV_CGROUP] = executor_cgroup.path
        if self._server is None or self._server.stdin is None or self._server.returncode is not None:
            raise RuntimeError("the executor fork server is not running")
        line = {"launch": request.incarnation, "env": env, "cwd": str(work), "log": str(logs / "executor.log")}
        self._server.stdin.write(json.dumps(line).encode() + b"\n")
        self._forking[request.incarnation] = Launched(
            request.role, request.index, request.incarnation, LOCAL_HOST, gpus,
            {name: str(logs / f"{name}.log") for name in ("executor", "stdout", "stderr")},
        )

    async def _read_server(self, server: asyncio.subprocess.Process) -> None:
        assert server.stdout is not None and self._events is not None
        async for line in server.stdout:
            message = json.loads(line)
            if "launched" in message:
                launched = self._forking.pop(message["launched"])
                self._running[launched.incarnation] = (launched, int(message["pid"]))
                self._events.on_launched(launched)
            elif "failed" in message:
                launched = self._forking.pop(message["failed"])
                self.ledger.release(launched.incarnation)
                self._exited(launched.role, launched.index, launched.incarnation, None,
                             f"cannot fork the executor: {message['error']}")
            elif "exited" in message:
                self._on_exit(message["exited"], int(message["code"]))
        for incarnation, launched in list(self._forking.items()):  # asked, never forked
            self._forking.pop(incarnation)
            self.ledger.release(incarnation)
            self._exited(launched.role, launched.index, incarnation, None, "the executor fork server exited")

    def _executor_cgroup(self, incarnation: str) -> Cgroup | None:
        return Cgroup.create(self.cgroup.path, incarnation) if self.cgroup is not None else None

    def _end_trainer_processes(self, pid: int, incarnation: str, killed: bool) -> None:
        """Whatever an executor's trainer started must not outlive the executor. An executor that
        exited by itself has ended them; one killed by a signal could not."""
        kill_session(pid)
        if self.cgroup is not None:
            Cgroup(os.path.join(self.cgroup.path, incarnation)).remove(patience=0.5)
        elif killed:
            signal_all(processes_of_job(self.job.app_id, incarnation), signal.SIGKILL)

    def _on_exit(self, incarnation: str, code: int) -> None:
        if incarnation not in self._running:
            return  # not one of ours (the fork server reaped something unexpected)
        launched, pid = self._running.pop(incarnation)
        self._end_trainer_processes(pid, incarnation, killed=code < 0)
        self.ledger.release(incarnation)
        if code < 0:
            self._exited(launched.role, launched.index, incarnation, 128 - code, f"executor killed by signal {-code}")
        else:
            self._exited(launched.role, launched.index, incarnation, code, f"executor exited {code}")
        self._launch_waiting()

    def _exited(self, role: str, index: int, incarnation: str, code: int | None, reason: str) -> None:
        assert self._events is not None
        self._events.on_exited(Exited(role, index, incarnation, code, reason))

    async def stop(self, role: str, index: int, incarnation: str, force: bool) -> None:
        if any(r.incarnation == incarnation for r in self._waiting):
            # Never started, so nothing else will report its end: withdraw it and say so now.
            self._waiting = [r for r in self._waiting if r.incarnation != incarnation]
            self._exited(role, index, incarnation, None, "withdrawn while waiting for resources")
            return
        if incarnation not in self._running:
            return
        pid = self._running[incarnation][1]
        if force:
            self._end_trainer_processes(pid, incarnation, killed=True)
        else:
            try:
                os.kill(pid, signal.SIGTERM)  # the executor forwards it to its trainer
            except ProcessLookupError:
                pass

    async def close(self) -> None:
        self._waiting.clear()
        for _, pid in self._running.values():
            kill_session(pid)
        if self._server is not None and self._server.returncode is None:
            deadline = asyncio.get_running_loop().time() + 5
            while self._running and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)  # let the exit reports arrive
            assert self._server.stdin is not None
            self._server.stdin.close()
            try:
                await asyncio.wait_for(self._server.wait(), 5)
            except asyncio.TimeoutError:
                self._server.kill()
        self._end_job_processes()

    def _end_job_processes(self) -> None:
        """The job is over: no process of it may remain, whatever session it moved to."""
        if self.cgroup is not None:
            self.cgroup.remove()
            self.job.cgroup.unlink(missing_ok=True)
        signal_all(processes_of_job(self.job.app_id), signal.SIGKILL)  # what left the cgroup's reach, or without one


def _write_private(path: Path, text: str) -> None:
    """A new file only its owner can read (the mode is set at creation, never wider)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _link_files(files: list[str], work: Path) -> None:
    for source in files:
        target = work / Path(source).name
        if not target.exists() and not target.is_symlink():
            target.symlink_to(source)


# --- from outside: submit, find, kill -----------------------------------------------------


class LocalClusterClient(ClusterClient):
    def __init__(self, home: str | Path | None = None):
        self.home = default_home(str(home) if home else None)
        self.jobs = self.home / "jobs"

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
        _write_private(job.spec, spec.to_json())
        _write_private(job.token, secrets.token_urlsafe(32))
        bundle = build_bundle(self.home / "bundles")
        env = dict(os.environ)
        env[protocol.ENV_APP_ID] = app_id
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                             env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        with open(job.am_log, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "primus_runtime.am", str(job.path), "--bundle", str(bundle)],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
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

    def executor_log(self, app_id: str, role: str, index: int, stream: str) -> str | None:
        attempts = sorted(self.job(app_id).executor_dir(role, index).glob("attempt-*"),
                          key=lambda p: int(p.name.split("-")[1]))
        return str(attempts[-1] / f"{stream}.log") if attempts else None

    def am_endpoint(self, app_id: str) -> tuple[str, str] | None:
        job = self.job(app_id)
        info = job.read_json(job.am_info)
        if info is None or not pid_alive(int(info["pid"])):
            return None
        return info["address"], job.token.read_text().strip()

    def am_pid(self, app_id: str) -> int | None:
        job = self.job(app_id)
        try:
            pid = int(job.am_pid.read_text())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def final_status(self, app_id: str) -> dict[str, Any] | None:
        job = self.job(app_id)
        status = job.read_json(job.status)
        if status and status["job"]["state"] in JOB_OUTCOMES:
            return status
        return None

    def last_status(self, app_id: str) -> dict[str, Any] | None:
        job = self.job(app_id)
        return job.read_json(job.status)

    def list_jobs(self, tags: dict[str, str] | None = None) -> list[dict[str, Any]]:
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
            if state not in JOB_OUTCOMES and self.am_pid(job.app_id) is None:
                state = JobState.LOST.value  # the AM died without recording an outcome
            out.append({"app_id": job.app_id, "name": spec["name"], "state": state,
                        "tags": spec.get("tags", {}),
                        "created_at": job.spec.stat().st_mtime})  # spec.json is written once, at submit
        return sorted(out, key=lambda j: j["created_at"], reverse=True)

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
            status = status or {"job": {"app_id": app_id}, "roles": [], "executors": [], "events": []}
            status["job"].update(state=JobState.KILLED.value, reason="force-killed: the AM did not stop the job in time",
                                 finished_at=time.time())
            job.status.write_text(json.dumps(status, indent=1))
        return len(pids)

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
