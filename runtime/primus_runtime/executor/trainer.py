"""The trainer process: launched in its own process group, stopped as a group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def _die_with_parent() -> None:
    """In the child before exec: own process group, and SIGKILL if the executor dies."""
    os.setpgid(0, 0)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            PR_SET_PDEATHSIG = 1
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass  # best effort: the backend still kills the executor's whole session


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


class Trainer:
    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.pid = proc.pid

    @classmethod
    def launch(cls, argv: list[str], env: dict[str, str], cwd: str, log_dir: str, fed: bool = False) -> Trainer:
        """Start it; ``fed``: its stdin is a pipe (``proc.stdin``) the executor feeds, else /dev/null."""
        os.makedirs(cwd, exist_ok=True)
        with open(os.path.join(log_dir, "stdout.log"), "ab") as out, \
                open(os.path.join(log_dir, "stderr.log"), "ab") as err:
            try:
                proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.PIPE if fed else subprocess.DEVNULL, stdout=out, stderr=err,
                                        preexec_fn=_die_with_parent, close_fds=True)
            except OSError as exc:
                # Where the user looks first: the trainer's stderr, as a shell would have said it.
                err.write(f"primus: {launch_error(argv, exc)}\n".encode())
                raise
        return cls(proc)

    def wait(self, timeout: float) -> int | None:
        """The exit code once it exits (128+N for signal N), None if still running after ``timeout``."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return 128 - code if code < 0 else code

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, grace: float) -> int:
        """SIGTERM the whole process group, SIGKILL it after ``grace`` seconds; the exit code."""
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            if self.wait(grace) is None:
                self.signal(signal.SIGKILL)
        code = self.wait(5.0)
        self.signal(signal.SIGKILL)  # whatever the trainer forked and left in its group
        return code if code is not None else 137
