"""Every process a trainer started, including those that left its process group and session.

Standard library only. A trainer's process group is not a container: anything it starts
with ``setsid`` (``start_new_session=True``, daemons, some launchers) leaves the group and
survives a ``killpg``. Two ways to find such processes (Linux):

- a cgroup v2 (``Cgroup``), when the backend made one for the executor: the trainer joins
  it before ``exec`` and nothing it starts can leave it without privileges; ``cgroup.kill``
  ends them all at once.
- the executor as a child subreaper (``become_subreaper``): a descendant whose parent dies
  is reparented to the executor instead of init, so ``descendants(executor pid)`` still
  finds it. This needs no privilege and works on any backend (YARN containers included).
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import time
from typing import Any

from .. import procfs

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

_prctl: Any = None  # libc's prctl once loaded (ctypes), False where there is none


def prctl(option: int, value: int) -> bool:
    """``prctl(option, value)`` (Linux); whether it worked. The first call loads ctypes and libc
    (a few ms): the fork server makes it before forking, so executors and trainers start warm."""
    global _prctl
    if _prctl is None:
        _prctl = _load_prctl()
    return bool(_prctl) and _prctl(option, value, 0, 0, 0) == 0


def _load_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Make orphaned descendants of this process its children (Linux); whether it worked."""
    return prctl(PR_SET_CHILD_SUBREAPER, 1)


def descendants(root: int) -> tuple[list[int], list[int]]:
    """The live descendants of ``root`` and its zombie children (to reap), from /proc."""
    children: dict[int, list[int]] = {}
    processes = procfs.all_stats()
    for pid, found in processes.items():
        children.setdefault(found.ppid, []).append(pid)
    alive, zombies, todo = [], [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if processes[pid].zombie:
            if processes[pid].ppid == root:
                zombies.append(pid)
        else:
            alive.append(pid)
        todo.extend(children.get(pid, []))
    return alive, zombies


def reap(pids: list[int]) -> None:
    """Collect the exit status of these children of ours (never the trainer: Popen waits for it)."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def cgroup2_mount() -> str | None:
    """Where the cgroup v2 hierarchy is mounted (from /proc/mounts), None if it is not."""
    try:
        with open("/proc/mounts") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 2 and fields[2] == "cgroup2":
                    return fields[1]
    except OSError:
        pass
    return None


def own_cgroup() -> str | None:
    """This process's cgroup v2 path (relative to the mount), None without cgroup v2."""
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


class Cgroup:
    """A cgroup v2 directory: the processes in it and in its child cgroups."""

    def __init__(self, path: str):
        self.path = path

    @classmethod
    def create(cls, parent: str, name: str) -> Cgroup | None:
        """A new cgroup ``name`` under the directory ``parent``; None where that is not allowed."""
        path = os.path.join(parent, name)
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
        except OSError:
            return None
        return cls(path)

    def join(self) -> None:
        """Move the calling process into this cgroup (``0`` is the writer itself)."""
        fd = os.open(os.path.join(self.path, "cgroup.procs"), os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)

    def pids(self) -> list[int]:
        found = []
        for directory, _, _ in os.walk(self.path):
            try:
                with open(os.path.join(directory, "cgroup.procs")) as f:
                    found += [int(line) for line in f if line.strip()]
            except OSError:
                pass  # removed meanwhile
        return found

    def kill(self) -> None:
        """SIGKILL every process in it, atomically where the kernel has ``cgroup.kill`` (5.14+)."""
        try:
            with open(os.path.join(self.path, "cgroup.kill"), "w") as f:
                f.write("1")
            return
        except OSError:
            pass
        for _ in range(100):  # an older kernel: processes may fork while we kill, so repeat
            pids = self.pids()
            if not pids:
                return
            signal_all(pids, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self, patience: float = 5.0) -> bool:
        """Kill what is left in it and delete it (child cgroups first); whether it is gone."""
        self.kill()
        deadline = time.monotonic() + patience
        while True:
            try:
                for directory in sorted((d for d, _, _ in os.walk(self.path)), key=len, reverse=True):
                    try:
                        os.rmdir(directory)
                    except FileNotFoundError:
                        pass
                return True
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    return False
            time.sleep(0.02)  # killed processes leave the cgroup as they exit
