"""The node agent: a stand-in for the kubelet on the test Kubernetes cluster of scripts/k8s-cluster.sh.

There is no kubelet, container runtime or image here. This program registers one Node and runs the
pods bound to it as local processes, reporting their status to the real kube-apiserver the way a
kubelet would, so that a Kubernetes backend can be tested against a real control plane:

- Node: ``primus-node-0`` (``--node-name``), InternalIP ``--node-ip`` (10.244.0.1), capacity cpu,
  memory, pods and ``nvidia.com/gpu`` (``--gpus``, default 0), Ready, and the kubelet API port in
  ``daemonEndpoints``. A heartbeat refreshes Ready every 30 s.
- Scheduling: there is no scheduler, so the agent binds every pending pod without ``nodeName`` to its
  node, whatever its ``schedulerName``; pods already naming this node are run as they are.
  Admission refuses (phase Failed) pods asking for more ``nvidia.com/gpu`` than the node has.
- Containers: the image is ignored. Each container's ``command`` + ``args`` runs as a process of this
  machine in its own mount and UTS namespace (hostname = pod name), with the node's Python first on
  PATH (the bin directory of the interpreter running this agent, the project's venv) and the agent's
  PYTHONPATH. Env: ``value``, ``valueFrom`` (fieldRef, secretKeyRef, configMapKeyRef), ``envFrom``,
  ``$(VAR)`` expansion, KUBERNETES_SERVICE_HOST/PORT = the API server's real address, HOSTNAME.
  Volumes (configMap, secret, emptyDir, hostPath, projected incl. the service account token from a
  TokenRequest) are directories under the pod's folder bind-mounted on their ``mountPath`` (and
  ``subPath``); ``readOnly`` is not enforced. ``/etc/hosts`` maps the pod's name to its IP and
  ``HOST.SUBDOMAIN.NS.svc.cluster.local`` (and ``HOST.SUBDOMAIN.NS.svc``, which a real pod's search
  list resolves) of every running pod with a subdomain to its IP (there is no cluster DNS). Without ``workingDir`` a container starts in its pod's scratch folder ``work/``.
  Init containers run one after the other first. Only ``restartPolicy: Never`` is supported: other
  policies fail the pod with reason ``UnsupportedRestartPolicy``.
- Networking: every pod gets its own IP from the node's /24 (added to ``lo`` as a /32, removed when the
  pod ends), so Endpoints, the service proxy and ``pods/proxy`` work. All pods share the network
  namespace: a server listening on 0.0.0.0:PORT in one pod holds PORT for all of them.
- Status: Pending -> Running -> Succeeded/Failed (never back from a terminal phase), podIP(s), hostIP,
  containerStatuses (running/terminated with exitCode, reason Completed/Error), conditions
  PodScheduled, Initialized, ContainersReady, Ready (readinessProbe exec/tcpSocket/httpGet).
- Deletion: SIGTERM to each container's process group (and descendants), SIGKILL after the grace
  period, then delete with grace 0. A pod that vanishes has its processes killed.
- Logs: the kubelet's ``/containerLogs/{ns}/{pod}/{container}`` endpoint (tailLines, limitBytes,
  follow, timestamps, sinceTime, sinceSeconds) over HTTPS on the node IP, so ``read_namespaced_pod_log``
  works through the API server. The combined stdout+stderr of a container is in
  ``DIR/pods/NS_POD_UID/logs/CONTAINER.log``; it reaches the file through a pipe the agent reads, which
  notes when each line began (a line's time, as a container runtime's log keeps it).
- Test hook (not kubelet behaviour): the annotation ``primus.test/evict: "<message>"`` evicts the
  pod as a kubelet under node pressure would: processes killed, phase Failed, reason Evicted.

One line per pod transition goes to stdout (DIR/logs/node-agent.log). SIGTERM kills every process
the agent started and removes the addresses it added.
"""

from __future__ import annotations

import argparse
import base64
import bisect
import collections
import datetime
import http.server
import json
import os
import re
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from primus_runtime.executor.proctree import descendants, signal_all

TERMINAL = ("Succeeded", "Failed")
EVICT_ANNOTATION = "primus.test/evict"
HEARTBEAT_SECONDS = 30


def log(message: str) -> None:
    print(f"{datetime.datetime.now().isoformat(timespec='milliseconds')} {message}", flush=True)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def ip_addr(action: str, ip: str) -> None:
    subprocess.run(["ip", "addr", action, f"{ip}/32", "dev", "lo"], check=action == "add",
                   capture_output=True)


class PodError(Exception):
    """The pod cannot run; it ends Failed with this reason and message."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class NotYet(Exception):
    """Something the pod needs (a ConfigMap, a Secret) does not exist yet; the kubelet retries."""


class LineTimes:
    """When each line of a container's log began: (offset in the log, epoch seconds), in order."""

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.times: list[float] = []
        self.lock = threading.Lock()

    def add(self, offset: int, when: float) -> None:
        with self.lock:
            self.offsets.append(offset)
            self.times.append(when)

    def at(self, offset: int) -> float:
        """The time of the line starting at (or containing) ``offset``."""
        with self.lock:
            i = bisect.bisect_right(self.offsets, offset) - 1
            return self.times[i] if i >= 0 else (self.times[0] if self.times else time.time())


def copy_output(fd: int, path: Path, lines: LineTimes) -> None:
    """A container's output from the pipe ``fd`` into its log file, noting when each line began."""
    offset = path.stat().st_size if path.exists() else 0
    at_line_start = True
    with open(path, "ab") as out:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            when = time.time()
            if at_line_start:
                lines.add(offset, when)
            start = 0
            while (end := chunk.find(b"\n", start)) != -1 and end + 1 < len(chunk):
                lines.add(offset + end + 1, when)
                start = end + 1
            at_line_start = chunk.endswith(b"\n")
            out.write(chunk)
            out.flush()
            offset += len(chunk)
    os.close(fd)


@dataclass
class Container:
    name: str
    spec: Any
    proc: subprocess.Popen | None = None
    started_at: str = ""
    finished_at: str = ""
    exit_code: int | None = None
    ready: bool = False
    probe_successes: int = 0
    probe_failures: int = 0
    next_probe: float = 0.0
    waiting: tuple[str, str] = ("ContainerCreating", "")
    log_lines: LineTimes = field(default_factory=LineTimes)
    log_reader: threading.Thread | None = None

    def status(self, image: str) -> dict[str, Any]:
        base = {"name": self.name, "image": image, "imageID": "", "containerID": "",
                "restartCount": 0, "ready": self.ready, "started": self.exit_code is None and self.proc is not None}
        if self.exit_code is not None:
            reason = "Completed" if self.exit_code == 0 else "Error"
            state = {"terminated": {"exitCode": self.exit_code, "reason": reason,
                                    "startedAt": self.started_at or None, "finishedAt": self.finished_at}}
        elif self.proc is not None:
            state = {"running": {"startedAt": self.started_at}}
        else:
            state = {"waiting": {"reason": self.waiting[0], "message": self.waiting[1] or None}}
        return {**base, "state": state}


@dataclass
class PodRun:
    """One pod on this node: its folder, IP, processes and the status the agent reports."""

    agent: Agent
    pod: Any
    dir: Path
    ip: str = ""
    phase: str = "Pending"
    reason: str = ""
    message: str = ""
    init: list[Container] = field(default_factory=list)
    main: list[Container] = field(default_factory=list)
    volumes: dict[str, Path] = field(default_factory=dict)  # volume name -> its folder on this machine
    envs: dict[str, dict[str, str]] = field(default_factory=dict)  # container name -> environment
    stop_at: float | None = None  # when SIGKILL follows the SIGTERM of a deletion or eviction
    evicted: str | None = None
    gone: bool = False
    wake: threading.Event = field(default_factory=threading.Event)
    start_time: str = field(default_factory=now)
    transitions: dict[str, tuple[bool, str]] = field(default_factory=dict)  # condition -> (value, since)

    @property
    def key(self) -> str:
        return f"{self.pod.metadata.namespace}/{self.pod.metadata.name}"

    # -- events from the watch ------------------------------------------------------------------
    def update(self, pod: Any) -> None:
        self.pod = pod
        message = (pod.metadata.annotations or {}).get(EVICT_ANNOTATION)
        if message is not None and self.evicted is None and self.phase not in TERMINAL:
            self.evicted = message
            self.request_stop(0)
        if pod.metadata.deletion_timestamp is not None:
            self.request_stop(pod.metadata.deletion_grace_period_seconds or 0)
        self.wake.set()

    def request_stop(self, grace: float) -> None:
        deadline = time.monotonic() + grace
        if self.stop_at is None or deadline < self.stop_at:
            first = self.stop_at is None
            self.stop_at = deadline
            if first:
                self.signal(signal.SIGTERM)

    def vanish(self) -> None:
        self.gone = True
        self.signal(signal.SIGKILL)
        self.wake.set()

    def signal(self, sig: int) -> None:
        for c in self.init + self.main:
            if c.proc is not None and c.exit_code is None:
                pids = [c.proc.pid, *descendants(c.proc.pid)[0]]
                try:
                    os.killpg(c.proc.pid, sig)
                except ProcessLookupError:
                    pass
                signal_all(pids, sig)

    # -- the pod's life -------------------------------------------------------------------------
    def run(self) -> None:
        try:
            self.live()
        except PodError as e:
            self.signal(signal.SIGKILL)
            self.finish("Failed", e.reason, str(e))
        except Exception as e:  # a bug of the agent: the pod must still end
            log(f"{self.key}: agent error {e!r}")
            self.signal(signal.SIGKILL)
            self.finish("Failed", "NodeAgentError", repr(e))
        finally:
            self.agent.release_ip(self)
        self.await_deletion()

    def live(self) -> None:
        spec = self.pod.spec
        if (spec.restart_policy or "Always") != "Never":
            raise PodError("UnsupportedRestartPolicy",
                           f"spec.restartPolicy {spec.restart_policy!r}: the node agent (kubelet stand-in) "
                           "supports only Never")
        self.agent.admit(self.pod)
        self.init = [Container(c.name, c) for c in spec.init_containers or []]
        self.main = [Container(c.name, c) for c in spec.containers]
        self.agent.take_ip(self)
        self.report()
        while not self.prepare():
            if self.wait_or_stop(1.0):
                break
        if self.stop_at is not None or self.gone:
            return self.finish_stopped("stopped before its containers started")
        for c in self.init:
            self.start(c)
            while c.exit_code is None:
                self.step(0.1)
            if self.stop_at is not None:
                return self.finish_stopped(f"stopped during init container {c.name}")
            if c.exit_code != 0:
                return self.finish("Failed", "", f"init container {c.name} exited with {c.exit_code}")
        for c in self.main:
            self.start(c)
        self.phase = "Running"
        self.report()
        log(f"{self.key}: Running on {self.ip}")
        while any(c.exit_code is None for c in self.main):
            self.step(0.1)
        if self.evicted is not None:
            return self.finish_stopped("")
        self.finish("Failed" if any(c.exit_code != 0 for c in self.main) else "Succeeded", "", "")

    def finish_stopped(self, message: str) -> None:
        if self.evicted is not None:
            self.finish("Failed", "Evicted", self.evicted)
        else:
            self.finish("Failed", "", message)

    def wait_or_stop(self, seconds: float) -> bool:
        self.wake.wait(seconds)
        self.wake.clear()
        return self.stop_at is not None or self.gone

    def step(self, seconds: float) -> None:
        """Wait a little, then collect exits, run due readiness probes and enforce a stop deadline."""
        self.wait_or_stop(seconds)
        changed = False
        for c in self.init + self.main:
            if c.proc is not None and c.exit_code is None and c.proc.poll() is not None:
                if c.log_reader is not None:
                    c.log_reader.join(0.5)  # its last output in the log before it is reported ended
                code = c.proc.returncode
                c.exit_code = 128 - code if code < 0 else code  # killed by signal N: 128+N like a runtime
                c.finished_at, c.ready = now(), False
                log(f"{self.key}: container {c.name} exited {c.exit_code}")
                changed = True
        if self.stop_at is not None and time.monotonic() >= self.stop_at:
            self.signal(signal.SIGKILL)
        if self.phase == "Running":
            changed |= any([self.probe(c) for c in self.main if c.exit_code is None])
        if changed and any(c.exit_code is None for c in self.main):
            self.report()

    def finish(self, phase: str, reason: str, message: str) -> None:
        if self.phase in TERMINAL:
            return
        self.phase, self.reason, self.message = phase, reason, message
        for c in self.init + self.main:
            c.ready = False
        self.report()
        log(f"{self.key}: {phase}" + (f" ({reason}: {message})" if reason or message else ""))

    def await_deletion(self) -> None:
        while not self.gone and self.pod.metadata.deletion_timestamp is None:
            self.wait_or_stop(5.0)
        if not self.gone:
            self.agent.delete_now(self.pod)

    # -- preparing and starting containers ------------------------------------------------------
    def prepare(self) -> bool:
        """Volumes and environment; False while a ConfigMap or Secret the pod needs is missing."""
        try:
            self.volumes = {v.name: self.agent.volume(self, v) for v in self.pod.spec.volumes or []}
            self.envs = {c.name: self.agent.environment(self, c.spec) for c in self.init + self.main}
        except NotYet as e:
            for c in self.init + self.main:
                c.waiting = ("CreateContainerConfigError", str(e))
            self.report()
            return False
        for c in self.init + self.main:
            c.waiting = ("ContainerCreating", "")
        return True

    def start(self, c: Container) -> None:
        spec = c.spec
        (self.dir / "logs").mkdir(exist_ok=True)
        argv = [expand(a, self.envs[c.name]) for a in (spec.command or []) + (spec.args or [])]
        if not argv:
            raise PodError("CreateContainerError", f"container {c.name}: no command (the image is ignored, "
                           "so the node agent needs spec.containers[].command)")
        read, write = os.pipe()
        try:
            c.proc = subprocess.Popen(self.sandboxed(c, argv), env=self.envs[c.name], stdout=write,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        c.log_reader = threading.Thread(target=copy_output, args=(read, self.dir / "logs" / f"{c.name}.log",
                                                                  c.log_lines), name=f"log-{self.key}", daemon=True)
        c.log_reader.start()
        c.started_at = now()
        c.ready = spec.readiness_probe is None
        if spec.readiness_probe is not None:
            c.next_probe = time.monotonic() + (spec.readiness_probe.initial_delay_seconds or 0)
        log(f"{self.key}: container {c.name} started (pid {c.proc.pid}): {shlex.join(argv)}")

    def sandboxed(self, c: Container, argv: list[str]) -> list[str]:
        """The command in a private mount + UTS namespace with the pod's volumes and /etc/hosts mounted."""
        lines = ["set -e", f"hostname {shlex.quote(self.pod.metadata.name[:63])}",
                 f"mount --bind {shlex.quote(str(self.dir / 'hosts'))} /etc/hosts"]
        for m in c.spec.volume_mounts or []:
            source = self.volumes.get(m.name)
            if source is None:
                raise PodError("CreateContainerConfigError", f"container {c.name}: volumeMounts name "
                               f"{m.name!r} is not in spec.volumes")
            if m.sub_path:
                source = source / m.sub_path
            make = "mkdir -p" if source.is_dir() else "mkdir -p $(dirname {0}) && touch"
            target = shlex.quote(m.mount_path)
            lines.append(f"{make.format(target)} {target}")
            lines.append(f"mount --bind {shlex.quote(str(source))} {target}")
        workdir = c.spec.working_dir or str(self.dir / "work")
        lines.append(f"cd {shlex.quote(workdir)}")
        lines.append('exec "$@"')
        return ["unshare", "--mount", "--uts", "--propagation", "private", "--", "/bin/sh", "-c",
                "\n".join(lines), "sh", *argv]

    # -- readiness ------------------------------------------------------------------------------
    def probe(self, c: Container) -> bool:
        """Run the readiness probe if it is due; whether the container's readiness changed."""
        p = c.spec.readiness_probe
        if p is None or time.monotonic() < c.next_probe:
            return False
        c.next_probe = time.monotonic() + (p.period_seconds or 10)
        ok = self.agent.run_probe(self, c, p)
        before = c.ready
        if ok:
            c.probe_successes, c.probe_failures = c.probe_successes + 1, 0
            c.ready = c.ready or c.probe_successes >= (p.success_threshold or 1)
        else:
            c.probe_successes, c.probe_failures = 0, c.probe_failures + 1
            c.ready = c.ready and c.probe_failures < (p.failure_threshold or 3)
        return before != c.ready

    # -- status ---------------------------------------------------------------------------------
    def report(self) -> None:
        image = {c.name: c.image for c in (self.pod.spec.init_containers or []) + self.pod.spec.containers}
        ready = self.phase == "Running" and all(c.ready for c in self.main)
        initialized = all(c.exit_code == 0 for c in self.init)

        def condition(kind: str, value: bool) -> dict[str, Any]:
            if self.transitions.get(kind, (None,))[0] != value:
                self.transitions[kind] = (value, now())
            return {"type": kind, "status": "True" if value else "False",
                    "lastTransitionTime": self.transitions[kind][1]}

        status: dict[str, Any] = {
            "phase": self.phase, "hostIP": self.agent.node_ip, "hostIPs": [{"ip": self.agent.node_ip}],
            "podIP": self.ip or None, "podIPs": [{"ip": self.ip}] if self.ip else None,
            "startTime": self.start_time,
            "reason": self.reason or None, "message": self.message or None,
            "conditions": [condition("PodScheduled", True), condition("Initialized", initialized),
                           condition("ContainersReady", ready), condition("Ready", ready)],
            "initContainerStatuses": [c.status(image[c.name]) for c in self.init] or None,
            "containerStatuses": [c.status(image[c.name]) for c in self.main],
        }
        try:
            self.agent.core.patch_namespaced_pod_status(self.pod.metadata.name, self.pod.metadata.namespace,
                                                        {"status": status})
        except ApiException as e:
            if e.status != 404:  # a vanished pod has no status to report
                log(f"{self.key}: status update failed: {e.status} {e.reason}")


class Agent:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.node = args.node_name
        self.node_ip = args.node_ip
        config.load_kube_config(args.kubeconfig)
        self.core = client.CoreV1Api()
        self.api_host, self.api_port = urllib.parse.urlsplit(client.Configuration.get_default_copy().host).netloc \
            .rsplit(":", 1)
        self.runs: dict[str, PodRun] = {}
        self.by_name: dict[str, PodRun] = {}
        self.lock = threading.Lock()
        prefix = self.node_ip.rsplit(".", 1)[0]
        self.free_ips = collections.deque(f"{prefix}.{i}" for i in range(2, 255) if f"{prefix}.{i}" != self.node_ip)
        self.pods_dir = Path(args.dir) / "pods"
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        self.python_bin = str(Path(sys.executable).parent)

    # -- node ------------------------------------------------------------------------------------
    def register(self) -> None:
        ip_addr("add", self.node_ip)
        labels = {"kubernetes.io/hostname": self.node, "kubernetes.io/os": "linux",
                  "kubernetes.io/arch": "amd64"}
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node, "labels": labels},
                "spec": {"podCIDR": f"{self.node_ip.rsplit('.', 1)[0]}.0/24"}}
        try:
            self.core.create_node(body)
        except ApiException as e:
            if e.status != 409:
                raise
        self.heartbeat()
        log(f"node {self.node} registered: InternalIP {self.node_ip}, kubelet API port {self.args.port}")

    def heartbeat(self) -> None:
        capacity = {"cpu": str(os.cpu_count() or 1), "memory": f"{self.memory_kib()}Ki", "pods": "110",
                    "nvidia.com/gpu": str(self.args.gpus)}
        status = {
            "capacity": capacity, "allocatable": capacity,
            "addresses": [{"type": "InternalIP", "address": self.node_ip}, {"type": "Hostname", "address": self.node}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.args.port}},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "node agent (kubelet stand-in) is posting ready status",
                            "lastHeartbeatTime": now(), "lastTransitionTime": now()}],
            "nodeInfo": {"kubeletVersion": "primus-node-agent", "operatingSystem": "linux", "architecture": "amd64",
                         "containerRuntimeVersion": "local-process://", "kernelVersion": os.uname().release,
                         "osImage": "", "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""},
        }
        self.core.patch_node_status(self.node, {"status": status})

    def heartbeats(self) -> None:
        while True:
            time.sleep(HEARTBEAT_SECONDS)
            try:
                self.heartbeat()
            except Exception as e:  # the next one may work; the node is not lost meanwhile
                log(f"node heartbeat failed: {e!r}")

    @staticmethod
    def memory_kib() -> int:
        with open("/proc/meminfo") as f:
            return int(f.readline().split()[1])

    def admit(self, pod: Any) -> None:
        asked = 0
        for c in pod.spec.containers:
            res = c.resources
            wanted = ((res.limits or {}) if res else {}).get("nvidia.com/gpu") or \
                ((res.requests or {}) if res else {}).get("nvidia.com/gpu") or 0
            asked += int(wanted)
        if asked > self.args.gpus:
            raise PodError("OutOfnvidia.com/gpu", f"Node didn't have enough resource: nvidia.com/gpu, "
                           f"requested: {asked}, capacity: {self.args.gpus}")

    # -- pod IPs and /etc/hosts ------------------------------------------------------------------
    def take_ip(self, run: PodRun) -> None:
        """The pod's IP on lo, its folder (scratch work/ and hosts) and everyone's /etc/hosts updated."""
        # The hosts file exists before the pod has an IP: from then on, another pod's start rewrites it.
        (run.dir / "work").mkdir(parents=True, exist_ok=True)
        (run.dir / "hosts").touch()
        with self.lock:
            if not self.free_ips:
                raise PodError("OutOfPodIPs", f"all 253 pod IPs of node {self.node} are in use")
            run.ip = self.free_ips.popleft()
        ip_addr("add", run.ip)
        self.write_hosts()

    def release_ip(self, run: PodRun) -> None:
        if run.ip:
            ip_addr("del", run.ip)
            with self.lock:
                self.free_ips.append(run.ip)  # reused last: a just-ended pod's IP stays unique for a while
            self.write_hosts()

    def write_hosts(self) -> None:
        """Every running pod's /etc/hosts: its own name, then the FQDNs of pods with a subdomain.
        Rewritten in place: each file is bind-mounted, a rename would not reach the containers.
        (Short hostnames of other pods are left out: pod names are unique per namespace only.)"""
        with self.lock:
            runs = [r for r in self.runs.values() if r.ip and r.phase not in TERMINAL]
            names = {r.ip: hostnames(r.pod) for r in runs}
            for r in runs:
                # Its own line first, as the kubelet writes it: socket.getfqdn() in the pod finds it.
                others = [f"{ip}\t{' '.join(n[:-1])}" for ip, n in names.items() if ip != r.ip and len(n) > 1]
                text = "\n".join(["127.0.0.1\tlocalhost", "::1\tlocalhost", f"{r.ip}\t{' '.join(names[r.ip])}",
                                  *others]) + "\n"
                with open(r.dir / "hosts", "r+") as f:
                    f.truncate()
                    f.write(text)

    # -- volumes and environment -----------------------------------------------------------------
    def read(self, kind: str, name: str, namespace: str, optional: bool) -> dict[str, bytes] | None:
        try:
            if kind == "Secret":
                obj = self.core.read_namespaced_secret(name, namespace)
                return {k: base64.b64decode(v) for k, v in (obj.data or {}).items()}
            obj = self.core.read_namespaced_config_map(name, namespace)
            found = {k: v.encode() for k, v in (obj.data or {}).items()}
            found.update({k: base64.b64decode(v) for k, v in (obj.binary_data or {}).items()})
            return found
        except ApiException as e:
            if e.status != 404:
                raise
            if optional:
                return None
            raise NotYet(f"{kind} {namespace}/{name} not found") from None

    def volume(self, run: PodRun, v: Any) -> Path:
        target = run.dir / "volumes" / v.name
        target.mkdir(parents=True, exist_ok=True)
        ns = run.pod.metadata.namespace
        if v.empty_dir is not None:
            return target
        if v.host_path is not None:
            return Path(v.host_path.path)
        if v.config_map is not None:
            write_keys(target, self.read("ConfigMap", v.config_map.name, ns, bool(v.config_map.optional)),
                       v.config_map.items)
        elif v.secret is not None:
            write_keys(target, self.read("Secret", v.secret.secret_name, ns, bool(v.secret.optional)), v.secret.items)
        elif v.projected is not None:
            for source in v.projected.sources:
                write_keys(target, *self.projection(run, source))
        else:
            raise PodError("UnsupportedVolume", f"spec.volumes[{v.name!r}]: only configMap, secret, emptyDir, "
                           "hostPath and projected volumes are supported by the node agent (kubelet stand-in)")
        return target

    def projection(self, run: PodRun, source: Any) -> tuple[dict[str, bytes] | None, list[Any] | None]:
        ns = run.pod.metadata.namespace
        if source.service_account_token is not None:
            token = source.service_account_token
            request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
                audiences=[token.audience] if token.audience else [],
                expiration_seconds=token.expiration_seconds or 3600,
                bound_object_ref=client.V1BoundObjectReference(
                    kind="Pod", api_version="v1", name=run.pod.metadata.name, uid=run.pod.metadata.uid)))
            issued = self.core.create_namespaced_service_account_token(
                run.pod.spec.service_account_name or "default", ns, request)
            return {token.path: issued.status.token.encode()}, None
        if source.config_map is not None:
            cm = source.config_map
            return self.read("ConfigMap", cm.name, ns, bool(cm.optional)), cm.items
        if source.secret is not None:
            return self.read("Secret", source.secret.name, ns, bool(source.secret.optional)), source.secret.items
        if source.downward_api is not None:
            return {i.path: self.field(run.pod, i.field_ref.field_path, run).encode()
                    for i in source.downward_api.items or [] if i.field_ref is not None}, None
        raise PodError("UnsupportedVolume", "projected source: only serviceAccountToken, configMap, secret "
                       "and downwardAPI fieldRef are supported by the node agent (kubelet stand-in)")

    def field(self, pod: Any, path: str, run: PodRun) -> str:
        meta = pod.metadata
        simple = {"metadata.name": meta.name, "metadata.namespace": meta.namespace, "metadata.uid": meta.uid,
                  "spec.nodeName": pod.spec.node_name, "spec.serviceAccountName": pod.spec.service_account_name,
                  "status.podIP": run.ip, "status.podIPs": run.ip, "status.hostIP": self.node_ip,
                  "status.hostIPs": self.node_ip}
        if path in simple:
            return simple[path] or ""
        match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if match:
            return (getattr(meta, match.group(1)) or {}).get(match.group(2), "")
        if path in ("metadata.labels", "metadata.annotations"):
            values = getattr(meta, path.split(".")[1]) or {}
            return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
        raise PodError("CreateContainerConfigError", f"fieldRef.fieldPath {path!r} is not supported")

    def environment(self, run: PodRun, c: Any) -> dict[str, str]:
        meta = run.pod.metadata
        env = {"PATH": f"{self.python_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOME": "/root", "HOSTNAME": meta.name,
               "KUBERNETES_SERVICE_HOST": self.api_host, "KUBERNETES_SERVICE_PORT": self.api_port,
               "KUBERNETES_SERVICE_PORT_HTTPS": self.api_port}
        if os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        for source in c.env_from or []:
            ref = source.config_map_ref or source.secret_ref
            kind = "ConfigMap" if source.config_map_ref is not None else "Secret"
            values = self.read(kind, ref.name, meta.namespace, bool(ref.optional)) or {}
            env.update({(source.prefix or "") + k: v.decode() for k, v in values.items()})
        for e in c.env or []:
            if e.value_from is None:
                env[e.name] = expand(e.value or "", env)
                continue
            src = e.value_from
            if src.field_ref is not None:
                env[e.name] = self.field(run.pod, src.field_ref.field_path, run)
            elif src.secret_key_ref is not None or src.config_map_key_ref is not None:
                ref = src.secret_key_ref or src.config_map_key_ref
                kind = "Secret" if src.secret_key_ref is not None else "ConfigMap"
                values = self.read(kind, ref.name, meta.namespace, bool(ref.optional))
                if values is not None and ref.key in values:
                    env[e.name] = values[ref.key].decode()
                elif not ref.optional:
                    raise NotYet(f"{kind} {meta.namespace}/{ref.name} has no key {ref.key!r}")
            else:
                raise PodError("CreateContainerConfigError", f"env {e.name}: only fieldRef, secretKeyRef and "
                               "configMapKeyRef are supported by the node agent (kubelet stand-in)")
        return env

    # -- probes ----------------------------------------------------------------------------------
    def run_probe(self, run: PodRun, c: Container, p: Any) -> bool:
        timeout = p.timeout_seconds or 1
        try:
            if p._exec is not None:
                argv = run.sandboxed(c, list(p._exec.command))
                return subprocess.run(argv, env=run.envs[c.name], capture_output=True, timeout=timeout).returncode == 0
            if p.tcp_socket is not None:
                with socket.create_connection((p.tcp_socket.host or run.ip, int(p.tcp_socket.port)), timeout):
                    return True
            if p.http_get is not None:
                g = p.http_get
                url = f"{(g.scheme or 'HTTP').lower()}://{g.host or run.ip}:{int(g.port)}{g.path or '/'}"
                with urllib.request.urlopen(url, timeout=timeout) as reply:
                    return 200 <= reply.status < 400
        except (OSError, subprocess.TimeoutExpired):
            return False
        raise PodError("UnsupportedProbe", f"container {c.name}: readinessProbe needs exec, tcpSocket or httpGet")

    # -- the pod watch ---------------------------------------------------------------------------
    def handle(self, kind: str, pod: Any) -> None:
        uid = pod.metadata.uid
        if kind == "DELETED":
            with self.lock:
                run = self.runs.pop(uid, None)
                if run is not None and self.by_name.get(run.key) is run:
                    del self.by_name[run.key]
            if run is not None:
                log(f"{run.key}: deleted")
                run.vanish()
            return
        if not pod.spec.node_name:
            if pod.metadata.deletion_timestamp is None:
                self.bind(pod)
            return
        if pod.spec.node_name != self.node:
            return
        with self.lock:
            run = self.runs.get(uid)
        if run is not None:
            run.update(pod)
        elif pod.metadata.deletion_timestamp is not None:
            self.delete_now(pod)
        elif (pod.status.phase if pod.status else None) not in TERMINAL:
            self.start(pod)

    def bind(self, pod: Any) -> None:
        meta = pod.metadata
        body = client.V1Binding(metadata=client.V1ObjectMeta(name=meta.name, uid=meta.uid),
                                target=client.V1ObjectReference(kind="Node", name=self.node))
        try:
            # The server answers with a Status the client cannot parse into a V1Binding.
            self.core.create_namespaced_pod_binding(meta.name, meta.namespace, body, _preload_content=False)
            log(f"{meta.namespace}/{meta.name}: bound to {self.node}")
        except ApiException as e:
            if e.status not in (404, 409):  # deleted meanwhile, or already bound
                log(f"{meta.namespace}/{meta.name}: binding failed: {e.status} {e.reason}")

    def start(self, pod: Any) -> None:
        meta = pod.metadata
        run = PodRun(self, pod, self.pods_dir / f"{meta.namespace}_{meta.name}_{meta.uid}")
        with self.lock:
            self.runs[meta.uid] = run
            self.by_name[run.key] = run
        log(f"{run.key}: starting")
        threading.Thread(target=run.run, name=run.key, daemon=True).start()

    def delete_now(self, pod: Any) -> None:
        meta = pod.metadata
        try:
            self.core.delete_namespaced_pod(meta.name, meta.namespace, grace_period_seconds=0,
                                            body=client.V1DeleteOptions(
                                                grace_period_seconds=0,
                                                preconditions=client.V1Preconditions(uid=meta.uid)))
            log(f"{meta.namespace}/{meta.name}: deletion finished")
        except ApiException as e:
            if e.status not in (404, 409):
                log(f"{meta.namespace}/{meta.name}: delete failed: {e.status} {e.reason}")

    def watch_pods(self, ready_file: Path) -> None:
        version = None
        while True:
            if version is None:
                listed = self.core.list_pod_for_all_namespaces()
                version = listed.metadata.resource_version
                present = {p.metadata.uid for p in listed.items}
                for uid in set(self.runs) - present:
                    self.handle("DELETED", self.runs[uid].pod)
                for pod in listed.items:
                    self.handle("ADDED", pod)
                ready_file.write_text(json.dumps({"node": self.node, "node_ip": self.node_ip}) + "\n")
            try:
                for event in watch.Watch().stream(self.core.list_pod_for_all_namespaces, resource_version=version,
                                                  timeout_seconds=300, allow_watch_bookmarks=True):
                    # A BOOKMARK's object stays a dict: the version is read from the raw one.
                    version = event["raw_object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self.handle(event["type"], event["object"])
            except Exception as e:  # 410 Gone (too old a version), a dropped connection: list again
                log(f"pod watch failed: {e!r}; listing again")
                time.sleep(1)
                version = None

    def shutdown(self) -> None:
        with self.lock:
            runs = list(self.runs.values())
        for run in runs:
            run.vanish()
            if run.ip:
                ip_addr("del", run.ip)
        ip_addr("del", self.node_ip)
        log(f"node agent stopped ({len(runs)} pods' processes killed)")


def hostnames(pod: Any) -> list[str]:
    """The pod's names in /etc/hosts: with a subdomain (a headless Service) its FQDN and the
    ``...svc`` name a real pod resolves through its resolv.conf search list (``cluster.local``),
    then its hostname."""
    spec, meta = pod.spec, pod.metadata
    host = spec.hostname or meta.name
    if not spec.subdomain:
        return [host]
    service = f"{host}.{spec.subdomain}.{meta.namespace}.svc"
    return [f"{service}.cluster.local", service, host]


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) references (``$$`` escapes); unknown names stay as they are."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def write_keys(target: Path, values: dict[str, bytes] | None, items: list[Any] | None) -> None:
    """ConfigMap/Secret keys as files; ``items`` selects keys and renames them, like the kubelet."""
    if values is None:
        return
    chosen = {i.path: values[i.key] for i in items if i.key in values} if items else values
    for path, data in chosen.items():
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        (target / path).write_bytes(data)


class LogHandler(http.server.BaseHTTPRequestHandler):
    """The kubelet's containerLogs endpoint, as the API server calls it for pods/log."""

    agent: Agent

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        if len(parts) != 4 or parts[0] != "containerLogs":
            return self.send_error(404, f"no such kubelet endpoint: {url.path}")
        _, namespace, pod, container = parts
        with self.agent.lock:
            run = self.agent.by_name.get(f"{namespace}/{pod}")
        c = next((c for c in (run.init + run.main if run else []) if c.name == container), None)
        if run is None or c is None:
            return self.send_error(404, f"container {container} of pod {namespace}/{pod} is not on this node")
        query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        path = run.dir / "logs" / f"{container}.log"
        data = path.read_bytes() if path.exists() else b""
        since = log_since(query)
        stamps = query.get("timestamps") == "true"
        lines = [(offset, line) for offset, line in split_lines(data) if since is None or c.log_lines.at(offset) >= since]
        if "tailLines" in query:
            count = int(query["tailLines"])
            lines = lines[-count:] if count else []
        limit = int(query["limitBytes"]) if "limitBytes" in query else None
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        sent = self.send_limited(b"".join(stamped(c.log_lines, lines, stamps)), limit)
        if query.get("follow") == "true":
            self.follow(path, c, run, sent, limit, stamps)

    def send_limited(self, data: bytes, limit: int | None, sent: int = 0) -> int:
        if limit is not None:
            data = data[: max(0, limit - sent)]
        self.wfile.write(data)
        self.wfile.flush()
        return sent + len(data)

    def follow(self, path: Path, c: Container, run: PodRun, sent: int, limit: int | None, stamps: bool) -> None:
        offset = path.stat().st_size if path.exists() else 0
        while limit is None or sent < limit:
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
            if chunk:
                lines = [(offset + at, line) for at, line in split_lines(chunk)]
                sent = self.send_limited(b"".join(stamped(c.log_lines, lines, stamps)), limit, sent)
                offset += len(chunk)
            elif c.exit_code is not None or run.gone:
                return
            else:
                time.sleep(0.2)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per pod transition is the log; requests are not transitions


def split_lines(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, line with its newline) of each line of ``data``; the last may be unfinished."""
    out, offset = [], 0
    for line in data.split(b"\n"):
        if line or offset < len(data):
            out.append((offset, line + b"\n" if offset + len(line) < len(data) else line))
        offset += len(line) + 1
    return out


def stamped(times: LineTimes, lines: list[tuple[int, bytes]], stamps: bool) -> list[bytes]:
    """The lines, each led by its time (RFC 3339, nanoseconds, UTC) and a space with ``stamps``, as a
    kubelet writes them for timestamps=true; a continued line (it began before) gets none."""
    if not stamps:
        return [line for _, line in lines]
    out = []
    for offset, line in lines:
        when = datetime.datetime.fromtimestamp(times.at(offset), datetime.timezone.utc)
        out.append(when.strftime("%Y-%m-%dT%H:%M:%S.%f000Z ").encode() + line)
    return out


def log_since(query: dict[str, str]) -> float | None:
    """The epoch seconds of sinceTime (RFC 3339) or now minus sinceSeconds; None for neither."""
    if "sinceTime" in query:
        text = query["sinceTime"].replace("Z", "+00:00")
        return datetime.datetime.fromisoformat(text).timestamp()
    if "sinceSeconds" in query:
        return time.time() - int(query["sinceSeconds"])
    return None


def serve_logs(agent: Agent, args: argparse.Namespace) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    context.verify_mode = ssl.CERT_REQUIRED  # only the API server (its kubelet client cert) may read logs
    context.load_verify_locations(args.client_ca)
    LogHandler.agent = agent
    server = http.server.ThreadingHTTPServer((agent.node_ip, args.port), LogHandler)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, name="kubelet-api", daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--dir", required=True, help="the cluster's folder; pods run in DIR/pods")
    parser.add_argument("--node-name", default="primus-node-0")
    parser.add_argument("--node-ip", default="10.244.0.1", help="pods get the other addresses of its /24")
    parser.add_argument("--port", type=int, default=10250, help="the kubelet API (containerLogs) port")
    parser.add_argument("--gpus", type=int, default=0, help="the node's nvidia.com/gpu capacity")
    parser.add_argument("--cert", required=True, help="serving certificate of the kubelet API")
    parser.add_argument("--key", required=True)
    parser.add_argument("--client-ca", required=True, help="CA of the API server's kubelet client certificate")
    parser.add_argument("--ready-file", required=True, help="written once the node is registered and watching")
    args = parser.parse_args()
    agent = Agent(args)

    def stop(signum: int, frame: Any) -> None:
        agent.shutdown()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    agent.register()
    serve_logs(agent, args)
    threading.Thread(target=agent.heartbeats, name="heartbeat", daemon=True).start()
    agent.watch_pods(Path(args.ready_file))


if __name__ == "__main__":
    main()
