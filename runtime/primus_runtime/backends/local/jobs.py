"""A local job's directory, the machine's resource ledger, and the process helpers the local
backend's AM and client share."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import procfs, protocol
from ...executor.proctree import Cgroup, cgroup2_mount, own_cgroup
from ...spec import Resources
from .settings import LocalBackend

LOCAL_HOST = "127.0.0.1"
# Set (to anything but "" or "0") in the AM's environment: no cgroups, only the subreaper and the
# environment sweep (what runs where cgroup v2 is not writable; tests use it to run that path).
ENV_NO_CGROUPS = "PRIMUS_NO_CGROUPS"


class JobDir:
    """Where a local job keeps its spec, token, AM address, status and logs."""

    def __init__(self, path: Path):
        self.path = path
        self.app_id = path.name

    spec = property(lambda self: self.path / "spec.json")
    token = property(lambda self: self.path / "token")
    ca_cert = property(lambda self: self.path / "ca.crt")  # am.tls: the job's CA certificate
    ca_key = property(lambda self: self.path / "ca.key")  # am.tls: its key, read by the AM only
    am_info = property(lambda self: self.path / "am.json")
    am_pid = property(lambda self: self.path / "am.pid")
    status = property(lambda self: self.path / "status.json")
    am_log = property(lambda self: self.path / "am.log")
    cgroup = property(lambda self: self.path / "cgroup")  # the job's cgroup directory, if it has one
    # Exit codes of the job's processes the supervisor reaped (executors orphaned by a dead AM).
    reaped = property(lambda self: self.path / "reaped.jsonl")

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

    def hold(self, key: str, res: Resources, gpus: list[int]) -> None:
        """Record what an executor already running holds (one a restarted AM adopts)."""
        self._held[key] = _Held(res.cpu, res.memory, list(gpus))

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


def kill_session(sid: int, sig: int = signal.SIGKILL) -> int:
    """Signal every process of session ``sid`` (an executor and all it started)."""
    count = 0
    for pid, found in procfs.all_stats().items():
        if found.session == sid:
            try:
                os.kill(pid, sig)
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
    return [pid for pid in procfs.pids()
            if pid != os.getpid() and needles <= set(procfs.environ(pid) or ())]


def job_cgroup(app_id: str) -> Cgroup | None:
    """A cgroup v2 for the job's trainers, below the calling process's own cgroup; None where
    cgroup v2 is not mounted or not writable (or ``PRIMUS_NO_CGROUPS`` is set)."""
    if os.environ.get(ENV_NO_CGROUPS, "") not in ("", "0"):
        return None
    mount, own = cgroup2_mount(), own_cgroup()
    if mount is None or own is None:
        return None
    return Cgroup.create(os.path.join(mount, own.lstrip("/")), app_id)  # local app ids read primus-<time>-<random>


def executor_processes(log: Path) -> list[int]:
    """Pids of the live processes writing their stderr to ``log``: an executor, found by its own log
    (a forked executor's /proc environ is its fork server's, so its variables cannot tell)."""
    target = str(log)
    return [pid for pid in procfs.pids() if procfs.fd_target(pid, 2) == target and procfs.alive(pid)]


def reaped_exit_code(job: JobDir, pid: int) -> int | None:
    """The exit code the supervisor recorded for ``pid`` (negative: killed by that signal), if any."""
    try:
        lines = job.reaped.read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("pid") == pid:
            return int(entry["code"])
    return None


def link_files(files: list[str], work: Path) -> None:
    for source in files:
        target = work / Path(source).name
        if not target.exists() and not target.is_symlink():
            target.symlink_to(source)
