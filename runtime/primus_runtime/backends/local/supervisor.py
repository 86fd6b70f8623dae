"""The local backend's AM supervisor: restarts a dead AM, up to ``am.max_attempts`` deaths within
``am.attempt_failures_validity_interval`` (every death is noted in ``am-deaths.jsonl``).

Standard library and ``primus_runtime``'s stdlib-only modules: it lives as long as the job and stays
small. With ``am.max_attempts > 1`` the client starts the AM with ``$PRIMUS_AM_SUPERVISOR`` set, and
the AM's entry point, first thing, forks (``supervise_this_process``): the parent becomes this
supervisor, the child carries on as the first AM attempt. So supervision costs a fork, not another
interpreter's start on the way to the first executor. ``am.pid`` is the supervisor's pid.

It runs the AM as its child. When the AM ends other than by itself after the job's end (killed,
crashed, even while saving the outcome), it starts the next attempt with ``PRIMUS_AM_ATTEMPT`` and ``PRIMUS_AM_DOWN_SINCE``; that
AM reads the journal and adopts the executors still running. The supervisor is a child subreaper:
executors orphaned by the dead AM (and its fork server) become its children, and it records each
one's exit code in ``reaped.jsonl`` for the AM that watches them now. SIGTERM and SIGINT are passed
on to the AM (which stops the job) and end the supervision. Out of attempts with the job
unfinished, it writes why (``am-gave-up.txt``: the job's reason for clients) and stops what is left
of the job (SIGTERM, SIGKILL after 10 s).

If the supervisor itself dies, the AM it ran goes on, and starts a new one within a second
(``backends/local/am.py``): ``python supervisor.py JOB_DIR --bundle B --max-attempts N --watch PID
--attempt K``, run by path, which watches that AM (not its child: through a pidfd) and supervises
the attempts after it as above. What such an AM's executors exit with is then not known (they are
reaped by whoever adopts orphans above the job): they are judged by what they reported.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]  # run by path: this directory holds the backend's modules, never to be imported as top-level

import argparse  # noqa: E402
import json  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from primus_runtime import am_attempts, procfs, protocol  # noqa: E402
from primus_runtime.executor.proctree import become_subreaper  # noqa: E402
from primus_runtime.states import JOB_OUTCOMES  # noqa: E402

LEFTOVER_GRACE = 10.0
CANNOT_RUN_HERE = 2  # the AM's verdict that the job cannot run on this backend: no attempt would differ
# In the job directory: every AM death (time, attempt, how), for whichever supervisor watches the job
# (one that took over from a dead supervisor counts the deaths before it too); and, once the attempts
# are used up, why: what a client reports as the job's reason (jobs.LocalJob.gave_up).
DEATHS = "am-deaths.jsonl"
GAVE_UP = "am-gave-up.txt"


def log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} supervisor: {message}", file=sys.stderr, flush=True)


class Supervisor:
    def __init__(self, job_dir: Path, bundle: str, max_attempts: int, window: float | None = None):
        self.job_dir = job_dir
        self.bundle = bundle
        self.max_attempts = max_attempts
        self.window = window  # am.attempt_failures_validity_interval: deaths older than this do not count
        self.am_pid: int | None = None  # the AM attempt running now
        self.stopping = False

    def on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True  # the user stops the job: no further attempt
        if self.am_pid is not None:
            try:
                os.kill(self.am_pid, signum)
            except ProcessLookupError:
                pass

    def run(self, attempt: int = 1, child: int | None = None, watched: int | None = None) -> int:
        """Supervise from ``attempt`` on: the AM forked as ``child``, or ``watched`` (an AM that is not
        this process's child), or else a new one started here."""
        down_since, how = None, ""
        while True:
            if child is not None or watched is not None:
                self.am_pid = child or watched
                code = self.reap_until(child) if child is not None else self.watch(watched or 0)
                child = watched = None
            else:
                code = self.run_am(attempt, down_since, how)
            self.am_pid = None
            # 0 and 1 are the AM's own exits once the job ended; killed or crashed, even after the
            # outcome was known, the next attempt finishes what it did not (the status, the history).
            if self.stopping or (code in (0, 1) and self.has_outcome()) or code == CANNOT_RUN_HERE:
                return code
            how = f"killed by signal {-code}" if code < 0 else f"exited {code}"
            deaths, now = self.note_death(attempt, how), time.time()
            used_up = am_attempts.used_up(deaths, now, self.max_attempts, self.window)
            if used_up and self.has_outcome():
                log(f"AM attempt {attempt} {how} after recording the job's outcome; am.max_attempts "
                    f"({self.max_attempts}) used up")
                return code if code > 0 else 1
            if used_up:
                reason = am_attempts.used_up_reason(deaths, now, self.max_attempts, self.window,
                                                    f"AM attempt {attempt} {how}")
                log(f"{reason}: stopping what is left of the job")
                (self.job_dir / GAVE_UP).write_text(reason)
                self.stop_leftovers()
                return code if code > 0 else 1
            down_since = time.time()
            # LocalClusterClient.am_log_attempts cuts am.log after this line: keep its end as it is.
            log(f"AM attempt {attempt} {how} with the job unfinished: starting attempt {attempt + 1}")
            attempt += 1

    def note_death(self, attempt: int, how: str) -> list[float]:
        """Note this AM death; the times of every one so far."""
        deaths = self.job_dir / DEATHS
        with open(deaths, "a") as f:
            f.write(json.dumps({"time": time.time(), "attempt": attempt, "how": how}) + "\n")
        times = []
        for line in deaths.read_text().splitlines():
            try:
                times.append(float(json.loads(line)["time"]))
            except (ValueError, KeyError, TypeError):
                continue
        return times

    def run_am(self, attempt: int, down_since: float | None, down_cause: str = "") -> int:
        env = {name: value for name, value in os.environ.items() if name != protocol.ENV_AM_SUPERVISOR}
        env[protocol.ENV_AM_ATTEMPT] = str(attempt)
        if down_since is not None:
            env[protocol.ENV_AM_DOWN_SINCE] = repr(down_since)
            env[protocol.ENV_AM_DOWN_CAUSE] = f"AM attempt {attempt - 1} {down_cause}"
        am = subprocess.Popen(
            [sys.executable, "-m", "primus_runtime.am", "--backend", "local", str(self.job_dir), "--bundle", self.bundle],
            env=env, stdin=subprocess.DEVNULL)
        self.am_pid = am.pid
        code = self.reap_until(am.pid)
        am.returncode = code  # reaped here, not by Popen
        return code

    def watch(self, pid: int) -> int:
        """Waits for ``pid`` (not a child: its exit code is not ours to read) to end; -9 (killed)
        unless it recorded the job's outcome, which is what its own exit would have meant."""
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return 0 if self.has_outcome() else -signal.SIGKILL
        except OSError:  # a kernel without pidfds (before 5.3): look at /proc instead
            while procfs.alive(pid):
                self.reap_orphans()
                time.sleep(0.5)
            return 0 if self.has_outcome() else -signal.SIGKILL
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            while not poller.poll(1000):  # readable once the process ended
                self.reap_orphans()
        finally:
            os.close(fd)
        return 0 if self.has_outcome() else -signal.SIGKILL

    def reap_until(self, am_pid: int) -> int:
        """Reap children until the AM ends (its exit code); every other one's code goes to reaped.jsonl."""
        while True:
            pid, status = os.waitpid(-1, 0)  # retried by Python after a signal handler ran
            code = os.waitstatus_to_exitcode(status)
            if pid == am_pid:
                return code
            self.record_reaped(pid, code)

    def reap_orphans(self) -> None:
        """Records the exit of every child that ended (executors of attempts this process started)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.record_reaped(pid, os.waitstatus_to_exitcode(status))

    def record_reaped(self, pid: int, code: int) -> None:
        with open(self.job_dir / "reaped.jsonl", "a") as out:
            out.write(json.dumps({"pid": pid, "code": code, "time": time.time()}) + "\n")

    def has_outcome(self) -> bool:
        try:
            status = json.loads((self.job_dir / "status.json").read_text())
            return status["job"]["state"] in JOB_OUTCOMES
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def stop_leftovers(self) -> None:
        """SIGTERM the executors it inherited (they stop their trainers), SIGKILL what remains after a grace."""
        deadline = time.monotonic() + LEFTOVER_GRACE
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in children():
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            while children() and time.monotonic() < deadline:
                try:
                    os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                time.sleep(0.1)
            deadline = time.monotonic() + 1.0


def children() -> list[int]:
    me = os.getpid()
    return [pid for pid, found in procfs.all_stats().items() if found.ppid == me and not found.zombie]


def supervise_this_process() -> None:
    """The AM's entry point calls this first thing when ``$PRIMUS_AM_SUPERVISOR`` is set: the process
    forks; the child returns, to run as AM attempt 1, and the parent supervises it and exits with it."""
    settings = json.loads(os.environ.pop(protocol.ENV_AM_SUPERVISOR))
    child = os.fork()
    if child == 0:
        return
    window = settings.get("window")
    sys.exit(_supervise(Supervisor(Path(settings["job_dir"]), settings["bundle"], int(settings["max_attempts"]),
                                   None if window is None else float(window)), child=child))


def _supervise(supervisor: Supervisor, attempt: int = 1, child: int | None = None, watched: int | None = None) -> int:
    if not become_subreaper():
        log("cannot become a child subreaper: executors orphaned by a dead AM cannot be watched")
    signal.signal(signal.SIGTERM, supervisor.on_signal)
    signal.signal(signal.SIGINT, supervisor.on_signal)
    return supervisor.run(attempt, child=child, watched=watched)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="supervisor.py")
    parser.add_argument("job_dir", type=Path)
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--max-attempts", type=int, required=True)
    parser.add_argument("--watch", type=int, help="the pid of an AM running now (its supervisor died)")
    parser.add_argument("--attempt", type=int, default=1, help="that AM's attempt")
    parser.add_argument("--window", type=float, help="am.attempt_failures_validity_interval (seconds)")
    args = parser.parse_args(argv)
    supervisor = Supervisor(args.job_dir, args.bundle, args.max_attempts, args.window)
    return _supervise(supervisor, args.attempt, watched=args.watch)


if __name__ == "__main__":
    sys.exit(main())
