"""The executor: one per (role, index, incarnation), started by the backend.

Standard library only (Python 3.9+), so it runs on any node or image. It

1. reserves its ports (binds them, so nobody else takes them),
2. registers with the AM, then long-polls until the start barrier opens,
3. releases the ports and launches the trainer in its own process group,
   with stdout/stderr in per-executor log files,
4. for a role that consumes input, feeds the assigned tasks into the trainer's
   stdin (``feed.py``) and reports their progress on heartbeats;
5. heartbeats; forwards a kill as SIGTERM, then SIGKILL after the grace,
   to the trainer's whole process group; rewrites the cluster file when the
   membership changes,
6. reports the trainer's exit code and exits with it.

If the AM stays unreachable past the heartbeat timeout it kills the trainer
and exits (EXIT_AM_UNREACHABLE): a dead AM leaves no orphans behind. When the job's
AM is restarted (``am.max_attempts``), it waits ``am.recovery_grace`` instead, with the
trainer untouched, looking for the new AM's address (``PRIMUS_AM_INFO_FILE`` or
``PRIMUS_AM_INFO_URL``), and carries on with it under the same incarnation. Whenever
the trainer ends, so does every process it started, even those that left its
process group or session: the executor is their subreaper, and the trainer runs
in the backend's cgroup when there is one (``proctree.py``).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import protocol
from ..api_client import AMClient, AMRejected, AMUnavailable
from .preemption import PreemptionSettings, listen_for_notice_signals
from .proctree import Cgroup, become_subreaper
from .readiness import PROBE_PERIOD, ReadinessProbe
from .trainer import Trainer, last_line, launch_error

if TYPE_CHECKING:
    from .feed import Feeder

# Imported where needed, not at start: feed.py (with the data formats) serves consuming roles only,
# urllib.request an AM address published at a URL only; every executor start (one per pod on
# Kubernetes, beside the AM) would pay for them.

# Shell convention: 126 the command cannot be executed, 127 it was not found.
CANNOT_RUN_EXIT_CODES = (126, 127)
# The longest pause between two tries to reach the AM: once it answered, and before (it is starting:
# on Kubernetes the first executors start with it, and it listens before importing its stack).
RETRY_MAX = 1.0
FIRST_CONTACT_RETRY_MAX = 0.25

log = logging.getLogger("primus.executor")


class Config:
    """What the backend tells the executor through its environment."""

    def __init__(self, env: dict[str, str]):
        def need(name: str) -> str:
            if not env.get(name):
                raise SystemExit(f"primus executor: {name} is not set (the backend sets it)")
            return env[name]

        if not env.get(protocol.ENV_AM_ADDRESS) and not env.get(protocol.ENV_AM_INFO_URL):
            raise SystemExit(f"primus executor: {protocol.ENV_AM_ADDRESS} is not set, nor "
                             f"{protocol.ENV_AM_INFO_URL} (the backend sets one)")
        self.am_address = env.get(protocol.ENV_AM_ADDRESS) or \
            wait_for_am_address(env[protocol.ENV_AM_INFO_URL], protocol.AM_INFO_PATIENCE)
        self.token_file = need(protocol.ENV_TOKEN_FILE)
        self.tls_ca_file = env.get(protocol.ENV_TLS_CA_FILE) or None
        self.role = need(protocol.ENV_ROLE)
        self.index = int(need(protocol.ENV_INDEX))
        self.incarnation = need(protocol.ENV_INCARNATION)
        self.num_ports = int(env.get(protocol.ENV_NUM_PORTS, "1"))
        self.log_dir = env.get(protocol.ENV_LOG_DIR) or os.getcwd()
        self.work_dir = env.get(protocol.ENV_WORK_DIR) or os.getcwd()
        self.heartbeat_timeout = float(env.get(protocol.ENV_HEARTBEAT_TIMEOUT, "10"))
        # How long the AM may stay unreachable before the trainer is ended (a restarted AM adopts it).
        self.am_patience = max(self.heartbeat_timeout,
                               float(env.get(protocol.ENV_AM_RECOVERY_GRACE) or self.heartbeat_timeout))
        self.am_info_file = env.get(protocol.ENV_AM_INFO_FILE) or None
        self.am_info_url = env.get(protocol.ENV_AM_INFO_URL) or None
        self.kill_grace = float(env.get(protocol.ENV_KILL_GRACE, "10"))
        self.preemption = PreemptionSettings(env, self.kill_grace)
        self.host = env.get(protocol.ENV_EXECUTOR_HOST) or socket.gethostname()
        self.gpus = [int(g) for g in env.get(protocol.ENV_GPUS, "").split(",") if g.strip()]
        cgroup = env.get(protocol.ENV_CGROUP)
        self.cgroup = Cgroup(cgroup) if cgroup and os.path.isdir(cgroup) else None
        self.log_to_console = env.get(protocol.ENV_LOG_TO_CONSOLE, "") not in ("", "0")
        self.ready_marker = env.get(protocol.ENV_READY_MARKER) or None
        self.files_dir = env.get(protocol.ENV_FILES_DIR) or None
        self.credentials_version = int(env.get(protocol.ENV_CREDENTIALS_VERSION) or 0)
        self.id = protocol.executor_id(self.role, self.index)


def wait_for_am_address(url: str, patience: float) -> str:
    """The AM's address from ``url`` (JSON ``{"address"}``), polled until the AM has published it."""
    import urllib.request

    deadline = time.monotonic() + patience
    delay = 0.1
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return str(json.loads(response.read())["address"])
        except (OSError, ValueError, KeyError) as exc:  # not there yet (404), or the store is busy
            if time.monotonic() + delay > deadline:
                raise SystemExit(f"primus executor: the AM did not publish its address within {patience:g}s "
                                 f"({url.split('?')[0]}: {exc})") from None
        time.sleep(delay)
        delay = min(delay * 1.5, 1.0)


def read_am_address(config: Config) -> str | None:
    """The AM's address as published now (a restarted AM listens elsewhere); None if unknown."""
    try:
        if config.am_info_file is not None:
            with open(config.am_info_file) as f:
                return str(json.load(f)["address"])
        if config.am_info_url is not None:
            import urllib.request

            with urllib.request.urlopen(config.am_info_url, timeout=5) as response:
                return str(json.loads(response.read())["address"])
    except (OSError, ValueError, KeyError):
        pass
    return None


def trainer_environment(own: Mapping[str, str], start: dict[str, Any]) -> dict[str, str]:
    """The trainer's environment, on every backend: the executor's ``own`` (less its ``PRIMUS_*``
    settings), then what the AM's start command gives (``am/trainer_env.py``: ``PRIMUS_*``, the
    framework's variables, the role's ``env``), then the membership's (``PRIMUS_CLUSTER``, ``TF_CONFIG``).
    The executor's own environment is what its backend started it with: on the local backend a short
    allow-list of the submitter's (``backends/local/environment.py``), on YARN and Kubernetes its
    container's (the NodeManager's or the image's, plus what the backend sets from the spec)."""
    env = {name: value for name, value in own.items()
           if not name.startswith("PRIMUS_")}  # the executor's own settings (token file...) are not the trainer's
    env.update(start["env"])
    env.update(protocol.membership_env(start["cluster"], start.get("tensorflow")))
    if sys.path[0].endswith(".zip"):
        # Run from the job bundle: trainers import primus_runtime.data.reader from the same
        # bundle, so the records they decode are framed as this executor feeds them.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [sys.path[0], env.get("PYTHONPATH")]))
    return env


def link_files(source_dir: str, work_dir: str) -> None:
    """Link every file of ``source_dir`` into ``work_dir`` (the role's ``files``), keeping what is there."""
    os.makedirs(work_dir, exist_ok=True)
    for name in os.listdir(source_dir):
        target = os.path.join(work_dir, name)
        if not name.startswith(".") and not os.path.lexists(target):
            os.symlink(os.path.join(source_dir, name), target)


def reserve_ports(count: int) -> list[socket.socket]:
    """Bind ``count`` free ports and hold them until the trainer starts."""
    held = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", 0))
        held.append(sock)
    return held


class Executor:
    def __init__(self, config: Config, client: AMClient, token: str = ""):
        self.config = config
        self.client = client
        self.token = token
        self._looked_for_am = 0.0
        self.trainer: Trainer | None = None
        self.interval = 1.0
        self.cluster_version = 0
        self.cluster_file = os.path.join(config.log_dir, "cluster.json")
        self.stop_reason: str | None = None
        self.drain_reason: str | None = None  # a preemption notice came: see _drain
        self._trainer_signalled = False  # the drain's SIGTERM reached the trainer
        self.last_contact = time.monotonic()
        self.contacted = False  # the AM answered once
        self.feeder: Feeder | None = None
        self.readiness: ReadinessProbe | None = None

    # --- the run ---

    def run(self) -> int:
        held = reserve_ports(self.config.num_ports)
        ports = [s.getsockname()[1] for s in held]
        reply = self._call(protocol.REGISTER_PATH, {
            "id": self.config.id, "role": self.config.role, "index": self.config.index,
            "incarnation": self.config.incarnation, "host": self.config.host, "ports": ports,
            "pid": os.getpid(), "gpus": self.config.gpus,
        })
        if reply is None or not reply.get("ok"):
            log.error("registration refused: %s", (reply or {}).get("reason", "AM unreachable"))
            return protocol.EXIT_AM_UNREACHABLE if reply is None else 1
        self.interval = float(reply.get("heartbeat_interval", 1.0))
        log.info("registered as %s [%s] with ports %s", self.config.id, self.config.incarnation, ports)
        start = self._wait_for_start()
        if start is None and self.drain_reason is not None and self.stop_reason is None:
            return self._finish(protocol.EXIT_PREEMPTED, f"preempted before its trainer started ({self.drain_reason})")
        if start is None:
            return self._finish(self._stop_code(), self.stop_reason or "stopped before start")
        for sock in held:
            sock.close()  # release the ports to the trainer, as late as possible
        return self._supervise(start, ports)

    def _wait_for_start(self) -> dict[str, Any] | None:
        while self.stop_reason is None and self.drain_reason is None:
            reply = self._heartbeat(protocol.REPORT_REGISTERED, wait=True)
            if reply is None:
                return None
            if reply.get("command") == protocol.CMD_START:
                return reply["start"]
        return None

    def _supervise(self, start: dict[str, Any], ports: list[int]) -> int:
        env = trainer_environment(os.environ, start)
        if protocol.TRAINER_ENV_CLUSTER not in env:
            log.info("PRIMUS_CLUSTER left out (over %d bytes): the trainer reads %s", protocol.MAX_CLUSTER_ENV,
                     protocol.TRAINER_ENV_CLUSTER_FILE)
        env[protocol.TRAINER_ENV_CLUSTER_FILE] = self.cluster_file
        self._write_cluster(start["cluster"])
        feed = start.get("feed")
        commit_file = position_file = None
        if feed is not None:
            from .feed import create_position_file

            position_file = os.path.join(self.config.log_dir, "read-position")
            create_position_file(position_file)
            env[protocol.TRAINER_ENV_READ_POSITION] = position_file
        if feed is not None and feed.get("delivery") == "exactly_once":
            commit_file = os.path.join(self.config.log_dir, "commits.jsonl")
            env[protocol.TRAINER_ENV_COMMIT_FILE] = commit_file
            if feed.get("restore_checkpoint"):
                env[protocol.TRAINER_ENV_RESTORE_CHECKPOINT] = str(feed["restore_checkpoint"])
        self.readiness = self._readiness_probe(start.get("readiness", "spawned"), ports, env)
        if self.config.files_dir is not None:
            link_files(self.config.files_dir, self.config.work_dir)
        try:
            self.trainer = Trainer.launch(start["command"], env, self.config.work_dir, self.config.log_dir,
                                          fed=feed is not None, cgroup=self.config.cgroup,
                                          to_console=self.config.log_to_console)
        except OSError as exc:
            message = launch_error(start["command"], exc)
            log.error("%s", message)
            return self._finish(protocol.EXIT_LAUNCH_FAILED, message)
        log.info("trainer pid %d started: %s", self.trainer.pid, start["command"])
        if feed is not None and self.trainer.proc.stdin is not None:
            from .feed import TRAINER_BUFFER, Feeder

            self.feeder = Feeder(self.trainer.proc.stdin, int(feed.get("max_tasks", 1)), int(feed.get("readers", 1)),
                                 reader_group=self.trainer.pid, commit_file=commit_file,
                                 position_file=position_file,
                                 trainer_buffer=int(feed.get("trainer_buffer") or TRAINER_BUFFER))
        while True:
            if self.stop_reason is None and self.drain_reason is None:
                report = self.feeder.report() if self.feeder is not None else None
                reply = self._heartbeat(protocol.REPORT_RUNNING, data=report, ready=self._ready())
                if reply is None:
                    self.trainer.stop(self.config.kill_grace)
                    return protocol.EXIT_AM_UNREACHABLE
                if reply.get("command") == protocol.CMD_CLUSTER:
                    self._write_cluster(reply["cluster"])
                if self.feeder is not None and report is not None and reply.get("command") != protocol.CMD_KILL:
                    self.feeder.reported(report, reply)
                    self._check_exit_grace(feed)
            if self.drain_reason is not None and self.stop_reason is None:
                drained = self._drain()
                if drained is not None:
                    return drained
            if self.stop_reason is not None:
                if self.feeder is not None:
                    self.feeder.stop()
                code = self.trainer.stop(self.config.kill_grace)
                self._final_report(code)
                return self._finish(code, self.stop_reason)
            exited = self._wait_trainer_or_ready(self.interval)  # returns as soon as the trainer exits
            if exited is not None and self.drain_reason is None:  # else it left on the notice: _drain
                self._final_report(exited)
                log.info("trainer exited with %d", exited)
                self.trainer.stop(self.config.kill_grace)  # what it started and left behind
                return self._finish(exited, self._exit_message(exited))

    def _final_report(self, code: int, drained: bool = False) -> None:
        """The trainer is gone: its last positions reach the AM before the exit does, so its tasks go
        back to the queue where it stopped, not where the last heartbeat saw it (at-least-once: fewer
        records fed twice), and under exactly-once with its last commits (a task must not go back at an
        older position than the one committed). A trainer that exits 0 after EOF consumed everything,
        unless it was told to leave: ``drained``, the end of a drain, whose positions the AM hands to
        other executors on this report."""
        if self.feeder is None:
            return
        report = self.feeder.report(
            everything_consumed=code == 0 and self.feeder.closed_at is not None and not drained, final=True)
        report["need_tasks"] = 0
        if drained:
            report.update(draining=self.drain_reason, drained=True)
        self._call(protocol.HEARTBEAT_PATH, {
            "id": self.config.id, "incarnation": self.config.incarnation, "state": protocol.REPORT_RUNNING,
            "cluster_version": self.cluster_version, "wait": False, **report,
        }, give_up_after=self._last_word_patience())
        self.feeder.close()

    def _drain(self) -> int | None:
        """Leave on a preemption notice: no more tasks nor records, SIGTERM to the trainer, which has the
        role's ``preemption.grace`` to checkpoint (and commit) and exit, SIGKILL after it; then the final
        positions, flagged as drained, and EXIT_PREEMPTED. None if the AM stopped the executor
        meanwhile: the stop goes on as usual."""
        assert self.trainer is not None
        log.info("draining: %s", self.drain_reason)
        if self.feeder is not None:
            self.feeder.drain()
        self._signal_trainer()
        deadline = time.monotonic() + self.config.preemption.grace
        exited = None
        while exited is None and time.monotonic() < deadline:
            report = self.feeder.report() if self.feeder is not None else None
            reply = self._heartbeat(protocol.REPORT_RUNNING, data=report,
                                    ready=self.readiness is not None and self.readiness.ready)
            if reply is None:
                self.trainer.stop(0)
                return protocol.EXIT_AM_UNREACHABLE
            if self.stop_reason is not None:
                return None
            if self.feeder is not None and report is not None:
                self.feeder.reported(report, {})  # a draining executor takes nothing, not even the input's end
            exited = self.trainer.wait(max(0.0, min(self.interval, deadline - time.monotonic())))
        if exited is None:
            log.warning("the trainer did not exit within %gs of SIGTERM (preemption.grace): killing it",
                        self.config.preemption.grace)
        code = self.trainer.stop(self.config.kill_grace if exited is not None else 0)
        self._final_report(code, drained=True)
        return self._finish(protocol.EXIT_PREEMPTED, f"preempted ({self.drain_reason}); trainer exited {code}")

    def request_drain(self, reason: str) -> None:
        """A preemption notice; also called from signal handlers, so it only sets flags and signals."""
        if self.drain_reason is not None or self.stop_reason is not None:
            return
        self.drain_reason = reason
        if self.feeder is not None:
            self.feeder.draining = True  # not one more chunk into the pipe
        self._signal_trainer()  # at once: YARN's NodeManager sends SIGKILL 250 ms after SIGTERM by default

    def _signal_trainer(self) -> None:
        if self.trainer is not None and not self._trainer_signalled:
            self._trainer_signalled = True
            self.trainer.signal(signal.SIGTERM)

    def _check_exit_grace(self, feed: dict[str, Any] | None) -> None:
        """A trainer still running ``exit_grace`` seconds after its input ended is stopped."""
        grace = (feed or {}).get("exit_grace")
        closed_at = self.feeder.closed_at if self.feeder is not None else None
        if grace is not None and closed_at is not None and time.monotonic() - closed_at > float(grace):
            self.request_stop(f"the trainer did not exit within {float(grace):g}s of the end of its input "
                              f"(input.exit_grace)")

    def _readiness_probe(self, kind: str, ports: list[int], env: dict[str, str]) -> ReadinessProbe:
        ready_file = os.path.join(self.config.log_dir, "ready")
        if kind == "file":
            if os.path.exists(ready_file):
                os.unlink(ready_file)  # left by an earlier trainer in the same directory
            env[protocol.TRAINER_ENV_READY_FILE] = ready_file
        return ReadinessProbe(kind, ports, self.config.host, ready_file)

    def _ready(self) -> bool:
        """Whether the trainer is ready; the first time it is, the backend's marker is created."""
        assert self.readiness is not None
        ready = self.readiness.check()
        marker = self.config.ready_marker
        if ready and marker is not None and not os.path.exists(marker):
            with open(marker, "w"):
                pass
        return ready

    def _wait_trainer_or_ready(self, timeout: float) -> int | None:
        """``_wait_trainer``, but while the trainer is not ready it is probed every PROBE_PERIOD and
        this returns as soon as it is, so that the AM hears of it at once, not an interval later."""
        if self.readiness is None or self.readiness.ready or self.trainer is None:
            return self._wait_trainer(timeout)
        deadline = time.monotonic() + timeout
        while True:
            exited = self.trainer.wait(min(PROBE_PERIOD, max(0.0, deadline - time.monotonic())))
            if exited is not None or self.readiness.check() or time.monotonic() >= deadline:
                return exited

    def _wait_trainer(self, timeout: float) -> int | None:
        """The trainer's exit code, or None after ``timeout``; sooner (but not before a fifth of it)
        when the feeder has room for another task, so that small tasks do not flood the AM."""
        if self.feeder is None or self.trainer is None:
            return self.trainer.wait(timeout) if self.trainer is not None else None
        start = time.monotonic()
        deadline = start + timeout
        while True:
            left = deadline - time.monotonic()
            exited = self.trainer.wait(max(0.0, min(left, 0.05)))
            if exited is not None or left <= 0:
                return exited
            if time.monotonic() - start >= timeout / 5 and self.feeder.room():
                self.feeder.wake.clear()
                return None

    def _exit_message(self, code: int) -> str:
        """What the AM records as the reason; for the shell's "cannot run the command" codes, with
        the shell's own words (the job's reason then says which command was missing)."""
        if code in CANNOT_RUN_EXIT_CODES:
            said = last_line(os.path.join(self.config.log_dir, "stderr.log"))
            if said:
                return f"trainer exited {code}: {said[:300]}"
        return f"trainer exited {code}"

    def _finish(self, code: int, message: str) -> int:
        self._call(protocol.UNREGISTER_PATH, {
            "id": self.config.id, "incarnation": self.config.incarnation,
            "exit_code": code, "message": message,
        }, give_up_after=self._last_word_patience())
        return code

    def _last_word_patience(self) -> float:
        """How long the last reports (final positions, exit code) retry: a few seconds, or the recovery
        grace when a restarted AM may be on its way (it needs them to hand the tasks on exactly)."""
        if self.config.am_patience > self.config.heartbeat_timeout:
            return self.config.am_patience
        return min(5.0, self.config.heartbeat_timeout)

    def _stop_code(self) -> int:
        return 143 if self.stop_reason else protocol.EXIT_AM_UNREACHABLE

    # --- talking to the AM ---

    def _heartbeat(self, state: str, wait: bool = False, data: dict[str, Any] | None = None,
                   ready: bool = False) -> dict[str, Any] | None:
        notice = self.config.preemption.notice()
        if notice is not None:
            self.request_drain(notice)
        body = {
            "id": self.config.id, "incarnation": self.config.incarnation, "state": state,
            "cluster_version": self.cluster_version, "wait": wait, "ready": ready,
            "credentials_version": self.config.credentials_version,
        }
        if data is not None:
            body.update(data)
        if self.drain_reason is not None:
            body["draining"] = self.drain_reason
        reply = self._call(protocol.HEARTBEAT_PATH, body)
        if reply is not None and reply.get("credentials"):
            self._take_credentials(reply["credentials"])
        if reply is not None and reply.get("command") == protocol.CMD_KILL:
            self.request_stop(str(reply.get("reason", "killed by the AM")))
        if reply is not None and reply.get("command") == protocol.CMD_DRAIN:
            self.request_drain(str(reply.get("reason") or "drain requested by the AM"))
        return reply

    def _take_credentials(self, credentials: dict[str, Any]) -> None:
        """Renewed credentials (a WebHDFS delegation token): what this process opens from now on uses
        them (the readers read the environment at each open); a stream already open goes on."""
        env = {name: str(value) for name, value in (credentials.get("env") or {}).items()
               if name in protocol.CREDENTIAL_ENV}
        os.environ.update(env)
        self.config.credentials_version = int(credentials.get("version") or 0)
        log.info("credentials renewed by the AM (version %d: %s)", self.config.credentials_version,
                 ", ".join(sorted(env)) or "none")

    def _call(self, path: str, body: dict[str, Any],
              give_up_after: float | None = None) -> dict[str, Any] | None:
        """POST to the AM, retrying until it answers or the heartbeat timeout passes
        since it last answered (or ``give_up_after`` seconds from now)."""
        if give_up_after is not None:
            deadline = time.monotonic() + give_up_after
        else:
            deadline = self.last_contact + self.config.am_patience
        delay = 0.05
        # An AM that never answered yet is starting (its socket listens soon): asked again often.
        longest = RETRY_MAX if self.contacted else FIRST_CONTACT_RETRY_MAX
        while True:
            try:
                reply = self.client.post(path, body, timeout=self._request_timeout())
                self.last_contact = time.monotonic()
                self.contacted = True
                return reply
            except AMRejected as exc:
                log.error("AM refused %s: %s", path, exc)
                return None
            except AMUnavailable as exc:
                if time.monotonic() + delay > deadline:
                    log.error("AM at %s unreachable for %.1fs (%s): giving up",
                              self.config.am_address, time.monotonic() - self.last_contact, exc)
                    return None
                time.sleep(delay)
                delay = min(delay * 2, longest)
                self._look_for_am()

    def _request_timeout(self) -> float:
        return protocol.request_timeout(self.interval, self.config.heartbeat_timeout)

    def _look_for_am(self) -> None:
        """While the AM does not answer, check at most twice a second whether it moved (a restarted AM)."""
        now = time.monotonic()
        if now - self._looked_for_am < 0.5 or (self.config.am_info_file is None and self.config.am_info_url is None):
            return
        self._looked_for_am = now
        address = read_am_address(self.config)
        if address is not None and address != self.config.am_address:
            log.info("the AM moved from %s to %s (a new AM attempt): carrying on with it",
                     self.config.am_address, address)
            self.config.am_address = address
            self.client.close()
            self.client = AMClient(address, self.token, self.config.tls_ca_file)

    def request_stop(self, reason: str) -> None:
        if self.stop_reason is None:
            log.info("stopping: %s", reason)
            self.stop_reason = reason

    def _write_cluster(self, cluster: dict[str, Any]) -> None:
        self.cluster_version = int(cluster.get("version", 0))
        tmp = self.cluster_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(cluster, f)
        os.replace(tmp, self.cluster_file)


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s executor: %(message)s")
    config = Config(dict(os.environ))
    if not become_subreaper():
        log.warning("cannot become a child subreaper: processes the trainer starts in a new session "
                    "may outlive it unless they are in the executor's cgroup")
    with open(config.token_file) as f:
        token = f.read().strip()
    executor = Executor(config, AMClient(config.am_address, token, config.tls_ca_file), token)

    def on_interrupt(signum: int, frame: Any) -> None:
        # Stop the loop; it then forwards SIGTERM (and later SIGKILL) to the trainer.
        executor.request_stop(f"received signal {signum}")
        if executor.trainer is not None:
            executor.trainer.signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_interrupt)  # unless it is a preemption notice here (below)
    signal.signal(signal.SIGINT, on_interrupt)
    listen_for_notice_signals(config.preemption, executor.request_drain)
    try:
        code = executor.run()
    finally:
        if executor.trainer is not None:
            executor.trainer.stop(0)  # never leave the trainer behind
    if config.cgroup is not None and code == protocol.EXIT_AM_UNREACHABLE:
        remove_orphaned_cgroup(config.cgroup)
    return code if 0 <= code < 256 else 1


def remove_orphaned_cgroup(cgroup: Cgroup) -> None:
    """With the AM gone, nobody else removes the cgroup it made for this executor, nor the job's
    one above it (which only the last executor to leave finds empty)."""
    cgroup.remove()
    try:
        os.rmdir(os.path.dirname(cgroup.path))
    except OSError:
        pass  # other executors are still in it, or it is gone


if __name__ == "__main__":
    sys.exit(main())

