"""The trainer process: launched in its own process group (and in the executor's cgroup when
there is one), stopped with everything it started, inside its group or not (``proctree``)."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from .proctree import PR_SET_PDEATHSIG, Cgroup, descendants, prctl, reap, signal_all


def _die_with_parent(cgroup: Cgroup | None) -> None:
    """In the child before exec: own process group, the cgroup, and SIGKILL if the executor dies."""
    os.setpgid(0, 0)
    if cgroup is not None:
        try:
            cgroup.join()
        except OSError:
            pass  # the executor still finds the trainer's processes as its descendants
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # best effort: the backend still kills the executor's session


def launch_error(argv: list[str], exc: OSError) -> str:
    return f"cannot launch {argv[0]!r}: {exc}"


def last_line(path: str, limit: int = 4096) -> str:
    """The last non-empty line of the file ``path`` (its last ``limit`` bytes), "" if none."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


# Seconds the copy of a trainer's output may take to catch up once it exited.
COPY_PATIENCE = 1.0


def _copy(source: Any, log_path: str, console_fd: int) -> None:
    """Copy the trainer's output, as it comes, to its log file and the executor's own stream, until
    every process holding the pipe closed it."""
    with source, open(log_path, "ab", buffering=0) as log:
        while True:
            chunk = os.read(source.fileno(), 65536)
            if not chunk:
                return
            log.write(chunk)
            try:
                while chunk:
                    chunk = chunk[os.write(console_fd, chunk):]
            except OSError:
                pass  # nobody reads the console any more: the file still has everything


class Trainer:
    def __init__(self, proc: subprocess.Popen, cgroup: Cgroup | None = None,
                 copiers: list[threading.Thread] | None = None):
        self.proc = proc
        self.pid = proc.pid
        self.cgroup = cgroup
        self.copiers = copiers or []  # threads copying its output (to_console)

    @classmethod
    def launch(cls, argv: list[str], env: dict[str, str], cwd: str, log_dir: str, fed: bool = False,
               cgroup: Cgroup | None = None, to_console: bool = False) -> Trainer:
        """Start it; ``fed``: its stdin is a pipe (``proc.stdin``) the executor feeds, else /dev/null;
        ``to_console``: its output also goes to the executor's stdout/stderr (a container's log)."""
        os.makedirs(cwd, exist_ok=True)
        with open(os.path.join(log_dir, "stdout.log"), "ab") as out, \
                open(os.path.join(log_dir, "stderr.log"), "ab") as err:
            pipe = subprocess.PIPE if to_console else None
            try:
                proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.PIPE if fed else subprocess.DEVNULL,
                                        stdout=pipe or out, stderr=pipe or err,
                                        preexec_fn=functools.partial(_die_with_parent, cgroup), close_fds=True)
            except OSError as exc:
                # Where the user looks first: the trainer's stderr, as a shell would have said it.
                err.write(f"primus: {launch_error(argv, exc)}\n".encode())
                if to_console:
                    sys.stderr.write(f"primus: {launch_error(argv, exc)}\n")
                raise
            copiers = []
            if to_console:
                assert proc.stdout is not None and proc.stderr is not None
                for source, log_name, console in ((proc.stdout, "stdout.log", sys.stdout),
                                                  (proc.stderr, "stderr.log", sys.stderr)):
                    copier = threading.Thread(target=_copy, name=f"copy-{log_name}", daemon=True,
                                              args=(source, os.path.join(log_dir, log_name), console.fileno()))
                    copier.start()
                    copiers.append(copier)
        return cls(proc, cgroup, copiers)

    def wait(self, timeout: float) -> int | None:
        """The exit code once it exits (128+N for signal N), None if still running after ``timeout``."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        # Its last words are in the log files before anyone reads them for the exit reason (not
        # longer, and once: processes it left behind may still hold the pipes).
        deadline = time.monotonic() + COPY_PATIENCE
        for copier in self.copiers:
            copier.join(max(0.0, deadline - time.monotonic()))
        self.copiers = []
        return 128 - code if code < 0 else code

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def leftovers(self) -> list[int]:
        """Live processes the trainer started (and the trainer): the executor's descendants (it is
        their subreaper, so setsid escapes whose parent died are among them) and its cgroup's."""
        alive, zombies = descendants(os.getpid())
        reap([pid for pid in zombies if pid != self.pid])
        in_cgroup = self.cgroup.pids() if self.cgroup is not None else []
        return sorted(set(alive) | set(in_cgroup))

    def _signal_everything(self, sig: int) -> None:
        self.signal(sig)
        if sig == signal.SIGKILL and self.cgroup is not None:
            self.cgroup.kill()
        signal_all(self.leftovers(), sig)

    def stop(self, grace: float) -> int:
        """End the trainer and every process it started: SIGTERM, SIGKILL after ``grace`` seconds
        to whatever is left; the trainer's exit code (it may have exited by itself before)."""
        if self.leftovers():
            self._signal_everything(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and (self.proc.poll() is None or self.leftovers()):
                time.sleep(0.05)
        code = None
        for _ in range(100):  # processes may fork while they are being killed: until none is left
            self._signal_everything(signal.SIGKILL)
            code = self.wait(0.05) if code is None else code
            if code is not None and not self.leftovers():
                break
        if code is None:
            code = self.wait(5.0)
        return code if code is not None else 137
