"""The chaos suite: real jobs on the local backend or on YARN (``--backend yarn``: the cluster of
``$HADOOP_CONF_DIR``, e.g. the minicluster of scripts/minicluster.sh), each under one fault, every
record checked by id.

Each scenario runs a job of RECORDS numbered text records (bench/chaos_trainer.py writes every
record it processed to a file of its own) with 2 workers, ``restart: on_failure``, and injects one
fault while the records flow:

executor_sigkill, trainer_sigkill, exactly_once_kills
    SIGKILL an executor process, a trainer process; trainers of an exactly-once job, twice;
kill_storm
    STORM_KILLS (30) SIGKILLs of a random reading trainer, one every STORM_INTERVAL (1) s, in a job of
    3 workers reading 200,000 records in 256 KiB tasks with the default input settings (tasks that
    make progress between kills are never given up);
executor_sigstop
    SIGSTOP an executor for longer than ``am.heartbeat_timeout``, then SIGCONT: the zombie must be
    fenced (lost, its trainer killed, its tasks moved, its late reports refused);
net_delay, net_drop, net_reset
    executors reach the AM through bench/netfault.py (``am.advertise``): every chunk delayed, a
    blackhole shorter than the heartbeat timeout, every connection reset;
slow_trainer
    a trainer 20x slower than the others (backpressure): heartbeats go on, nobody is lost;
full_disk
    ``input.work_preserve_dir`` on a small tmpfs, filled while the job reads (root only): the AM
    says so (an event naming the directory and ENOSPC), reading goes on, nothing hangs;
am_kill_start, am_kill_scale, am_kill_dispatch
    SIGKILL the AM (``am.max_attempts`` 3) while executors start, right after a scale-up, while it
    hands out data: the local supervisor starts the next attempt, which adopts the executors still
    running; the job must survive with nothing lost. Recovery: the kill -> the new attempt has
    adopted (or found gone) every executor. On YARN (``max_attempts`` 2, YARN's default cap) the new
    application attempt takes the job over and starts every executor again (skein keeps no container
    across attempts); recovery is then the kill -> every executor's trainer running again;
container_kill
    YARN only: an executor's container killed through YARN (skein asks its NodeManager to stop it).
datanode_down
    YARN only (the minicluster of ``$PRIMUS_MINICLUSTER_DIR``): HDFS's DataNode stopped for
    DATANODE_DOWN (10) s while the job reads, then started again. Recovery: the DataNode back ->
    records flow again.
rm_restart
    YARN only (the minicluster): the ResourceManager restarted while the job reads, with
    work-preserving recovery: the same executors must finish the job. Recovery: the restart's length.

On YARN the input goes to HDFS first (``primus hdfs put``), executors get 1 vcore and 256 MiB, and
each job gives up after YARN_TIMEOUT (180) seconds; the trainers write where this process reads (a
minicluster's containers run on this machine). ``full_disk`` needs a local work_preserve_dir, which
YARN refuses: not run there.

A scenario is a function of ``Chaos`` (the job under test) registered in ``SCENARIOS``; adding one
is one function and one line. Figures, from the one run: a table, then the last line: records
lost, duplicates, faults survived, AM restarts survived, recovery (fault -> the work moving on: a
replacement executor running), then survived/injected as a ratio.

Loopback only, bounded: each job gives up after TIMEOUT seconds; the default run takes ~2 minutes.
Env: RECORDS (20000), PACE (records/s per trainer, 2000), TIMEOUT (60), SCENARIOS (comma list,
default all), QUICK=1 (the shortest run: a few scenarios, fewer records), BACKEND (local; or
``--backend``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netfault import FaultProxy, free_port

from primus_runtime import procfs, protocol
from primus_runtime.api_client import AMClient
from primus_runtime.backends.local.jobs import processes_of_job
from primus_runtime.client import PrimusClient
from primus_runtime.models import EventView, ExecutorView, StatusDocument

HERE = Path(__file__).resolve().parent


RECORDS = int(os.environ.get("RECORDS", "20000"))
PACE = float(os.environ.get("PACE", "2000"))
TIMEOUT = float(os.environ.get("TIMEOUT", "60"))
AM = {"heartbeat_interval": "0.25s", "heartbeat_timeout": "3s", "shutdown_grace": "2s"}
HEARTBEAT_TIMEOUT = 3.0
YARN_TIMEOUT = float(os.environ.get("YARN_TIMEOUT", "180"))
YARN = {"type": "yarn", "am_memory": "512Mi"}
YARN_EXECUTOR = {"cpu": 1, "memory": "256Mi"}
STORM_KILLS = int(os.environ.get("STORM_KILLS", "30"))
STORM_INTERVAL = float(os.environ.get("STORM_INTERVAL", "1"))
DATANODE_DOWN = float(os.environ.get("DATANODE_DOWN", "10"))


@dataclass
class Outcome:
    scenario: str
    state: str = "not run"
    reason: str = ""
    faults: int = 0
    lost: int | None = None
    duplicates: int | None = None
    recovery: list[float] = field(default_factory=list)  # seconds, fault -> the work moving on
    am_kill: bool = False
    checks: dict[str, bool] = field(default_factory=dict)  # what the scenario verified besides records

    @property
    def survived(self) -> bool:
        return self.state == "succeeded" and self.lost == 0 and all(self.checks.values())


class Chaos:
    """One job under test: its input, spec, output and the faults done to it."""

    def __init__(self, client: PrimusClient, work: Path, name: str, records: int = RECORDS,
                 exactly_once: bool = False, backend: str = "local"):
        self.client, self.name, self.backend = client, name, backend
        self.cluster = client.cluster(backend)
        self.work = work / name
        self.out = self.work / "out"
        self.out.mkdir(parents=True)
        self.expected = write_input(self.work / "data", records)
        self.exactly_once = exactly_once
        source = str(self.work / "data") if backend == "local" else put_on_hdfs(self.work / "data")
        self.spec = job_spec(source, self.out, exactly_once, backend)
        self.app = ""
        self.outcome = Outcome(name)
        self.faulted_at: list[tuple[float, str, str | None]] = []  # (wall time, executor id, old incarnation)
        self.timeout = TIMEOUT if backend == "local" else YARN_TIMEOUT  # how long finish() waits for the end

    def submit(self) -> str:
        self.app = self.client.submit(self.spec)
        return self.app

    def status(self) -> StatusDocument:
        return self.client.status(self.app)

    def executor(self, executor_id: str) -> ExecutorView:
        return next(e for e in self.status().executors if e.id == executor_id)

    def wait_reading(self, records: int = 200) -> None:
        """Until the trainers processed ``records`` records in all (the data plane is flowing)."""
        wait_until(lambda: self.processed() >= records, f"{self.name}: {records} records processed")

    def processed(self) -> int:
        return sum(f.stat().st_size for f in self.out.glob("*.txt")) // 21

    def fault(self, executor_id: str, incarnation: str | None) -> None:
        """Note a fault done to ``executor_id`` now: its recovery is timed from here."""
        self.faulted_at.append((time.time(), executor_id, incarnation))
        self.outcome.faults += 1

    def trainer_pid(self, incarnation: str) -> int:
        return wait_until(lambda: next(iter(trainer_pids(self.app, incarnation)), None),
                          f"{self.name}: the trainer of {incarnation}", timeout=self.timeout)

    def all_events(self) -> list[dict[str, Any]]:
        """Every event of the job, from the status file its AM left (the API's status carries only the
        latest ones; on YARN the event log reaches HDFS after the final status)."""
        def events_to_the_end() -> list[dict[str, Any]] | None:  # the AM may still be writing them
            events = list((self.cluster.final_status(self.app) or {}).get("events") or [])
            ended = any(e["subject"] == "job" and e["to_state"] in ("succeeded", "failed", "killed") for e in events)
            return events if ended else None

        try:
            return wait_until(events_to_the_end, f"{self.name}: the job's final events", timeout=15, poll=0.5)
        except TimeoutError:
            return list((self.cluster.final_status(self.app) or {}).get("events") or [])

    def finish(self) -> Outcome:
        try:
            status = self.client.wait(self.app, timeout=self.timeout)
        except TimeoutError:  # given up on: killed below, and judged as it stands
            status = self.status()
        if status.job.state not in ("succeeded", "failed", "killed"):
            self.client.kill(self.app, "chaos: gave up waiting", timeout=30)
            status = self.client.status(self.app)
        got = committed(self.out) if self.exactly_once else \
            [line for f in self.out.glob("worker-*.txt") for line in f.read_text().split()]
        counts = Counter(got)
        self.outcome.state, self.outcome.reason = status.job.state.value, status.job.reason
        self.outcome.lost = len(set(self.expected) - counts.keys())
        self.outcome.duplicates = sum(n - 1 for n in counts.values() if n > 1)
        self.outcome.recovery += recoveries(self.all_events(), self.faulted_at)
        return self.outcome


def write_input(data: Path, records: int) -> list[str]:
    """``records`` numbered text records (21 bytes each) in 2 files of one day's directory."""
    day = data / "20200103"
    day.mkdir(parents=True)
    lines = [f"r{i:019d}" for i in range(records)]
    half = len(lines) // 2
    for n, part in enumerate((lines[:half], lines[half:])):
        (day / f"data-{n}.txt").write_text("\n".join(part) + "\n")
    (day / "_SUCCESS").write_text("")
    return lines


def put_on_hdfs(data: Path) -> str:
    """``data`` copied to a fresh HDFS directory as a user would (`primus hdfs put`: markers last)."""
    target = f"hdfs:///primus-chaos/{data.parent.name}-{random.getrandbits(40):010x}"
    subprocess.run([sys.executable, "-m", "primus_runtime.cli", "hdfs", "put", str(data), target], check=True,
                   capture_output=True, text=True)
    return target


def job_spec(data: str, out: Path, exactly_once: bool, backend: str = "local") -> dict[str, Any]:
    env = {"OUT_DIR": str(out), "PACE": str(PACE)}
    if exactly_once:
        env["COMMIT_EVERY"] = "200"
    worker: dict[str, Any] = {"name": "worker", "replicas": 2, "consumes_input": True,
                              "command": [sys.executable, str(HERE / "chaos_trainer.py")], "env": env,
                              "failover": {"restart": "on_failure", "max_failures_per_index": 100}}
    spec: dict[str, Any] = {
        "name": "chaos",
        "roles": [worker],
        "am": dict(AM),
        "input": {"sources": [{"name": "daily", "path": data + "/{{YYYY}}{{MM}}{{DD}}/", "pattern": "data-*"}],
                  "time_range": {"start": "2020-01-03", "end": "2020-01-03"},
                  "task_size": "32Ki",
                  "delivery": "exactly_once" if exactly_once else "at_least_once"},
    }
    if backend == "yarn":
        worker["resources"] = dict(YARN_EXECUTOR)
        spec["backend"] = dict(YARN)
    return spec


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = TIMEOUT, poll: float = 0.05) -> Any:
    """``predicate()`` once true; TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:g}s waiting for {what}")
        time.sleep(poll)
    return value


def trainer_pids(app: str, incarnation: str) -> list[int]:
    """The chaos trainers of one executor incarnation (found by command line and environment)."""
    return [pid for pid in processes_of_job(app, incarnation) if _is_trainer(pid)]


def _is_trainer(pid: int) -> bool:
    try:
        return b"chaos_trainer.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def committed(out: Path) -> list[str]:
    """Exactly-once: the records of every checkpoint an executor saw committed (each trainer says in
    ``out`` where its executor reads its commits: the job's directory, a YARN container's log dir)."""
    files = {Path(f.read_text()) for f in out.glob("commit-file-*")}
    names = [json.loads(line)["checkpoint"] for f in files if f.exists() for line in f.read_text().splitlines()]
    return [line for name in names for line in (out / f"batch-{name}.txt").read_text().split()]


def recoveries(events: list[dict[str, Any]], faults: list[tuple[float, str, str | None]]) -> list[float]:
    """For each fault: seconds until a new incarnation of the executor hit ran its trainer."""
    found = []
    for at, executor_id, incarnation in faults:
        for event in events:
            if event["subject"] == executor_id and event["to_state"] == "running" and event["time"] >= at \
                    and event["incarnation"] != incarnation:
                found.append(event["time"] - at)
                break
    return found


# --- the scenarios ----------------------------------------------------------------------------


def executor_sigkill(chaos: Chaos) -> None:
    chaos.submit()
    chaos.wait_reading()
    victim = chaos.executor("worker-0")
    os.kill(victim.pid, signal.SIGKILL)
    chaos.fault("worker-0", victim.incarnation)


def trainer_sigkill(chaos: Chaos) -> None:
    chaos.submit()
    chaos.wait_reading()
    victim = chaos.executor("worker-1")
    os.kill(chaos.trainer_pid(victim.incarnation), signal.SIGKILL)
    chaos.fault("worker-1", victim.incarnation)


def exactly_once_kills(chaos: Chaos) -> None:
    chaos.submit()
    for executor_id in ("worker-0", "worker-1"):
        chaos.wait_reading(chaos.processed() + 500)
        victim = chaos.executor(executor_id)
        os.kill(chaos.trainer_pid(victim.incarnation), signal.SIGKILL)
        chaos.fault(executor_id, victim.incarnation)


def kill_storm(chaos: Chaos) -> None:
    """Issue 24's repro: a random reading trainer SIGKILLed every STORM_INTERVAL s, STORM_KILLS times,
    with the default input settings (max_task_interruptions and the rest): the job must succeed."""
    chaos.spec["roles"][0]["replicas"] = 3
    chaos.spec["input"]["task_size"] = "256Ki"
    chaos.timeout += STORM_KILLS * STORM_INTERVAL * 4
    chaos.submit()
    chaos.wait_reading()
    pick = random.Random(24)
    while chaos.outcome.faults < STORM_KILLS and not chaos.cluster.final_status(chaos.app):
        time.sleep(STORM_INTERVAL)
        reading = [(e, trainer_pids(chaos.app, e.incarnation)) for e in chaos.status().executors
                   if e.state == "running"]
        reading = [(e, pids) for e, pids in reading if pids]
        if not reading:
            continue
        victim, pids = pick.choice(reading)
        try:
            os.kill(pids[0], signal.SIGKILL)
        except ProcessLookupError:
            continue
        chaos.fault(victim.id, victim.incarnation)
    chaos.outcome.checks[f"{STORM_KILLS} kills done while reading"] = chaos.outcome.faults >= STORM_KILLS


def executor_sigstop(chaos: Chaos) -> None:
    """The zombie: silent past the heartbeat timeout, then back. Fenced: marked lost, its trainer
    killed, its late reports refused with a kill command."""
    chaos.submit()
    chaos.wait_reading()
    victim = chaos.executor("worker-0")
    trainer = chaos.trainer_pid(victim.incarnation)
    os.kill(victim.pid, signal.SIGSTOP)
    chaos.fault("worker-0", victim.incarnation)
    try:
        wait_until(lambda: chaos.executor("worker-0").incarnation != victim.incarnation,
                   "the stopped executor to be replaced")
    finally:
        if procfs.alive(victim.pid):
            os.kill(victim.pid, signal.SIGCONT)
    lost = [e for e in chaos.status().events if e.incarnation == victim.incarnation]
    chaos.outcome.checks["marked lost"] = any(e.to_state == "lost" for e in lost)
    chaos.outcome.checks["its trainer killed"] = bool(
        wait_until(lambda: not procfs.alive(trainer), "the zombie's trainer to die", timeout=15))
    endpoint = chaos.cluster.am_endpoint(chaos.app)
    assert endpoint is not None
    late = AMClient(*endpoint).post(protocol.HEARTBEAT_PATH, {
        "incarnation": victim.incarnation, "state": "running", "cluster_version": 0, "wait": False,
        "done": [], "progress": {}, "need_tasks": 2}, timeout=10)
    chaos.outcome.checks["late report refused"] = late.get("command") == protocol.CMD_KILL and not late.get("tasks")


@contextmanager
def behind_proxy(chaos: Chaos) -> Iterator[FaultProxy]:
    """Executors (and this client) reach the job's AM only through a FaultProxy."""
    port = free_port()
    with FaultProxy(("127.0.0.1", port)) as proxy:
        chaos.spec["am"].update(port=port, advertise=proxy.address)
        yield proxy


def _network(mode: str, seconds: float, delay: float = 0.0) -> Callable[[Chaos], None]:
    def scenario(chaos: Chaos) -> None:
        with behind_proxy(chaos) as proxy:
            chaos.submit()
            chaos.wait_reading()
            before = {e.id: e.incarnation for e in chaos.status().executors}
            proxy.set(mode, delay)  # type: ignore[arg-type]
            chaos.outcome.faults += 1
            time.sleep(seconds)
            proxy.set("pass")
            outcome = chaos.finish()
            # Survived means more than records: nobody was declared lost over a link that came back.
            outcome.checks["no executor lost"] = not [e for e in chaos.status().events if e.to_state == "lost"]
            outcome.checks["same executors"] = all(
                e.incarnation == before.get(e.id) for e in chaos.status().executors)
    scenario.__name__ = f"net_{mode}"
    return scenario


def slow_trainer(chaos: Chaos) -> None:
    """Backpressure: one trainer at 1/20 of the pace; its feed blocks, its heartbeats must not."""
    chaos.spec["roles"][0]["env"]["SLOW_INDEX"] = "1"
    chaos.spec["roles"][0]["env"]["SLOW_PACE"] = str(PACE / 20)
    chaos.submit()
    chaos.outcome.faults += 1
    outcome = chaos.finish()
    outcome.checks["no executor lost"] = not [e for e in chaos.status().events if e.to_state == "lost"]


def full_disk(chaos: Chaos) -> None:
    """work_preserve_dir on a 1 MiB tmpfs, filled while the job reads, freed a little later."""
    with tmpfs(chaos.work / "preserve", "1m") as mount:
        chaos.spec["input"]["work_preserve_dir"] = str(mount / "progress")
        # Small tasks: the journal (written at every AM step) outgrows the page it has once the disk is full.
        chaos.spec["input"]["task_size"] = "4Ki"
        chaos.submit()
        chaos.wait_reading()
        filler = fill(mount)
        chaos.outcome.faults += 1
        wait_until(lambda: _data_events(chaos, "unsaved"), "the AM to report the full disk", timeout=15)
        filler.unlink()
        outcome = chaos.finish()
        unsaved = _data_events(chaos, "unsaved")
        outcome.checks["full disk reported"] = bool(unsaved) and "ENOSPC" in unsaved[0].reason \
            and str(mount / "progress") in unsaved[0].reason
        outcome.checks["saved again once freed"] = bool(_data_events(chaos, "saved"))


def _data_events(chaos: Chaos, to_state: str) -> list[EventView]:
    return [e for e in chaos.status().events if e.subject == "data" and e.to_state == to_state]


@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` at ``path``, unmounted at the end whatever happens (root only)."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True,
                   capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def fill(mount: Path) -> Path:
    """Fill the file system at ``mount`` until ENOSPC; the file that holds the space."""
    filler = mount / "filler"
    with open(filler, "wb", buffering=0) as f:  # unbuffered: closing it has nothing left to write
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


def _am_kill(when: str) -> Callable[[Chaos], None]:
    def scenario(chaos: Chaos) -> None:
        chaos.outcome.am_kill = True
        # The local supervisor restarts the AM; YARN starts a new application attempt (at most 2 by
        # yarn.resourcemanager.am.max-attempts' default).
        chaos.spec["am"].update(max_attempts=3 if chaos.backend == "local" else 2, recovery_grace="20s")
        chaos.submit()
        if when == "start":
            pid = wait_until(lambda: serving_am(chaos), "the AM to start")
        elif when == "scale":
            chaos.wait_reading()
            chaos.client.scale(chaos.app, "worker", 3)
            pid = serving_am(chaos)
        else:
            chaos.wait_reading()
            pid = serving_am(chaos)
        assert pid
        before = {e.id: e.incarnation for e in chaos.status().executors}
        os.kill(pid, signal.SIGKILL)
        chaos.outcome.faults += 1
        killed_at = time.time()
        if chaos.backend == "local":
            # Recovery: the new AM attempt has adopted (or found gone) every executor the dead one had.
            recovered = wait_until(lambda: recovered_at(chaos), "a new AM attempt to recover the job", timeout=30)
            chaos.outcome.recovery.append(recovered - killed_at)
        else:
            # Every executor started again by the new application attempt: each one is a fault recovered.
            for executor_id, incarnation in before.items():
                chaos.faulted_at.append((killed_at, executor_id, incarnation))
    scenario.__name__ = f"am_kill_{when}"
    return scenario


def serving_am(chaos: Chaos) -> int | None:
    """The pid of the AM process serving the job: on the local backend the one (the supervisor's child)
    that published its address; on YARN the Primus AM in the application's master container (once it
    published its address)."""
    if chaos.backend != "local":
        if chaos.cluster.am_endpoint(chaos.app) is None:
            return None
        return next((pid for pid in processes_of_job(chaos.app)
                     if b"primus_runtime.am" in Path(f"/proc/{pid}/cmdline").read_bytes()), None)
    job = chaos.client.cluster("local").job(chaos.app)  # type: ignore[attr-defined]
    info = job.read_json(job.am_info)
    return int(info["pid"]) if info and procfs.alive(int(info["pid"])) else None


def container_kill(chaos: Chaos) -> None:
    """An executor's container killed through YARN (skein asks its NodeManager), as YARN's own
    preemption or an operator's `yarn container -signal` would end it."""
    import skein

    client = skein.Client(log=False)  # its Java driver starts in seconds: before the job reads
    chaos.submit()
    app = client.connect(chaos.app, wait=True)
    chaos.wait_reading()
    # Its logs name its container once skein has seen it run (it may register a moment before).
    victim = wait_until(lambda: (e := chaos.executor("worker-1")).logs.get("stdout") and e,
                        "worker-1's container to be known", timeout=chaos.timeout)
    container_id = re.search(r"/containers/(container_\w+)/", victim.logs["stdout"])
    assert container_id is not None, victim.logs
    [container] = [c for c in app.get_containers() if c.yarn_container_id == container_id.group(1)]
    app.kill_container(container.id)
    chaos.fault("worker-1", victim.incarnation)


def datanode_down(chaos: Chaos) -> None:
    """HDFS's only DataNode stopped for DATANODE_DOWN seconds while the job reads, then started again
    (a DataNode restart, a rack switch rebooting): the NameNode still sends readers to it, whose
    connections are refused. Nothing may be lost, and no task given up on for a storage outage."""
    chaos.submit()
    chaos.wait_reading()
    minicluster("datanode-stop")
    chaos.outcome.faults += 1
    try:
        time.sleep(DATANODE_DOWN)
    finally:
        minicluster("datanode-start")
    restarted, before = time.time(), chaos.processed()
    # Recovery: the DataNode back -> records flow again (what the job does meanwhile is its own).
    wait_until(lambda: chaos.processed() > before or chaos.status().job.state != "running",
               "records to flow again", timeout=chaos.timeout)
    if chaos.processed() > before:
        chaos.outcome.recovery.append(time.time() - restarted)


def rm_restart(chaos: Chaos) -> None:
    """YARN's ResourceManager restarted while the job reads (an upgrade, a failover): with
    work-preserving recovery the application, its AM and its containers carry on. Nothing may be lost,
    no executor replaced."""
    chaos.submit()
    chaos.wait_reading()
    before = {e.id: e.incarnation for e in chaos.status().executors}
    restarting = time.time()
    minicluster("resourcemanager-restart")
    chaos.outcome.faults += 1
    chaos.outcome.recovery.append(time.time() - restarting)  # the RM down -> serving again
    outcome = chaos.finish()
    outcome.checks["same executors"] = all(e.incarnation == before.get(e.id) for e in chaos.status().executors
                                           if e.id in before)
    outcome.checks["one AM attempt"] = len(chaos.status().job.am_attempts or []) <= 1
    # What YARN's own UI shows: the AM told the new ResourceManager the job's outcome.
    rm = chaos.cluster.rm  # type: ignore[attr-defined]
    report = wait_until(lambda: (r := rm.app(chaos.app))["state"] in ("FINISHED", "FAILED", "KILLED") and r,
                        "YARN to see the application end", timeout=60, poll=0.5)
    outcome.checks[f"YARN says {report['finalStatus']}"] = report["finalStatus"] == "SUCCEEDED"


def minicluster(command: str) -> None:
    """A fault through scripts/minicluster.sh (the minicluster of $PRIMUS_MINICLUSTER_DIR)."""
    done = subprocess.run([str(HERE.parent / "scripts" / "minicluster.sh"), command], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/minicluster.sh {command}: {done.stderr.strip()}")


def recovered_at(chaos: Chaos) -> float | None:
    status = chaos.cluster.last_status(chaos.app) or {}
    attempts = status.get("job", {}).get("am_attempts") or []
    return attempts[-1].get("recovered_at") if attempts else None


@dataclass(frozen=True)
class Scenario:
    run: Callable[[Chaos], None]
    records: int = RECORDS
    exactly_once: bool = False
    needs: str | Callable[[], str | None] | None = None  # why it cannot run here, if it cannot
    backends: tuple[str, ...] = ("local", "yarn")  # where it can run
    why_not: str = ""  # why not on the other backends

    def cannot_run(self, backend: str) -> str | None:
        if backend not in self.backends:
            return self.why_not or f"not a fault of the {backend} backend"
        return self.needs() if callable(self.needs) else self.needs


SCENARIOS: dict[str, Scenario] = {
    "executor_sigkill": Scenario(executor_sigkill),
    "trainer_sigkill": Scenario(trainer_sigkill),
    "exactly_once_kills": Scenario(exactly_once_kills, exactly_once=True),
    "kill_storm": Scenario(kill_storm, records=200_000),
    "executor_sigstop": Scenario(executor_sigstop),
    "net_delay": Scenario(_network("delay", 2.0, delay=0.3)),
    "net_drop": Scenario(_network("drop", HEARTBEAT_TIMEOUT / 2)),
    "net_reset": Scenario(_network("reset", 0.5)),
    "slow_trainer": Scenario(slow_trainer, records=RECORDS // 10),
    "full_disk": Scenario(full_disk, needs=None if os.geteuid() == 0 else "mounting a tmpfs needs root",
                          backends=("local",), why_not="a local work_preserve_dir, which YARN refuses"),
    "container_kill": Scenario(container_kill, backends=("yarn",), why_not="no container manager to kill through"),
    "datanode_down": Scenario(datanode_down, backends=("yarn",), why_not="no HDFS DataNode to stop",
                              needs=lambda: None if os.environ.get("PRIMUS_MINICLUSTER_DIR") else
                              "a minicluster whose DataNode it stops ($PRIMUS_MINICLUSTER_DIR)"),
    "rm_restart": Scenario(rm_restart, backends=("yarn",), why_not="no ResourceManager",
                           needs=lambda: None if os.environ.get("PRIMUS_MINICLUSTER_DIR") else
                           "a minicluster whose ResourceManager it restarts ($PRIMUS_MINICLUSTER_DIR)"),
    "am_kill_start": Scenario(_am_kill("start")),
    "am_kill_scale": Scenario(_am_kill("scale")),
    "am_kill_dispatch": Scenario(_am_kill("dispatch")),
}
QUICK = ("executor_sigkill", "executor_sigstop", "net_reset", "am_kill_dispatch")


def run_scenario(name: str, client: PrimusClient, work: Path, records: int | None = None,
                 backend: str = "local") -> Outcome:
    """Run scenario ``name`` on a job of its own on ``backend``; its outcome ("not run" when it needs
    what is missing)."""
    scenario = SCENARIOS[name]
    why_not = scenario.cannot_run(backend)
    if why_not is not None:
        return Outcome(name, reason=why_not, am_kill=name.startswith("am_kill"))
    chaos = Chaos(client, work, name, records or scenario.records, scenario.exactly_once, backend)
    try:
        scenario.run(chaos)
    except Exception as exc:  # noqa: BLE001 - a scenario that breaks is a finding, reported, not a crash
        chaos.outcome.checks[f"ran to the end ({type(exc).__name__}: {exc})"] = False
    if chaos.app and chaos.outcome.lost is None:
        chaos.finish()
    if chaos.app and backend != "local" and chaos.cluster.am_alive(chaos.app):
        chaos.cluster.force_kill(chaos.app)  # a job given up on never outlives its scenario
    return chaos.outcome


def report(outcomes: list[Outcome], backend: str = "local") -> str:
    """The table, then the last line."""
    lines = [f"{'scenario':<20} {'state':<10} {'faults':>6} {'lost':>5} {'dupl':>5} {'recovery s':>10}  checks / reason"]
    for o in outcomes:
        failed = [name for name, ok in o.checks.items() if not ok]
        note = ("FAILED: " + "; ".join(failed)) if failed else (o.reason if not o.survived else "ok")
        recovery = ", ".join(f"{s:.2f}" for s in o.recovery) or "-" if len(o.recovery) <= 4 else \
            f"{statistics.median(o.recovery):.2f} median, {max(o.recovery):.2f} max of {len(o.recovery)}"
        lines.append(f"{o.scenario:<20} {o.state:<10} {o.faults:>6} {_n(o.lost):>5} {_n(o.duplicates):>5} "
                     f"{recovery:>10}  {note}")
    ran = [o for o in outcomes if o.state != "not run"]
    faults = [o for o in ran if not o.am_kill]
    am = [o for o in ran if o.am_kill]
    times = [s for o in ran for s in o.recovery]
    lost = sum(o.lost or 0 for o in ran)
    duplicates = sum(o.duplicates or 0 for o in ran)
    survived = sum(o.survived for o in ran)
    am_text = f"{sum(o.survived for o in am)}/{len(am)}"
    recovery = f"median {statistics.median(times):.2f} s max {max(times):.2f} s" if times else "none measured"
    lines.append(f"chaos{f' ({backend})' if backend != 'local' else ''}: records lost {lost}, duplicates {duplicates}, kills survived "
                 f"{sum(o.survived for o in faults)}/{len(faults)}, AM restarts survived {am_text}, "
                 f"recovery {recovery}, scenarios survived: {survived / len(ran) if ran else 0:.2f}x")
    return "\n".join(lines)


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["local", "yarn"], default=os.environ.get("BACKEND", "local"))
    backend = parser.parse_args().backend
    quick = os.environ.get("QUICK") == "1"
    names = os.environ.get("SCENARIOS", "").split(",") if os.environ.get("SCENARIOS") else \
        list(QUICK if quick else SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        sys.exit(f"SCENARIOS: unknown {unknown}; known: {', '.join(SCENARIOS)}")
    with tempfile.TemporaryDirectory(prefix="primus-chaos-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        os.environ["PRIMUS_HOME"] = str(work / "home")
        client = PrimusClient(home=work / "home")
        outcomes = []
        for name in names:
            outcomes.append(run_scenario(name, client, work, 4000 if quick else None, backend))
            print(f"{name}: {outcomes[-1].state}", file=sys.stderr, flush=True)
        print(report(outcomes, backend))


if __name__ == "__main__":
    main()
