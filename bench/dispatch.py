"""Data dispatch capacity: ``python bench/dispatch.py`` (TASKS, EXECUTORS, SECONDS from the environment).

Two parts:

1. Task build: a listing of TASKS files (an in-memory filesystem, so that the disk is not
   what is measured) turned into tasks by the scanner's own code (filter, split, Task).
2. Dispatch: a real ApplicationMaster with its aiohttp API in a second process, its input a
   sparse text file split into TASKS tasks, and this process playing EXECUTORS consuming
   executors over the real protocol: register, take the start command, then heartbeat in a
   closed loop, each heartbeat reporting the tasks of the previous reply done and asking for
   more. Figure: task assignments + completions per second, and the AM's peak resident memory.
   The AM keeps its files as a real one does: every step's changes go to the AM and task journals
   (what a restarted AM recovers from) before it answers.

The journals' cost: ROUNDS rounds (default 3), each running the dispatch once with the AM's files
and once without them, alternately (the machine's noise falls on both); for each, the rate and the
AM's CPU time per heartbeat. The last line is the median rate with the journals against the
median without them (the goal: >= 0.95x). NO_FILES=1 runs only the AM without its files, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from heartbeat import call, connect, fan_out, http

from primus_runtime import protocol
from primus_runtime.data.dispatcher import Dispatcher
from primus_runtime.data.source import Partition, Scanner
from primus_runtime.spec import InputSpec

# The simulated backend is a test double: it lives with the tests (tests/simulated_backend.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

TASKS = int(os.environ.get("TASKS", 1_000_000))
EXECUTORS = int(os.environ.get("EXECUTORS", 1000))
SECONDS = float(os.environ.get("SECONDS", 10))
ROUNDS = int(os.environ.get("ROUNDS", 3))
CONNS = 50
TASK_BYTES = 64
GOAL = 10_000


# --- 1. task build from a big listing ------------------------------------------------------------


class ListingFS:
    """Just enough of an fsspec filesystem: a directory of ``count`` small files."""

    protocol = "memory"

    def __init__(self, count: int):
        self.entries = [{"name": f"/in/part-{i:08d}.txt", "size": 4096, "type": "file"} for i in range(count)]

    def ls(self, path: str, detail: bool = True) -> list[dict]:
        return self.entries

    def open(self, path: str, mode: str = "rb"):
        raise AssertionError("text files are split without being read")

    def unstrip_protocol(self, path: str) -> str:
        return "memory://" + path


def task_build_seconds(count: int) -> float:
    spec = InputSpec.model_validate({"sources": [{"name": "in", "path": "/in", "success_marker": None}],
                                     "task_size": "64Ki"})
    fs = ListingFS(count)
    scanner = Scanner(spec, Dispatcher(spec, events=None))  # type: ignore[arg-type]
    t = time.perf_counter()
    tasks = scanner.build_tasks(fs, "/in", spec.sources[0], Partition("", None))
    seconds = time.perf_counter() - t
    assert len(tasks) == count, len(tasks)
    return seconds


# --- 2. dispatch over the real protocol ----------------------------------------------------------


async def serve(token: str, data_dir: str, files: bool = True) -> None:
    from aiohttp import web

    from primus_runtime.am.master import ApplicationMaster
    from primus_runtime.am.server import build_app
    from primus_runtime.spec import JobSpec
    from simulated_backend import SimulatedBackend

    spec = JobSpec.from_dict({
        "name": "dispatch-bench",
        "roles": [{"name": "worker", "replicas": EXECUTORS, "command": ["true"], "consumes_input": True}],
        "am": {"heartbeat_interval": 1.0, "heartbeat_timeout": 60.0},
        "input": {"sources": [{"name": "in", "path": data_dir, "success_marker": None}],
                  "task_size": f"{TASK_BYTES}B", "max_tasks_per_executor": 1, "prefetch": 1},
    })
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{sock.getsockname()[1]}"
    # The AM keeps its files (status, event log, AM and task journals) as every real AM does.
    (Path(data_dir) / "am").mkdir(exist_ok=True)
    status = Path(data_dir) / "am" / "status.json" if files else None
    am = ApplicationMaster(spec, "bench-app", SimulatedBackend(), status_path=status)
    await am.start(address)
    runner = web.AppRunner(build_app(am, token), access_log=None, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock, backlog=2048).start()
    print(address, flush=True)
    await asyncio.Event().wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def load(token: str, port: int, am_pid: int) -> tuple[float, int, float, float, float]:
    conns = await connect(port, CONNS)
    t = time.perf_counter()
    while True:  # the AM scans in the background: wait until every task is known
        [data] = await fan_out(conns[:1], [http(token, protocol.API_PREFIX + "/data")], bool, "GET data")
        if data["scan_complete"]:
            break
        await asyncio.sleep(0.2)
    scan = time.perf_counter() - t
    [listing] = await fan_out(conns[:1], [http(token, protocol.API_PREFIX + "/executors")], bool, "GET executors")
    exs = listing["executors"]
    await fan_out(conns, [http(token, protocol.REGISTER_PATH, {
        "id": e["id"], "role": e["role"], "index": e["index"], "incarnation": e["incarnation"],
        "host": "127.0.0.1", "ports": [], "pid": 0}) for e in exs], lambda r: r.get("ok") is True, "register")
    starts = await fan_out(conns, [http(token, protocol.HEARTBEAT_PATH, {
        "id": e["id"], "incarnation": e["incarnation"], "state": "registered", "cluster_version": 0,
        "wait": True}) for e in exs], lambda r: r.get("command") == protocol.CMD_START, "the start heartbeat")
    version = starts[-1]["start"]["cluster"]["version"]
    ops = beats = 0
    end = time.perf_counter() + SECONDS
    exhausted = False

    async def run(c: int) -> None:
        nonlocal ops, beats, exhausted
        mine = {e["id"]: [] for e in exs[c::CONNS]}
        by_id = {e["id"]: e for e in exs[c::CONNS]}
        while time.perf_counter() < end and not exhausted:
            for ex_id, held in mine.items():
                e = by_id[ex_id]
                status, body = await call(conns[c], http(token, protocol.HEARTBEAT_PATH, {
                    "id": ex_id, "incarnation": e["incarnation"], "state": "running", "cluster_version": version,
                    "wait": False, "need_tasks": 2, "done": held}))
                if status != 200:
                    raise SystemExit(f"heartbeat answered {status}: {body[:200]!r}")
                reply = json.loads(body)
                ops += len(held)
                held[:] = [task["task_id"] for task in reply.get("tasks", ())]
                ops += len(held)
                beats += 1
                exhausted = exhausted or bool(reply.get("data_exhausted"))
    t, cpu = time.perf_counter(), cpu_seconds(am_pid)
    await asyncio.gather(*(run(c) for c in range(CONNS)))
    seconds, cpu = time.perf_counter() - t, cpu_seconds(am_pid) - cpu
    return ops / seconds, beats, seconds, scan, cpu


def spawn_am(token: str, data_dir: str, files: bool) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, __file__, "serve", token, data_dir, "files" if files else "none"],
                            stdout=subprocess.PIPE, text=True)
    if not select.select([proc.stdout], [], [], 60)[0]:
        proc.kill()
        raise SystemExit("the AM printed no address within 60 s")
    return proc


@contextlib.contextmanager
def am_with_tasks(tasks: int, files: bool = True) -> Iterator[tuple[subprocess.Popen, str, str]]:
    """A real AM (``spawn_am``) whose input is a sparse file of ``tasks`` tasks: (its process, its token,
    its address). It is killed on the way out, also on Ctrl-C and errors: it never outlives the bench."""
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory() as data_dir:
        with open(Path(data_dir) / "input.txt", "wb") as f:
            f.truncate(tasks * TASK_BYTES)  # sparse: the AM only plans byte ranges of it
        proc = spawn_am(token, data_dir, files)
        try:
            assert proc.stdout is not None
            address = proc.stdout.readline().strip()
            if not address:
                raise SystemExit(f"the AM failed (exit {proc.wait()})")
            yield proc, token, address
        finally:
            proc.kill()
            proc.wait()


def dispatch_round(files: bool) -> float:
    """One dispatch over the real protocol (the AM with its files or without): tasks/s; prints its figures."""
    with am_with_tasks(TASKS, files) as (proc, token, address):
        rate, beats, seconds, scan, cpu = asyncio.run(load(token, int(address.rsplit(":", 1)[1]), proc.pid))
        rss = peak_rss_mib(proc.pid)
    print(f"dispatch {'with' if files else 'without'} the AM's files: {rate:,.0f} task assignments+completions/s "
          f"({rate / GOAL:.2f}x the goal of {GOAL:,}/s); {beats:,} heartbeats in {seconds:.1f} s from "
          f"{EXECUTORS:,} executors, AM CPU {cpu / beats * 1e6:.0f} us per heartbeat; AM scanned {TASKS:,} tasks "
          f"in {scan:.1f} s; AM peak RSS {rss:.0f} MiB", flush=True)
    return rate


def main() -> None:
    build = task_build_seconds(TASKS)
    print(f"task build: {TASKS:,} listed files -> tasks in {build:.1f} s", flush=True)
    if os.environ.get("NO_FILES") == "1":
        dispatch_round(files=False)
        return
    with_files, without = [], []
    for _ in range(ROUNDS):
        with_files.append(dispatch_round(files=True))
        without.append(dispatch_round(files=False))
    rate, base = statistics.median(with_files), statistics.median(without)
    print(f"dispatch with the journals vs without, median of {ROUNDS} rounds: {rate:,.0f} vs {base:,.0f} task "
          f"assignments+completions/s: {rate / base:.2f}x")


if __name__ == "__main__":
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    if sys.argv[1:2] == ["serve"]:
        asyncio.run(serve(sys.argv[2], sys.argv[3], sys.argv[4:5] != ["none"]))
    else:
        main()
