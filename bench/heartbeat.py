"""AM heartbeat throughput and latency under 1,000 simulated executors.

    python bench/heartbeat.py

Three processes, all on 127.0.0.1: this one (orchestrates, mostly idle), a
server (a real ApplicationMaster + its aiohttp API, later a bare aiohttp
server as the baseline) and a load generator speaking the real executor
protocol: register all 1,000, fetch the start command (gang barrier), then
heartbeat with state=running. Phase 1 is a saturated closed loop (capacity),
phase 2 an open loop at half that capacity (latency, measured from the
scheduled send time so a slow server cannot hide queueing). The last line is
the headline figure against the bare-aiohttp baseline.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import select
import socket
import subprocess
import sys
import time

from aiohttp import web

from primus_runtime import protocol
from primus_runtime.am.master import ApplicationMaster
from primus_runtime.am.server import build_app
from primus_runtime.backends.base import ExecutorBackend, Launched
from primus_runtime.spec import AMSettings, JobSpec, Role

EXECUTORS = 1000
CAPACITY_CONNS = 50  # closed loop: 20 executors per connection, one request in flight each
LATENCY_CONNS = 200  # open loop: each connection sends every 200/rate s, far above any reply time
WARMUP, MEASURE = 1.0, 5.0
NONE_BODY = json.dumps({"command": protocol.CMD_NONE}).encode()
now = time.perf_counter


def use_uvloop() -> None:
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


# --- server process ------------------------------------------------------------------


class NullBackend(ExecutorBackend):
    """Spawns nothing: every executor is 'launched' at once; the load generator plays them."""

    async def start(self, events):
        self.events = events

    def check_fits(self, role, resources):
        return None

    async def launch(self, r):
        self.events.on_launched(Launched(r.role, r.index, r.incarnation, "127.0.0.1", [], {}))

    async def stop(self, role, index, incarnation, force):
        pass

    async def close(self):
        pass


async def bare_heartbeat(request: web.Request) -> web.Response:
    # The floor: what aiohttp costs for "parse a small JSON body, answer a small JSON body".
    json.loads(await request.read())
    return web.Response(body=json.dumps({"command": "none"}).encode(), content_type="application/json")


async def serve(kind: str, token: str) -> None:
    am = None
    if kind == "am":
        spec = JobSpec(name="heartbeat-bench", roles=[Role(name="worker", replicas=EXECUTORS, command=["true"])],
                       am=AMSettings(heartbeat_interval=1.0, heartbeat_timeout=30.0))  # nobody lost on ramp-up
        am = ApplicationMaster(spec, "bench-app", NullBackend())
        app = build_app(am, token)
    else:
        app = web.Application()
        app.router.add_post(protocol.HEARTBEAT_PATH, bare_heartbeat)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)  # as am/main.py
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock, backlog=2048).start()
    address = "127.0.0.1:%d" % sock.getsockname()[1]
    if am is not None:
        await am.start(address)
    print(address, flush=True)
    await asyncio.Event().wait()  # until the orchestrator kills us


# --- load generator process -----------------------------------------------------------


def http(method: str, path: str, token: str, body: dict | None = None) -> bytes:
    """One pre-encoded HTTP/1.1 keep-alive request."""
    data = json.dumps(body).encode() if body is not None else b""
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data


async def call(conn, request: bytes) -> tuple[int, bytes]:
    """Send one request, read its reply: only the status line and Content-Length are parsed."""
    reader, writer = conn
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    at = head.lower().index(b"content-length:") + 15
    length = int(head[at:head.index(b"\r\n", at)])
    return int(head[9:12]), await reader.readexactly(length)


async def pool(port: int, n: int) -> list:
    return [await asyncio.open_connection("127.0.0.1", port) for _ in range(n)]


async def fan_out(conns, requests: list[bytes]) -> list[dict]:
    """Send each request once, spread over the connections; the JSON replies in order."""
    replies: list = [None] * len(requests)

    async def one(c: int) -> None:
        for i in range(c, len(requests), len(conns)):
            status, body = await call(conns[c], requests[i])
            replies[i] = json.loads(body) if status == 200 else {"status": status, "body": body[:200]}
    await asyncio.gather(*(one(c) for c in range(len(conns))))
    return replies


def expect(replies: list[dict], ok, what: str) -> None:
    bad = [r for r in replies if not ok(r)]
    if bad:
        raise SystemExit(f"{len(bad)} unexpected replies to {what}, e.g. {str(bad[0])[:300]}")


async def bring_up(port: int, token: str) -> list[bytes]:
    """Register every executor and take it to running; its steady heartbeat request for each."""
    conns = await pool(port, CAPACITY_CONNS)
    [listing] = await fan_out(conns[:1], [http("GET", protocol.API_PREFIX + "/executors", token)])
    exs = listing["executors"]
    t = now()
    regs = [http("POST", protocol.REGISTER_PATH, token, {"id": e["id"], "role": e["role"], "index": e["index"],
            "incarnation": e["incarnation"], "host": "127.0.0.1", "ports": [20000 + e["index"]], "pid": 0})
            for e in exs]
    expect(await fan_out(conns, regs), lambda r: r.get("ok") is True, "register")
    # The gang barrier is open once the last register returned: wait=true hands out the start command.
    waits = [http("POST", protocol.HEARTBEAT_PATH, token, {"id": e["id"], "incarnation": e["incarnation"],
             "state": "registered", "cluster_version": 0, "wait": True}) for e in exs]
    starts = await fan_out(conns, waits)
    expect(starts, lambda r: r.get("command") == protocol.CMD_START, "the start heartbeat")
    beats = [http("POST", protocol.HEARTBEAT_PATH, token, {"id": e["id"], "incarnation": e["incarnation"],
              "state": "running", "cluster_version": s["start"]["cluster"]["version"], "wait": False})
             for e, s in zip(exs, starts)]
    # Like the real executor, ignore a repeated start once running: the AM re-queues one for every
    # executor still registered whenever another one reports running.
    firsts = await fan_out(conns, beats)
    expect(firsts, lambda r: r.get("command") in (protocol.CMD_NONE, protocol.CMD_START), "the first running heartbeat")
    expect(await fan_out(conns, beats), lambda r: r.get("command") == protocol.CMD_NONE, "the second running heartbeat")
    repeated = sum(r["command"] == protocol.CMD_START for r in firsts)
    print(f"  {len(exs)} executors registered, started and running in {now() - t:.1f} s "
          f"({repeated} got a repeated start command on their first running heartbeat)", flush=True)
    for _, writer in conns:
        writer.close()
    return beats


class Tally:
    def __init__(self):
        self.count, self.errors, self.sample, self.latencies = 0, 0, "", []

    def check(self, status: int, body: bytes) -> None:
        if status != 200 or body != NONE_BODY:
            self.errors += 1
            self.sample = self.sample or f"HTTP {status}: {body[:200]!r}"


async def closed_loop(port: int, beats: list[bytes]) -> Tally:
    """Each connection sends its next heartbeat the moment the previous reply arrives."""
    conns, tally = await pool(port, CAPACITY_CONNS), Tally()
    start = now() + WARMUP
    end = start + MEASURE

    async def run(c: int) -> None:
        mine = beats[c::CAPACITY_CONNS]
        i = 0
        while True:
            status, body = await call(conns[c], mine[i % len(mine)])
            i, t = i + 1, now()
            tally.check(status, body)
            if t >= end:
                return
            tally.count += t >= start
    await asyncio.gather(*(run(c) for c in range(CAPACITY_CONNS)))
    for _, writer in conns:
        writer.close()
    return tally


async def open_loop(port: int, beats: list[bytes], rate: float) -> Tally:
    """Send slot k at t0 + k/rate whatever the replies do; slot k goes on connection k % n."""
    conns, tally = await pool(port, LATENCY_CONNS), Tally()
    t0 = now() + 0.05
    start = t0 + 0.5  # a short warm-up: connections and the server are already warm
    end = start + MEASURE

    async def run(c: int) -> None:
        mine = beats[c::LATENCY_CONNS]
        k = 0
        while (due := t0 + (c + k * LATENCY_CONNS) / rate) < end:
            if due > now():
                await asyncio.sleep(due - now())
            status, body = await call(conns[c], mine[k % len(mine)])
            t = now()
            tally.check(status, body)
            if due >= start:
                tally.latencies.append(t - due)
                tally.count += t < end
            k += 1
    await asyncio.gather(*(run(c) for c in range(LATENCY_CONNS)))
    for _, writer in conns:
        writer.close()
    return tally


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of a process, from /proc: shows which side is saturated."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def load(kind: str, port: int, token: str, server_pid: int) -> dict:
    if kind == "am":
        beats = await bring_up(port, token)
    else:  # the bare server only parses the body: the same heartbeat bytes, nothing registered
        beats = [http("POST", protocol.HEARTBEAT_PATH, token, {"id": f"worker-{i}", "incarnation": "%012x" % i,
                  "state": "running", "cluster_version": EXECUTORS, "wait": False}) for i in range(EXECUTORS)]
    wall, mine, theirs = now(), time.process_time(), cpu_seconds(server_pid)
    cap = await closed_loop(port, beats)
    wall = now() - wall
    out = {"capacity": cap.count / MEASURE, "errors": cap.errors, "sample": cap.sample,
           "client_cpu": (time.process_time() - mine) / wall, "server_cpu": (cpu_seconds(server_pid) - theirs) / wall}
    if kind == "am":
        rate = out["capacity"] / 2
        lat = await open_loop(port, beats, rate)
        ms = sorted(x * 1000 for x in lat.latencies)
        out.update(offered=rate, achieved=lat.count / MEASURE, p50=ms[len(ms) // 2], p99=ms[int(len(ms) * 0.99)],
                   max=ms[-1], errors=out["errors"] + lat.errors, sample=out["sample"] or lat.sample)
    return out


# --- orchestrator -----------------------------------------------------------------------


def spawn(*args: str, timeout: float) -> tuple[subprocess.Popen, str]:
    """Start this script in another mode; return it and the first line it prints."""
    proc = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True)
    if not select.select([proc.stdout], [], [], timeout)[0]:
        proc.kill()
        raise SystemExit(f"{args[0]} {args[1]}: nothing printed within {timeout:g} s")
    return proc, proc.stdout.readline().rstrip("\n")


def measure(kind: str, token: str, procs: list) -> dict:
    server, address = spawn("serve", kind, token, timeout=15)
    procs.append(server)
    port = address.rsplit(":", 1)[1]
    gen, line = spawn("load", kind, port, token, str(server.pid), timeout=40)
    procs.append(gen)
    while line.startswith("  "):  # progress lines come first, the result last
        print(line, flush=True)
        line = gen.stdout.readline().rstrip("\n")
    if not line.startswith("{"):
        raise SystemExit(f"load generator failed against the {kind} server (exit {gen.wait()})")
    return json.loads(line)


def main() -> None:
    token = secrets.token_urlsafe(24)
    procs: list[subprocess.Popen] = []
    try:
        am = measure("am", token, procs)
        print(f"AM closed loop: {am['capacity']:.0f} heartbeats/s over {EXECUTORS} executors, "
              f"{CAPACITY_CONNS} connections (server CPU {am['server_cpu']:.0%}, load generator CPU "
              f"{am['client_cpu']:.0%})")
        print(f"AM open loop at {am['offered']:.0f}/s offered: achieved {am['achieved']:.0f}/s, latency "
              f"p50 {am['p50']:.1f} ms, p99 {am['p99']:.1f} ms, max {am['max']:.1f} ms")
        print(f"errors (non-200 or command != none): {am['errors']}" + (f", e.g. {am['sample']}" if am["errors"] else ""))
        for proc in procs:
            proc.kill()
        bare = measure("bare", token, procs)
        print(f"bare aiohttp closed loop: {bare['capacity']:.0f}/s (server CPU {bare['server_cpu']:.0%}, "
              f"load generator CPU {bare['client_cpu']:.0%}, errors {bare['errors']})")
        print(f"heartbeat capacity: {am['capacity']:.0f}/s ({am['capacity'] / bare['capacity']:.2f}x bare aiohttp "
              f"{bare['capacity']:.0f}/s); p99 at {am['offered']:.0f}/s offered: {am['p99']:.1f} ms")
    finally:  # also on Ctrl-C and errors: no server or load generator outlives us
        for proc in procs:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("serve", "load"):
        use_uvloop()
        if sys.argv[1] == "serve":
            asyncio.run(serve(sys.argv[2], sys.argv[3]))
        else:
            result = asyncio.run(asyncio.wait_for(load(sys.argv[2], int(sys.argv[3]), sys.argv[4],
                                                       int(sys.argv[5])), 40))
            print(json.dumps(result), flush=True)
    else:
        main()
