"""AM heartbeat capacity and latency under 1,000 simulated executors: ``python bench/heartbeat.py``.

Three processes, all on 127.0.0.1: two servers, a real ApplicationMaster with its aiohttp API and a
bare aiohttp server (the baseline), and this one, the load generator, speaking the real executor
protocol to the AM: register all 1,000, take the start command (gang barrier), then heartbeat
state=running. Capacity: saturated closed loop. Latency: open loop at half the AM's capacity, timed
from each request's *scheduled* send so that a stalled server cannot hide queueing. Both servers are
measured in alternating 1 s slices, so that other load on this small machine hits them alike.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import secrets
import select
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiohttp import web

from primus_runtime import protocol
from primus_runtime.am.main import tune_collector
from primus_runtime.am.master import ApplicationMaster
from primus_runtime.am.server import build_app
from primus_runtime.spec import AMSettings, JobSpec, Role

# The simulated backend is a test double: it lives with the tests (tests/simulated_backend.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from simulated_backend import SimulatedBackend  # noqa: E402

EXECUTORS = 1000
CAPACITY_CONNS = 50  # closed loop: 20 executors per connection, one request in flight on each
LATENCY_CONNS = 200  # open loop: a connection's turn comes every 200/rate s, far above a reply time
WARMUP, SLICES = 1.0, 5  # per server and loop: a warm-up, then 5 measured slices of 1 s
NONE_BODY = json.dumps({"command": protocol.CMD_NONE}).encode()
now = time.perf_counter


# --- server processes -----------------------------------------------------------------------------


async def bare_heartbeat(request: web.Request) -> web.Response:
    # The floor: what aiohttp alone costs to parse a small JSON body and answer a small one.
    json.loads(await request.read())
    return web.Response(body=json.dumps({"command": "none"}).encode(), content_type="application/json")


async def serve(kind: str, token: str) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{sock.getsockname()[1]}"
    if kind == "am":
        spec = JobSpec(name="heartbeat-bench", roles=[Role(name="worker", replicas=EXECUTORS, command=["true"])],
                       am=AMSettings(heartbeat_interval=1.0, heartbeat_timeout=30.0))  # nobody lost on ramp-up
        # The load generator plays the executors; the AM keeps its files (status, event log, journal)
        # as every real AM does.
        am = ApplicationMaster(spec, "bench-app", SimulatedBackend(),
                               status_path=Path(tempfile.mkdtemp(prefix="heartbeat-bench-")) / "status.json")
        await am.start(address)
        app = build_app(am, token)
    else:
        app = web.Application()
        app.router.add_post(protocol.HEARTBEAT_PATH, bare_heartbeat)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)  # as am/main.py serves
    await runner.setup()
    await web.SockSite(runner, sock, backlog=2048).start()
    tune_collector()  # the AM process's collector settings, for both servers: the same process, two handlers
    print(address, flush=True)
    await asyncio.Event().wait()  # until the load generator's process kills us


# --- load generator -------------------------------------------------------------------------------


def http(token: str, path: str, body: dict | None = None) -> bytes:
    """One pre-encoded HTTP/1.1 keep-alive request: POST with a JSON body, else GET."""
    data = json.dumps(body).encode() if body is not None else b""
    return (f"{'POST' if body is not None else 'GET'} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


async def call(conn, request: bytes) -> tuple[int, bytes]:
    """Send one request, read its reply; only the status line and Content-Length are parsed."""
    reader, writer = conn
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    at = head.lower().index(b"content-length:") + 15
    return int(head[9:12]), await reader.readexactly(int(head[at:head.index(b"\r\n", at)]))


async def connect(port: int, n: int) -> list:
    return [await asyncio.open_connection("127.0.0.1", port) for _ in range(n)]


async def fan_out(conns, requests: list[bytes], ok, what: str) -> list[dict]:
    """Send each request once, spread over the connections; the JSON replies, all checked by ok()."""
    replies: list = [None] * len(requests)

    async def one(c: int) -> None:
        for i in range(c, len(requests), len(conns)):
            status, body = await call(conns[c], requests[i])
            replies[i] = json.loads(body) if status == 200 else {"status": status, "body": body[:200]}
    await asyncio.gather(*(one(c) for c in range(len(conns))))
    bad = [r for r in replies if not ok(r)]
    if bad:
        raise SystemExit(f"{len(bad)} unexpected replies to {what}, e.g. {str(bad[0])[:300]}")
    return replies


async def bring_up(conns, token: str) -> list[bytes]:
    """Register every executor and take it to running; return its steady heartbeat request."""
    t = now()
    [listing] = await fan_out(conns[:1], [http(token, protocol.API_PREFIX + "/executors")], bool, "GET executors")
    exs = listing["executors"]
    await fan_out(conns, [http(token, protocol.REGISTER_PATH, {
        "id": e["id"], "role": e["role"], "index": e["index"], "incarnation": e["incarnation"],
        "host": "127.0.0.1", "ports": [20000 + e["index"]], "pid": 0}) for e in exs],
        lambda r: r.get("ok") is True, "register")
    # All registered, so the gang barrier is open: a wait=true heartbeat returns the start command.
    starts = await fan_out(conns, [http(token, protocol.HEARTBEAT_PATH, {
        "id": e["id"], "incarnation": e["incarnation"], "state": "registered", "cluster_version": 0,
        "wait": True}) for e in exs], lambda r: r.get("command") == protocol.CMD_START, "the start heartbeat")
    beats = [http(token, protocol.HEARTBEAT_PATH, {
        "id": e["id"], "incarnation": e["incarnation"], "state": "running",
        "cluster_version": s["start"]["cluster"]["version"], "wait": False}) for e, s in zip(exs, starts, strict=True)]
    await fan_out(conns, beats, lambda r: r.get("command") == "none", "the first running heartbeat")
    print(f"  {len(exs)} executors registered, started and running in {now() - t:.1f} s", flush=True)
    gc.collect()
    gc.freeze()  # the bring-up garbage is gone, the rest stays: no long collections in our timings
    return beats


class Tally:
    """Replies that arrived inside the measured slices, errors anywhere, latencies in ms."""

    def __init__(self):
        self.count, self.seconds, self.errors, self.sample, self.latencies = 0, 0.0, 0, "", []

    def check(self, status: int, body: bytes) -> None:
        if status != 200 or body != NONE_BODY:
            self.errors += 1
            self.sample = self.sample or f"HTTP {status}: {body[:200]!r}"


async def drive(conns, beats: list[bytes], seconds: float, tally: Tally, rate: float = 0.0) -> None:
    """rate 0: closed loop, each connection sends its next heartbeat the moment the previous reply
    arrives. rate > 0: open loop, slot k is due at t0 + k/rate whatever the replies do and goes on
    connection k % n; its latency counts from that due time, so queueing cannot hide."""
    n, t0 = len(conns), now()
    end = t0 + seconds

    async def run(c: int) -> None:
        mine, k = beats[c::n], 0
        while (due := t0 + (c + k * n) / rate if rate else now()) < end:
            if due > now():
                await asyncio.sleep(due - now())
            status, body = await call(conns[c], mine[k % len(mine)])
            t, k = now(), k + 1
            tally.check(status, body)
            tally.count += t < end
            tally.latencies.append((t - due) * 1000)
    await asyncio.gather(*(run(c) for c in range(n)))
    tally.seconds += seconds


def cpu(pid: int | None = None) -> float:
    """CPU seconds (Linux /proc) of a process, or of the whole machine; steal counted as busy."""
    if pid is None:  # cpu user nice system idle iowait irq softirq steal
        return sum(int(f) for i, f in enumerate(open("/proc/stat").readline().split()[1:9]) if i not in (3, 4)) \
            / os.sysconf("SC_CLK_TCK")
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def compare(servers: dict, pools: dict, beats: list[bytes], rate: float) -> dict:
    """Both servers in alternating 1 s slices after a warm-up each, so other load hits them alike."""
    tallies = {name: Tally() for name in servers}
    used = dict.fromkeys([*servers, "me", "machine"], 0.0)
    for name in servers:
        await drive(pools[name], beats, WARMUP, Tally(), rate)
    for _ in range(SLICES):
        for name, (_, pid) in servers.items():
            before = cpu(pid), time.process_time(), cpu()
            await drive(pools[name], beats, 1.0, tallies[name], rate)
            used[name] += cpu(pid) - before[0]
            used["me"] += time.process_time() - before[1]
            used["machine"] += cpu() - before[2]
    out: dict = {name: {"rate": t.count / t.seconds, "server_cpu": used[name] / t.seconds, "errors": t.errors,
                        "sample": t.sample, "p50": (ms := sorted(t.latencies))[len(ms) // 2],
                        "p99": ms[int(len(ms) * 0.99)], "max": ms[-1]} for name, t in tallies.items()}
    wall = SLICES * len(servers)
    out["client_cpu"] = used["me"] / wall
    out["others_cpu"] = (used["machine"] - used["me"] - sum(used[name] for name in servers)) / wall
    return out


async def load(token: str, servers: dict[str, tuple[int, int]]) -> tuple[dict, dict, float]:
    """Bring the AM's 1,000 executors up; measure capacity (closed loop), then latency (open loop)."""
    pools = {name: await connect(port, CAPACITY_CONNS) for name, (port, _) in servers.items()}
    beats = await bring_up(pools["am"], token)  # the bare server gets the same bytes; it only parses them
    capacity = await compare(servers, pools, beats, 0.0)
    rate = capacity["am"]["rate"] / 2
    # Enough connections that none still has a request in flight when its next one is due.
    pools = {name: await connect(port, LATENCY_CONNS) for name, (port, _) in servers.items()}
    return capacity, await compare(servers, pools, beats, rate), rate


# --- main: spawns the servers, then is the load generator -----------------------------------------


def spawn(procs: list, kind: str, token: str) -> tuple[int, int]:
    """Start a server process; return the port it printed once listening, and its pid."""
    proc = subprocess.Popen([sys.executable, __file__, "serve", kind, token], stdout=subprocess.PIPE, text=True)
    procs.append(proc)
    if not select.select([proc.stdout], [], [], 20)[0]:
        raise SystemExit(f"the {kind} server printed no address within 20 s")
    address = proc.stdout.readline().strip()
    if not address:
        raise SystemExit(f"the {kind} server failed (exit {proc.wait()})")
    return int(address.rsplit(":", 1)[1]), proc.pid


def main() -> None:
    token = secrets.token_urlsafe(24)  # any secret will do
    procs: list[subprocess.Popen] = []
    try:
        servers = {"am": spawn(procs, "am", token), "bare": spawn(procs, "bare", token)}
        capacity, latency, rate = asyncio.run(asyncio.wait_for(load(token, servers), 50))
    finally:  # also on Ctrl-C and errors: no server outlives us
        for proc in procs:
            proc.kill()
            proc.wait()
    for what, res in (("closed loop", capacity), (f"open loop at {rate:.0f}/s offered", latency)):
        for name, r in (("AM", res["am"]), ("bare aiohttp", res["bare"])):
            lat = f", latency p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms, max {r['max']:.1f} ms" * (res is latency)
            print(f"{what}, {name}: {r['rate']:.0f} heartbeats/s (server CPU {r['server_cpu']:.0%}){lat}; "
                  f"errors (not 200 + command none) {r['errors']} {r['sample']}")
        others = max(0.0, res["others_cpu"])  # /proc/stat counts by ticks: approximate
        print(f"{what}: load generator CPU {res['client_cpu']:.0%}; other processes and steal ~{others:.0%} "
              f"of a core" + (" - a busy machine, noisy figures" * (others > 0.15)))
    a, b = capacity["am"]["rate"], capacity["bare"]["rate"]
    print(f"heartbeat capacity: {a:.0f}/s ({a / b:.2f}x bare aiohttp {b:.0f}/s); p99 at {rate:.0f}/s offered: "
          f"{latency['am']['p99']:.1f} ms (bare aiohttp {latency['bare']['p99']:.1f} ms)")


if __name__ == "__main__":
    try:  # the loop am/main.py uses, for the servers and the load generator alike
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    if sys.argv[1:2] == ["serve"]:
        try:
            asyncio.run(serve(sys.argv[2], sys.argv[3]))
        except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the main process reports it
            pass
    else:
        main()
