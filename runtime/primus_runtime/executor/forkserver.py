"""Executor fork server for the local backend (standard library only).

Starting an executor as a fresh interpreter costs ~50 ms of CPU (interpreter
start plus imports), paid again by every executor and every restart. The fork
server pays it once: it imports the executor, then forks a ready copy per
launch. It speaks JSON lines on stdin/stdout with the AM:

    AM -> server   {"launch": key, "env": {...}, "cwd": dir, "log": file}
    server -> AM   {"launched": key, "pid": pid}  or  {"failed": key, "error": text}
                   {"exited": key, "code": exit code (negative: killed by signal)}

It exits when the AM closes its stdin; executors already forked carry on and
end by themselves once the AM is unreachable, as always.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
from typing import Any

from . import main as executor_main
from .proctree import PR_SET_CHILD_SUBREAPER, prctl


def _warm_up() -> None:
    """Do once here what every executor would do at start: load libc's prctl through ctypes (the
    executor becomes a subreaper, its trainer asks for PDEATHSIG) and the IDNA codec (the first
    connect encodes the AM's host name with it). A few ms each, paid before forking, not by each
    launch or restart."""
    prctl(PR_SET_CHILD_SUBREAPER, 0)  # loads libc; the server itself stays what it was
    "localhost".encode("idna")


def _run_executor(request: dict[str, Any], inherited: list) -> None:
    """In the forked child: become a fresh executor process, never return."""
    code = 1
    try:
        os.setsid()  # its own session, as the spawning backend gives it
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in inherited:
            os.close(fd)
        log_fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null_fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        os.close(null_fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        code = executor_main.main()
    except BaseException as exc:  # noqa: BLE001 - report anything, then exit
        print(f"primus executor crashed: {exc!r}", file=sys.stderr)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 1)


def serve() -> int:
    _warm_up()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)  # SIGCHLD wakes the select below at once
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    keys: dict[int, str] = {}
    out = sys.stdout
    buffer = b""

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    while True:
        readable, _, _ = select.select([0, wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
        while keys:  # reap every executor that ended
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            send({"exited": keys.pop(pid, "?"), "code": os.waitstatus_to_exitcode(status)})
        if 0 not in readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return 0  # the AM is gone
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            request = json.loads(line)
            try:
                pid = os.fork()
            except OSError as exc:
                send({"failed": request["launch"], "error": str(exc)})
                continue
            if pid == 0:
                _run_executor(request, [wake_r, wake_w])
            keys[pid] = request["launch"]
            send({"launched": request["launch"], "pid": pid})


if __name__ == "__main__":
    sys.exit(serve())
