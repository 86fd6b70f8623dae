"""This machine's processes, read from Linux's ``/proc``: one reader for the executor, the local
backend and its supervisor.

Standard library only, not psutil: the executor runs with ``python -E -S`` (no site-packages, see
``bundle.py``) and the supervisor must start fast. Every function tolerates a process that exits
while it is read: it is left out, or reported gone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the runtime uses."""

    pid: int
    state: str  # R, S, D, Z, T...
    ppid: int
    pgrp: int
    session: int

    @property
    def zombie(self) -> bool:
        return self.state == "Z"


def pids() -> list[int]:
    """Every process's pid (none where /proc is not mounted)."""
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def stat(pid: int) -> ProcStat | None:
    """``pid``'s stat, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # After "pid (comm)", where comm may hold spaces and parentheses: state ppid pgrp session ...
            fields = f.read().rpartition(")")[2].split()
        return ProcStat(pid, fields[0], int(fields[1]), int(fields[2]), int(fields[3]))
    except (OSError, ValueError, IndexError):
        return None


def all_stats() -> dict[int, ProcStat]:
    """pid -> stat of every process, in one walk."""
    return {pid: found for pid in pids() if (found := stat(pid)) is not None}


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    found = stat(pid)
    return found is not None and not found.zombie


def environ(pid: int) -> list[bytes] | None:
    """``pid``'s environment entries (``NAME=value``) as it started, None if unreadable or gone."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return None


def fd_target(pid: int, fd: int) -> str | None:
    """What ``pid``'s file descriptor ``fd`` points at (a path, ``pipe:[N]``...), None if unreadable."""
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None


def wchan(pid: int) -> str | None:
    """The kernel function ``pid`` sleeps in (``pipe_read``...), None if unreadable."""
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return f.read()
    except OSError:
        return None
