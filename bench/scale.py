"""One AM at the scale Primus exists for: ``python bench/scale.py`` (EXECUTORS, TASKS, STEADY, LOADERS,
TASK_BEATS from the environment; defaults 10,000 executors, 1,000,000 tasks, 20 s, 2 load processes, 5).

A real ApplicationMaster with its aiohttp API in its own process (its backend starts nothing: the
executors are played over the real protocol). The job: 10 ps and EXECUTORS - 10 workers that see
only the ps (``peers: [ps]``, as a parameter-server job at this size should), gang start, the
workers consuming an input of TASKS tasks (a sparse file in 64-byte splits). LOADERS processes play
the executors, each with its own keep-alive connection as a real executor has: register, long-poll
for the start command, then heartbeat at the interval the AM asks for. A worker reads each task for
TASK_BEATS heartbeats, reporting its position at each, then reports it done and takes the next: at
10,000 workers and the AM's 3 s interval, ~670 tasks done and handed out a second (``bench/dispatch.py``
measures dispatch alone, a task done at every heartbeat).

It prints: register -> every executor started; steady-state heartbeat latency p50/p99 (from each
request's scheduled time, so a stalled AM cannot hide queueing) at the AM's interval; the AM's
memory; the time to declare 100 executors that stop heartbeating lost (and that no healthy one was
lost); a status read's size and time, full and summary. The last line holds the figures against
the goals: started within 5 s of the last registration, p99 <= 50 ms, RSS <= 2 GiB, the silent ones
lost within heartbeat_timeout + one interval, no healthy one lost.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import random
import secrets
import socket
import sys
import tempfile
import time
from pathlib import Path

from heartbeat import http

from primus_runtime import protocol

# The simulated backend is a test double: it lives with the tests (tests/simulated_backend.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

EXECUTORS = int(os.environ.get("EXECUTORS", 10_000))
TASKS = int(os.environ.get("TASKS", 1_000_000))
STEADY = float(os.environ.get("STEADY", 20))
LOADERS = int(os.environ.get("LOADERS", 2))
PS = min(10, EXECUTORS // 2)
SILENT = min(100, (EXECUTORS - PS) // 10)
TIMEOUT = 10.0  # am.heartbeat_timeout
ARRIVING = 200  # executors of a load process connecting and registering at once
TASK_BYTES = 64
TASK_BEATS = int(os.environ.get("TASK_BEATS", 5))
GOALS = {"start_s": 5.0, "p99_ms": 50.0, "rss_gib": 2.0}
now = time.monotonic  # CLOCK_MONOTONIC: the same clock in every process of the machine


# --- the AM ---------------------------------------------------------------------------------------


async def serve(token: str, data_dir: str) -> None:
    from aiohttp import web

    from primus_runtime.am.main import tune_collector
    from primus_runtime.am.master import ApplicationMaster
    from primus_runtime.am.server import build_app
    from primus_runtime.spec import JobSpec
    from simulated_backend import SimulatedBackend

    job: dict = {
        "name": "scale-bench",
        "roles": [{"name": "ps", "replicas": PS, "command": ["true"], "peers": ["ps"]},
                  {"name": "worker", "replicas": EXECUTORS - PS, "command": ["true"], "peers": ["ps"],
                   "consumes_input": TASKS > 0}],
        "am": {"heartbeat_interval": 1.0, "heartbeat_timeout": TIMEOUT},
    }
    if TASKS:
        job["input"] = {"sources": [{"name": "in", "path": data_dir, "success_marker": None}],
                        "task_size": f"{TASK_BYTES}B", "max_tasks_per_executor": 1, "prefetch": 1}
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    (Path(data_dir) / "am").mkdir()
    am = ApplicationMaster(JobSpec.from_dict(job), "scale-app", SimulatedBackend(),
                           status_path=Path(data_dir) / "am" / "status.json")
    await am.start(f"127.0.0.1:{sock.getsockname()[1]}")
    runner = web.AppRunner(build_app(am, token), access_log=None, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock, backlog=4096).start()
    tune_collector()  # as the AM process does (am/main.py)
    print(sock.getsockname()[1], flush=True)
    await asyncio.Event().wait()


# --- a load process: its share of the executors ---------------------------------------------------


class Player:
    """One executor over its own connection."""

    def __init__(self, e: dict, port: int, token: str):
        self.e, self.port, self.token = e, port, token
        self.interval = 1.0
        self.version = 0
        self.done: list[str] = []
        self.held: list[str] = []
        self.beats_on_task = 0
        self.registered_at = self.started_at = 0.0
        self.silent_at = float("inf")
        self.killed = ""
        self.latencies: list[float] = []

    async def call(self, path: str, body: dict) -> dict:
        self.writer.write(http(self.token, path, body))
        head = await self.reader.readuntil(b"\r\n\r\n")
        at = head.lower().index(b"content-length:") + 15
        data = await self.reader.readexactly(int(head[at:head.index(b"\r\n", at)]))
        if head[9:12] != b"200":
            raise RuntimeError(f"{self.e['id']}: {path} answered {head[9:12]!r}: {data[:200]!r}")
        return json.loads(data)

    async def run(self, window: list[float], arriving: asyncio.Semaphore) -> None:
        e = self.e
        async with arriving:  # containers come up over a few seconds, not all in one instant
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            reply = await self.call(protocol.REGISTER_PATH, {
                "id": e["id"], "role": e["role"], "index": e["index"], "incarnation": e["incarnation"],
                "host": "10.0.0.1", "ports": [20000 + e["index"] % 40000], "pid": 1})
        if not reply.get("ok"):
            raise RuntimeError(f"{e['id']}: registration refused: {reply}")
        self.registered_at, self.interval = now(), float(reply["heartbeat_interval"])
        while True:
            reply = await self.beat(state="registered", wait=True)
            if reply["command"] == protocol.CMD_START:
                break
        self.started_at = now()
        self.version = reply["start"]["cluster"]["version"]
        due = now() + random.random() * self.interval  # executors start a little apart
        while due < self.silent_at and not self.killed:
            await asyncio.sleep(max(0.0, due - now()))
            consuming = e["role"] == "worker" and TASKS > 0
            reply = await self.beat(state="running", wait=False, **(self.data_report() if consuming else {}))
            if window[0] <= due < window[1]:
                self.latencies.append(now() - due)
            self.held += [task["task_id"] for task in reply.get("tasks") or ()]
            if reply["command"] == protocol.CMD_CLUSTER:
                self.version = reply["cluster"]["version"]
            elif reply["command"] == protocol.CMD_KILL:
                self.killed = reply.get("reason", "kill")
            due += self.interval
        self.writer.close()

    def data_report(self) -> dict:
        """Progress on the task held; every TASK_BEATS heartbeats it is done and the next one asked for."""
        self.beats_on_task += 1
        if self.held and self.beats_on_task >= TASK_BEATS:
            self.beats_on_task = 0
            done, self.held = self.held, []
            return {"need_tasks": 1, "held": [], "done": done}
        position = {"records": self.beats_on_task, "bytes": TASK_BYTES * self.beats_on_task // TASK_BEATS}
        progress = {task: position for task in self.held}
        return {"need_tasks": 0 if self.held else 1, "held": list(self.held), "progress": progress}

    async def beat(self, **fields) -> dict:
        return await self.call(protocol.HEARTBEAT_PATH, {
            "id": self.e["id"], "incarnation": self.e["incarnation"], "cluster_version": self.version, **fields})


def load(conn, executors: list[dict], port: int, token: str) -> None:
    """A load process: plays ``executors``; reports their start, then (told the measuring window and
    who falls silent when) their latencies and any kill."""
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass

    async def main() -> None:
        window = [float("inf"), float("inf")]
        players = [Player(e, port, token) for e in executors]
        arriving = asyncio.Semaphore(ARRIVING)
        runs = [asyncio.ensure_future(p.run(window, arriving)) for p in players]
        while not all(p.started_at for p in players):
            failed = [r for r in runs if r.done() and r.exception()]
            if failed:
                raise failed[0].exception()  # type: ignore[misc]
            await asyncio.sleep(0.05)
        conn.send({"registered": [min(p.registered_at for p in players), max(p.registered_at for p in players)],
                   "started": max(p.started_at for p in players), "interval": players[0].interval})
        loop = asyncio.get_running_loop()
        plan = await loop.run_in_executor(None, conn.recv)
        window[:] = plan["window"]
        for p in players:
            if p.e["id"] in plan["silent"]:
                p.silent_at = plan["silent_at"]
        await asyncio.sleep(max(0.0, plan["end"] - now()))
        for r in runs:
            r.cancel()
        conn.send({"latencies": [x for p in players for x in p.latencies],
                   "killed": {p.e["id"]: p.killed for p in players if p.killed}})

    asyncio.run(main())


# --- main -----------------------------------------------------------------------------------------


def get(port: int, token: str, path: str) -> tuple[bytes, float]:
    """One GET over a fresh connection: the body and the seconds it took."""
    t = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(http(token, path).replace(b"HTTP/1.1", b"HTTP/1.0", 1))
        data = b""
        while chunk := s.recv(1 << 20):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
        raise SystemExit(f"GET {path}: {head[:100]!r} {body[:300]!r}")
    return body, time.perf_counter() - t


def memory_mib(pid: int) -> tuple[float, float]:
    """The AM's resident memory now and at its peak, MiB."""
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def lost_workers(port: int, token: str) -> int:
    """Executors (incarnations, the replaced ones too) the AM declared lost, from its /metrics."""
    metrics = get(port, token, "/metrics")[0].decode()
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in metrics.splitlines()
               if line.startswith("primus_executor_ends_total{") and 'state="lost"' in line)


def progress(port: int, token: str) -> str:
    roles = json.loads(get(port, token, protocol.API_PREFIX + "/roles")[0])["roles"]
    return "; ".join(f"{r['name']}: " + ", ".join(f"{n} {k}" for k, n in r["states"].items() if n) for r in roles)


def spawn_am(token: str, data_dir: str):
    import subprocess
    proc = subprocess.Popen([sys.executable, __file__, "serve", token, data_dir], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip() if proc.stdout is not None else ""
    if not line:
        raise SystemExit(f"the AM failed (exit {proc.wait()})")
    return proc, int(line)


def bring_up(port: int, token: str) -> tuple[list, list, dict]:
    listing = json.loads(get(port, token, protocol.API_PREFIX + "/executors")[0])["executors"]
    shares = [listing[i::LOADERS] for i in range(LOADERS)]
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for share in shares:
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(target=load, args=(theirs, share, port, token), daemon=True)
        proc.start()
        pipes.append(mine)
        procs.append(proc)
    reports: list[dict] = []
    deadline = now() + 120
    while len(reports) < len(pipes):
        for pipe in pipes:
            if pipe.poll(0):
                reports.append(pipe.recv())
        if now() > deadline or not all(proc.is_alive() for proc in procs):
            raise SystemExit(f"the executors did not all start within 120 s: {progress(port, token)}")
        if int(now()) % 5 == 0:
            print(f"  starting: {progress(port, token)}", flush=True)
        time.sleep(1)
    first = min(r["registered"][0] for r in reports)
    last = max(r["registered"][1] for r in reports)
    started = max(r["started"] for r in reports)
    return pipes, procs, {"register_s": last - first, "start_s": started - last, "interval": reports[0]["interval"]}


def main() -> None:
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory() as data_dir:
        with open(Path(data_dir) / "input.txt", "wb") as f:
            f.truncate(TASKS * TASK_BYTES)  # sparse: the AM only plans byte ranges of it
        am, port = spawn_am(token, data_dir)
        try:
            run(am.pid, port, token)
        finally:
            am.kill()
            am.wait()


def run(pid: int, port: int, token: str) -> None:
    t = now()
    pipes, procs, up = bring_up(port, token)
    print(f"{EXECUTORS:,} executors ({PS} ps, {EXECUTORS - PS:,} workers), {TASKS:,} tasks: registered in "
          f"{up['register_s']:.2f} s; every executor started {up['start_s']:.2f} s after the last registration "
          f"({now() - t:.1f} s from the first connection)", flush=True)
    interval = up["interval"]  # what the AM asked its executors for
    workers = [f"worker-{i}" for i in range(0, EXECUTORS - PS, max(1, (EXECUTORS - PS) // SILENT))][:SILENT]
    window = [now() + 2 * interval, now() + 2 * interval + STEADY]
    silent_at = window[1] + 1.0
    end = silent_at + TIMEOUT + 3 * interval
    for pipe in pipes:
        pipe.send({"window": window, "silent": set(workers), "silent_at": silent_at, "end": end})
    time.sleep(max(0.0, window[1] - now()))
    rss, peak = memory_mib(pid)
    full, full_s = get(port, token, protocol.API_PREFIX + "/status?events=20")
    summary, summary_s = get(port, token, protocol.API_PREFIX + "/status?events=20&view=summary")
    time.sleep(max(0.0, silent_at - now()))
    detected = None
    while now() < end - 2.0:
        if lost_workers(port, token) >= len(workers):
            detected = now() - silent_at
            break
        time.sleep(0.1)
    results = []
    for pipe in pipes:
        if not pipe.poll(end - now() + 60):
            raise SystemExit("a load process never reported its latencies")
        results.append(pipe.recv())
    for proc in procs:
        proc.join(5)
    lost = lost_workers(port, token)
    latencies = sorted(x for r in results for x in r["latencies"])
    killed = {k: v for r in results for k, v in r["killed"].items() if k not in workers}
    p50, p99 = (latencies[int(len(latencies) * q)] * 1000 for q in (0.5, 0.99)) if latencies else (-1.0, -1.0)
    rate = len(latencies) / STEADY
    print(f"steady state: {len(latencies):,} heartbeats in {STEADY:g} s ({rate:,.0f}/s at the AM's interval "
          f"{interval:g} s): p50 {p50:.1f} ms, p99 {p99:.1f} ms", flush=True)
    print(f"AM memory: {rss:,.0f} MiB resident ({peak:,.0f} MiB peak)")
    print(f"status read: full {len(full) / 1024:,.0f} KiB in {full_s * 1000:.0f} ms, summary "
          f"{len(summary) / 1024:,.1f} KiB in {summary_s * 1000:.0f} ms")
    limit = TIMEOUT + interval
    print(f"silent executors: {len(workers)} stopped heartbeating; all declared lost after "
          f"{'never' if detected is None else f'{detected:.1f} s'} (timeout {TIMEOUT:g} s + interval {interval:g} s = "
          f"{limit:g} s); lost in all {lost}; healthy executors told to stop: {len(killed)}"
          + (f", e.g. {next(iter(killed.items()))}" if killed else ""))
    ok = {"start": up["start_s"] <= GOALS["start_s"], "p99": 0 <= p99 <= GOALS["p99_ms"],
          "rss": peak / 1024 <= GOALS["rss_gib"], "lost": detected is not None and detected <= limit,
          "healthy": not killed and lost == len(workers)}
    print(f"scale {EXECUTORS:,} executors / {TASKS:,} tasks: started {up['start_s']:.2f} s after the last "
          f"registration (goal <= {GOALS['start_s']:g}), heartbeat p99 {p99:.1f} ms at {interval:g} s "
          f"(goal <= {GOALS['p99_ms']:g}), AM peak RSS {peak / 1024:.2f} GiB (goal <= {GOALS['rss_gib']:g}), "
          f"silent lost in {'never' if detected is None else f'{detected:.1f}'} s (goal <= {limit:g}), healthy "
          f"lost {len(killed) + max(0, lost - len(workers))}; goals met {sum(ok.values())}/{len(ok)}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        try:
            import uvloop
            uvloop.install()
        except ImportError:
            pass
        asyncio.run(serve(sys.argv[2], sys.argv[3]))
    else:
        main()
