"""The YARN backend inside the AM: a skein container per executor, its end mapped to the
failover engine's events."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import urllib.error
import urllib.request
from typing import Any

from ... import protocol
from ...hadoop import ENV_WEBHDFS_DELEGATION, hadoop_user
from ...spec import Resources
from ..base import Adoption, BackendEvents, ExecutorBackend, Exited, Launched, LaunchRequest, slice_log
from .cluster import ResourceManager, container_resources, log_contents, never_fits
from .kerberos import DelegationTokens, KerberosLogin, urlopen

log = logging.getLogger("primus.yarn")

# --- inside the AM -------------------------------------------------------------------------


def exit_code_of(message: str) -> int | None:
    match = re.search(r"[Ee]xit (?:code|status):? (-?\d+)", message)
    return int(match.group(1)) if match else None


#: ContainerExitStatus.INVALID: the NodeManager has no exit status (yet) for the container.
_NO_EXIT_STATUS = -1000


def node_exit_report(node_http: str, container_id: str, timeout: float = 5.0,
                     login: KerberosLogin | None = None) -> tuple[int | None, str] | None:
    """(exit status, diagnostics) of a container from its NodeManager's REST API, or None once the
    NodeManager has forgotten it (a few seconds after the ResourceManager passed its end to the AM).

    skein replaces both by "Container failed during execution" for every positive exit status, so
    a container YARN killed from outside (``yarn container -signal``: exit 137, "Killed by external
    signal") would otherwise end without its exit code or why."""
    url = f"http://{node_http}/ws/v1/node/containers/{container_id}"
    url += "" if login else f"?user.name={hadoop_user()}"
    try:
        with urlopen(url, timeout, login) as response:
            info = json.loads(response.read())["container"]
    except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
        log.info("no exit status of %s from its NodeManager %s: %s", container_id, node_http, exc)
        return None
    code = info.get("exitCode")
    # Each diagnostics line starts with its time ("[2026-12-03 09:27:34.763]"): noise in a reason.
    diagnostics = re.sub(r"\[\d{4}-\d\d-\d\d [\d:.]+\]", " ", info.get("diagnostics") or "")
    return (code if isinstance(code, int) and code != _NO_EXIT_STATUS else None), " ".join(diagnostics.split())


def exited_from(state: str, message: str,
                node_report: tuple[int | None, str] | None = None) -> tuple[int | None, str, bool]:
    """(exit code, reason, preempted) of a container YARN reports as ended; ``node_report`` is its
    NodeManager's exit status and diagnostics when known (see node_exit_report)."""
    text = " ".join(message.split())
    if state == "SUCCEEDED":
        return 0, "container exited 0", False
    code = exit_code_of(text)
    if node_report is not None:
        code = node_report[0] if node_report[0] is not None else code
        text = node_report[1] or text
    preempted = "preempt" in text.lower()
    if preempted:
        return code, f"container preempted by YARN: {text[:300]}", True
    if re.search(r"lost\W*node|node\W*lost", text.lower()):  # "Container released on a *lost* node"
        return None, f"container lost with its node: {text[:300]}", False
    if state == "KILLED":
        return code, f"container killed: {text[:300] or 'by the AM'}", False
    return code, f"container failed{f' (exit {code})' if code is not None else ''}: {text[:300]}", False


class YarnExecutorBackend(ExecutorBackend):
    """Executors are containers of the skein services of their roles (one service per role)."""

    executors_outlive_am = False  # skein keeps no container across application attempts

    def __init__(self, app: Any, rm: ResourceManager | None = None, poll: float = 0.5,
                 prelaunched: dict[str, int] | None = None, webhdfs: str | None = None):
        self.app = app  # skein.ApplicationClient of this application
        self.rm = rm
        self.webhdfs = webhdfs  # http://namenode:port, for executors' delegation tokens (Kerberos)
        # Kerberos: the executors' WebHDFS delegation token, renewed and replaced for the life of the job.
        self.tokens = DelegationTokens(webhdfs, rm.login) if rm is not None and rm.login is not None and webhdfs \
            else None
        self.poll = poll
        # Containers started with the application, not yet given to an executor: (role, index).
        self._unclaimed = {(role, i) for role, n in (prelaunched or {}).items() for i in range(n)}
        self._events: BackendEvents | None = None
        self._nodes: list[dict[str, int]] = []
        self._containers: dict[str, LaunchRequest] = {}  # skein container id -> request
        self._running: set[str] = set()
        self._by_incarnation: dict[str, str] = {}
        self._watcher: asyncio.Task | None = None

    async def start(self, events: BackendEvents) -> None:
        self._events = events
        if self.rm is not None:
            try:
                self._nodes = await asyncio.to_thread(self.rm.node_capacities)
            except (ConnectionError, RuntimeError) as exc:
                log.warning("cannot read the cluster's node sizes, not checking them: %s", exc)
        self._watcher = asyncio.ensure_future(self._watch())

    def check_fits(self, role: str, resources: Resources) -> str | None:
        return never_fits(role, resources, self._nodes) if self._nodes else None

    def incarnation_for(self, role: str, index: int) -> str | None:
        if (role, index) not in self._unclaimed:
            return None
        self._unclaimed.discard((role, index))
        return f"{role}_{index}"  # skein's id of the container, which the executor takes as its name

    async def adopt(self, executors: list[Adoption]) -> set[str]:
        """A new application attempt: skein's application master keeps no container of the attempt
        before (YARN stopped them with it), so none is adopted. The containers skein started with this
        attempt for the roles launched with the application belong to no executor of the journal (the
        replacements get containers of their own): they are stopped."""
        for role, index in sorted(self._unclaimed):
            try:
                await asyncio.to_thread(self.app.kill_container, f"{role}_{index}")
            except Exception as exc:  # noqa: BLE001 - it may not have started yet, or ended
                log.info("stopping container %s_%d of the new attempt: %s", role, index, exc)
        self._unclaimed.clear()
        return set()

    def pending_reason(self, incarnation: str) -> str | None:
        container_id = self._by_incarnation.get(incarnation)
        if container_id is None or container_id in self._running:
            return None
        ask = container_resources(self._containers[container_id].resources)
        gpus = f", {ask['gpus']} GPUs" if ask["gpus"] else ""
        return (f"waits for YARN container {container_id} ({ask['vcores']} vcores, {ask['memory']}Mi{gpus}): "
                f"requested, not running yet")

    async def launch(self, request: LaunchRequest) -> None:
        if request.incarnation == f"{request.role}_{request.index}":  # started with the application
            self._containers[request.incarnation] = request
            self._by_incarnation[request.incarnation] = request.incarnation
            return
        env = dict(request.env)
        if self.tokens is not None:
            # Kerberos: executors get no keytab; they read HDFS input with a delegation token.
            env[ENV_WEBHDFS_DELEGATION] = await asyncio.to_thread(self.tokens.current)
            env[protocol.ENV_CREDENTIALS_VERSION] = str(self.tokens.version)
        container = await asyncio.to_thread(self.app.add_container, request.role, env)
        self._containers[container.id] = request
        self._by_incarnation[request.incarnation] = container.id
        log.info("%s: asked YARN for container %s", protocol.executor_id(request.role, request.index), container.id)

    @property
    def credentials_version(self) -> int:  # type: ignore[override]
        return self.tokens.version if self.tokens is not None else 0

    def credentials(self) -> dict[str, str]:
        if self.tokens is None or self.tokens.token is None:
            return {}
        return {ENV_WEBHDFS_DELEGATION: self.tokens.token}

    async def _keep_tokens(self) -> None:
        """Renew the executors' delegation token before it expires, a new one before its max lifetime."""
        if self.tokens is not None and self.tokens.due():
            await asyncio.to_thread(self.tokens.refresh)

    async def stop(self, role: str, index: int, incarnation: str, force: bool) -> None:
        container_id = self._by_incarnation.get(incarnation)
        if container_id is None:
            return
        # A running executor was told to stop on its heartbeat and exits by itself; one still
        # waiting for a container cannot hear it, so it is withdrawn at once.
        if force or container_id not in self._running:
            try:
                await asyncio.to_thread(self.app.kill_container, container_id)
            except Exception as exc:  # noqa: BLE001 - the container may have ended meanwhile
                log.info("kill %s: %s", container_id, exc)

    async def read_log(self, path: str, offset: int, limit: int) -> tuple[bytes, int | None]:
        """From the NodeManager's REST API (``path`` is its URL), which serves a log only whole."""
        def fetch() -> bytes:
            try:
                with urlopen(path, 10, self.rm.login if self.rm else None) as response:
                    return log_contents(response.read())
            except urllib.error.HTTPError as exc:
                if exc.code == 404:  # not written yet, or the container is gone
                    return b""
                raise
        return slice_log(await asyncio.to_thread(fetch), offset, limit)

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        for container_id in list(self._containers):
            try:
                await asyncio.to_thread(self.app.kill_container, container_id)
            except Exception:  # noqa: BLE001,S110 - already ended
                pass

    async def _watch(self) -> None:
        while True:
            try:
                containers = await asyncio.to_thread(
                    self.app.get_containers, None, ["RUNNING", "SUCCEEDED", "FAILED", "KILLED"])
                reports = await asyncio.to_thread(self._node_reports, containers)
                self._update(containers, reports)
                await self._keep_tokens()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - keep watching; skein calls can fail transiently
                log.exception("reading container states from skein failed")
            await asyncio.sleep(self.poll)

    def _node_reports(self, containers: list[Any]) -> dict[str, tuple[int | None, str]]:
        """YARN's own exit status and diagnostics of our containers that just failed, asked at once:
        their NodeManager keeps them only a few seconds after the AM has been told."""
        reports = {}
        for c in containers:
            if c.id in self._containers and str(c.state) == "FAILED" and c.yarn_node_http_address:
                report = node_exit_report(c.yarn_node_http_address, c.yarn_container_id,
                                          login=self.rm.login if self.rm else None)
                if report is not None:
                    reports[c.id] = report
        return reports

    def _update(self, containers: list[Any], node_reports: dict[str, tuple[int | None, str]] | None = None) -> None:
        assert self._events is not None
        for c in containers:
            request = self._containers.get(c.id)
            if request is None:
                continue
            state = str(c.state)
            # (skein may report RUNNING a moment before it knows the node: wait for it.) A container
            # that ran between two polls is first seen ended: it is launched first, for its logs.
            if state in ("RUNNING", "SUCCEEDED", "FAILED", "KILLED") and c.id not in self._running \
                    and c.yarn_node_http_address:
                self._running.add(c.id)
                node = c.yarn_node_http_address
                base = f"http://{node}/ws/v1/node/containers/{c.yarn_container_id}/logs"
                # The executor's own log is the service's log: skein sends the script's output there.
                logs = {"executor": f"{base}/{request.role}.log", "stdout": f"{base}/stdout.log",
                        "stderr": f"{base}/stderr.log"}
                self._events.on_launched(Launched(request.role, request.index, request.incarnation,
                                                  node.rsplit(":", 1)[0], [], logs))
            if state in ("SUCCEEDED", "FAILED", "KILLED"):
                del self._containers[c.id]
                self._running.discard(c.id)
                self._by_incarnation.pop(request.incarnation, None)
                code, reason, preempted = exited_from(state, c.exit_message or "", (node_reports or {}).get(c.id))
                self._events.on_exited(Exited(request.role, request.index, request.incarnation, code, reason,
                                              preempted))
