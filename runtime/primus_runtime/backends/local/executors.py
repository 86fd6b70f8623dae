"""The local backend inside the AM: executors are processes forked by the fork server."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from ... import procfs, protocol
from ...executor.proctree import Cgroup, signal_all
from ...spec import Resources
from ..base import Adoption, BackendEvents, ExecutorBackend, Exited, Launched, LaunchRequest
from .environment import executor_base_env
from .jobs import (
    LOCAL_HOST,
    JobDir,
    ResourceLedger,
    executor_processes,
    job_cgroup,
    kill_session,
    link_files,
    processes_of_job,
    reaped_exit_code,
)
from .settings import LocalBackend

log = logging.getLogger("primus.am")
# How often adopted executors (not children of this AM's fork server) are checked for an exit.
ADOPTED_POLL_SECONDS = 0.2

# --- inside the AM -----------------------------------------------------------------------


class LocalExecutorBackend(ExecutorBackend):
    """Executors are forked by a fork server (``executor/forkserver.py``) that
    has the executor already imported: a launch costs a fork, not an interpreter."""

    def __init__(self, job: JobDir, config: LocalBackend, bundle: Path):
        self.job = job
        self.ledger = ResourceLedger(config)
        self.bundle = bundle
        self.inherit_env = list(config.inherit_env)
        self._events: BackendEvents | None = None
        self._server: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task | None = None  # held: the loop keeps only weak references
        self._forking: dict[str, Launched] = {}  # incarnation -> asked of the fork server
        self._running: dict[str, tuple[Launched, int]] = {}  # incarnation -> (launch, executor pid)
        self._waiting: list[LaunchRequest] = []  # not enough resources yet, FIFO
        self._adopted: set[str] = set()  # incarnations an earlier AM attempt launched, still running
        self._watcher: asyncio.Task | None = None
        self._cleanups: set[asyncio.Future] = set()  # ended executors' processes being ended, cgroups removed
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
            # Not the submitter's secrets either: a forked executor's /proc/<pid>/environ is this
            # process's. PRIMUS_APP_ID stays: the job's end finds its executors by it.
            env={**executor_base_env(os.environ), **{name: value for name, value in os.environ.items()
                                                    if name.startswith("PRIMUS_")}},
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
        logs = self._log_dir(request.role, request.index, request.attempt)
        work.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        link_files(request.files, work)
        # Not the AM's whole environment (the submitter's: an Airflow worker's settings and secrets):
        # the executor hands its own environment, less its PRIMUS_* settings, to the trainer.
        env = executor_base_env(os.environ, self.inherit_env)
        env.update(request.env)
        env.update({
            protocol.ENV_TOKEN_FILE: str(self.job.token),
            protocol.ENV_LOG_DIR: str(logs),
            protocol.ENV_WORK_DIR: str(work),
            protocol.ENV_GPUS: ",".join(map(str, gpus)),
            protocol.ENV_EXECUTOR_HOST: LOCAL_HOST,
            protocol.ENV_AM_INFO_FILE: str(self.job.am_info),  # where a restarted AM's address appears
        })
        if self.job.ca_cert.exists():  # am.tls: executors verify the AM against the job's CA
            env[protocol.ENV_TLS_CA_FILE] = str(self.job.ca_cert)
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

    def _log_dir(self, role: str, index: int, attempt: int) -> Path:
        return self.job.executor_dir(role, index) / f"attempt-{attempt}"

    async def _read_server(self, server: asyncio.subprocess.Process) -> None:
        assert server.stdout is not None and self._events is not None
        async for line in server.stdout:
            message = json.loads(line)
            if "launched" in message:
                launched = dataclasses.replace(self._forking.pop(message["launched"]), pid=int(message["pid"]))
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

    def _clean_up_after(self, pid: int, incarnation: str, killed: bool) -> None:
        cleanup = asyncio.ensure_future(asyncio.to_thread(self._end_trainer_processes, pid, incarnation, killed))
        self._cleanups.add(cleanup)
        cleanup.add_done_callback(self._cleanups.discard)

    def _on_exit(self, incarnation: str, code: int | None) -> None:
        if incarnation not in self._running:
            return  # not one of ours (the fork server reaped something unexpected)
        launched, pid = self._running.pop(incarnation)
        # In a thread, after the AM heard of the exit: scanning /proc and waiting for the cgroup to
        # empty take milliseconds the failover (and the replacement's launch) need not wait for.
        self._clean_up_after(pid, incarnation, killed=code is None or code < 0)
        self.ledger.release(incarnation)
        if code is None:
            self._exited(launched.role, launched.index, incarnation, None,
                         "executor ended while the AM was being restarted (exit status not recorded)")
        elif code < 0:
            self._exited(launched.role, launched.index, incarnation, 128 - code, f"executor killed by signal {-code}")
        else:
            self._exited(launched.role, launched.index, incarnation, code, f"executor exited {code}")
        self._launch_waiting()

    # --- a restarted AM takes over ---

    async def adopt(self, executors: list[Adoption]) -> set[str]:
        """Executors of an earlier AM attempt still running are watched from now on (they are not
        this AM's children: their exit codes come from the supervisor that reaps them). A process of
        an incarnation whose pid was never recorded is ended: the AM launches that one again."""
        found = set()
        for adoption in executors:
            pids = executor_processes(self._log_dir(adoption.role, adoption.index, adoption.attempt) / "executor.log")
            if adoption.pid is not None and adoption.pid in pids:
                self.ledger.hold(adoption.incarnation, adoption.resources, adoption.gpus)
                launched = Launched(adoption.role, adoption.index, adoption.incarnation, LOCAL_HOST,
                                    list(adoption.gpus), adoption.logs, adoption.pid)
                self._running[adoption.incarnation] = (launched, adoption.pid)
                found.add(adoption.incarnation)
            else:
                for pid in pids:
                    kill_session(pid)
        self._adopted |= found
        if found and self._watcher is None:
            self._watcher = asyncio.ensure_future(self._watch_adopted())
        return found

    async def _watch_adopted(self) -> None:
        while self._adopted:
            await asyncio.sleep(ADOPTED_POLL_SECONDS)
            for incarnation in list(self._adopted):
                running = self._running.get(incarnation)
                if running is None:
                    self._adopted.discard(incarnation)
                elif not procfs.alive(running[1]):
                    self._adopted.discard(incarnation)
                    self._on_exit(incarnation, await self._exit_code(running[1]))
        self._watcher = None

    async def _exit_code(self, pid: int) -> int | None:
        """What the supervisor recorded when it reaped ``pid`` (it may take a moment to write it)."""
        for _ in range(10):
            code = reaped_exit_code(self.job, pid)
            if code is not None:
                return code
            await asyncio.sleep(0.1)
        return None

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
            await asyncio.to_thread(self._end_trainer_processes, pid, incarnation, True)
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
        if self._cleanups:
            await asyncio.wait(list(self._cleanups))
        self._end_job_processes()

    def _end_job_processes(self) -> None:
        """The job is over: no process of it may remain, whatever session it moved to."""
        if self.cgroup is not None:
            self.cgroup.remove()
            self.job.cgroup.unlink(missing_ok=True)
        # What left the cgroup's reach, or without one; not the supervisor this AM may run under.
        signal_all([p for p in processes_of_job(self.job.app_id) if p != os.getppid()], signal.SIGKILL)
