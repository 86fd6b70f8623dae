"""The web page under a big job: ``python bench/ui_load.py`` (EXECUTORS, TASKS, SECONDS from the environment).

A real ApplicationMaster with its aiohttp API in a second process (bench/dispatch.py's: its input a
sparse text file split into TASKS tasks), EXECUTORS executors played by this process over the real
protocol (a thread: each heartbeats once a second, reports its task done and takes the next), and
Debian's chromium, driven by Playwright, opening the job's page through a signed one-time link.

Figures: the page's first (contentful) paint, the time until its role table shows its first page of
executors and until a page of the task table is shown, all from the navigation's start by the
browser's own clock (the role table is checked: its first page of rows, and the total of EXECUTORS
in its pager); the sizes of what the page polls (the status summary, a role table's page) beside the
full status document; then the AM's CPU with the page open (it polls as it always does) against the
AM's CPU without it, measured before and after (their mean), SECONDS each. The last line is that ratio.

``EXECUTORS=10000 TASKS=100000 SECONDS=5 python ui_load.py`` from bench/ is the 10,000-executor run.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

from dispatch import am_with_tasks
from heartbeat import call, connect, cpu, fan_out, http

from primus_runtime import protocol
from primus_runtime.ui.auth import make_ticket

EXECUTORS = int(os.environ.get("EXECUTORS", 1000))
TASKS = int(os.environ.get("TASKS", 1_000_000))
SECONDS = float(os.environ.get("SECONDS", 10))
BEAT_EVERY = 1.0  # the AM's heartbeat interval in dispatch.py's spec
CONNS = 20
ROWS_PER_PAGE = 50  # a role table's page (app.js: EXECUTORS_PER_PAGE)
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class Executors:
    """EXECUTORS executors heartbeating on their own event loop, until stopped."""

    def __init__(self, token: str, port: int):
        self.token, self.port = token, port
        self.up = threading.Event()
        self.stopping = False
        self.error: BaseException | None = None
        self.beats = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by the main thread
            self.error = exc
            self.up.set()

    async def _main(self) -> None:
        conns = await connect(self.port, CONNS)
        [listing] = await fan_out(conns[:1], [self._http(protocol.API_PREFIX + "/executors")], bool, "GET executors")
        exs = listing["executors"]
        await fan_out(conns, [self._http(protocol.REGISTER_PATH, {
            "id": e["id"], "role": e["role"], "index": e["index"], "incarnation": e["incarnation"],
            "host": "127.0.0.1", "ports": [], "pid": 0}) for e in exs], lambda r: r.get("ok") is True, "register")
        starts = await fan_out(conns, [self._http(protocol.HEARTBEAT_PATH, {
            "id": e["id"], "incarnation": e["incarnation"], "state": "registered", "cluster_version": 0,
            "wait": True}) for e in exs], lambda r: r.get("command") == protocol.CMD_START, "the start heartbeat")
        version = starts[-1]["start"]["cluster"]["version"]
        self.up.set()
        await asyncio.gather(*(self._beat(conns[c], exs[c::CONNS], version) for c in range(CONNS)))

    async def _beat(self, conn, exs: list[dict], version: int) -> None:
        """Open loop: executor k of this connection is due at t0 + (k + n * round) * BEAT_EVERY / n."""
        held: dict[str, list[str]] = {e["id"]: [] for e in exs}
        t0, k = time.perf_counter(), 0
        while not self.stopping:
            e = exs[k % len(exs)]
            due = t0 + k * BEAT_EVERY / len(exs)
            if due > time.perf_counter():
                await asyncio.sleep(due - time.perf_counter())
            status, body = await call(conn, self._http(protocol.HEARTBEAT_PATH, {
                "id": e["id"], "incarnation": e["incarnation"], "state": "running", "cluster_version": version,
                "wait": False, "need_tasks": 1, "held": [], "done": held[e["id"]]}))
            if status != 200:
                raise SystemExit(f"heartbeat answered {status}: {body[:200]!r}")
            held[e["id"]] = [task["task_id"] for task in json.loads(body).get("tasks") or ()]
            self.beats += 1
            k += 1

    def _http(self, path: str, body: dict | None = None) -> bytes:
        return http(self.token, path, body)

    def check(self) -> None:
        if self.error is not None:
            raise SystemExit(f"the executors' load failed: {self.error!r}")


def wait_for_scan(token: str, port: int) -> float:
    async def poll() -> float:
        conns = await connect(port, 1)
        t = time.perf_counter()
        while True:
            [data] = await fan_out(conns, [http(token, protocol.API_PREFIX + "/data")], bool, "GET data")
            if data["scan_complete"]:
                return time.perf_counter() - t
            await asyncio.sleep(0.2)
    return asyncio.run(poll())


def am_cpu_over(pid: int, seconds: float, executors: Executors) -> float:
    """The AM's CPU, in cores, over the next ``seconds``."""
    before, t = cpu(pid), time.perf_counter()
    time.sleep(seconds)
    executors.check()
    return (cpu(pid) - before) / (time.perf_counter() - t)


def open_page(browser, base: str, token: str) -> tuple:
    """Sign in through a one-time link; the tab, and its paints and table time in ms from navigation."""
    tab = browser.new_page(viewport={"width": 1400, "height": 900})
    tab.goto(f"{base}/ui/login?ticket={make_ticket(token, 'bench')}")
    tab.wait_for_selector("#tasks tr[data-task]", timeout=120_000)
    tab.wait_for_function("['primus:tasks-shown', 'primus:executors-shown']"
                          ".every(n => performance.getEntriesByName(n).length)", timeout=120_000)
    # The page's own marks: this process (busy playing the executors) may notice the table late.
    table_ms, executors_ms = tab.evaluate("['primus:tasks-shown', 'primus:executors-shown'].map("
                                          "n => performance.getEntriesByName(n)[0].startTime)")
    check_role_table(tab)
    paints = dict(tab.evaluate("performance.getEntriesByType('paint').map(e => [e.name, e.startTime])"))
    return tab, paints, table_ms, executors_ms


def check_role_table(tab) -> None:
    """The role table shows its first page of executors, and its pager the total."""
    rows = tab.evaluate("document.querySelectorAll('#role-tables tbody tr').length")
    if rows != min(EXECUTORS, ROWS_PER_PAGE):
        raise SystemExit(f"the role table shows {rows} executors, not its first page of {min(EXECUTORS, ROWS_PER_PAGE)}")
    shown = tab.evaluate("document.querySelector('#role-tables .executor-range').textContent").strip()
    if shown != f"1-{min(EXECUTORS, ROWS_PER_PAGE):,} of {EXECUTORS:,}":
        raise SystemExit(f"the role table's pager says {shown!r}, not of {EXECUTORS:,} executors")


def sizes(tab) -> dict[str, int]:
    """Bytes of what the page polls, and of the full status document it no longer reads."""
    paths = {"summary": "status?view=summary&events=0", "role page": f"executors?role=worker&limit={ROWS_PER_PAGE}",
             "full": "status?events=0"}
    return {name: tab.evaluate(f"fetch('../api/v1/{path}').then(r => r.text()).then(t => t.length)")
            for name, path in paths.items()}


def main() -> None:
    if not os.path.exists(CHROMIUM):
        raise SystemExit(f"{CHROMIUM} is missing: scripts/install-browser.sh installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with am_with_tasks(TASKS) as (proc, token, address):
        port = int(address.rsplit(":", 1)[1])
        scan = wait_for_scan(token, port)
        executors = Executors(token, port)
        executors.thread.start()
        executors.up.wait(120)
        executors.check()
        print(f"AM: {TASKS:,} tasks scanned in {scan:.1f} s; {EXECUTORS:,} executors running, "
              f"each heartbeating every {BEAT_EVERY:.0f} s", flush=True)
        am_cpu_over(proc.pid, 2.0, executors)  # settle after the bring-up
        without = am_cpu_over(proc.pid, SECONDS, executors)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            load_cpu = cpu(proc.pid)
            tab, paints, table_ms, executors_ms = open_page(browser, f"http://{address}", token)
            load_cpu = cpu(proc.pid) - load_cpu
            size = sizes(tab)
            with_page = am_cpu_over(proc.pid, SECONDS, executors)
            browser.close()
        without = (without + am_cpu_over(proc.pid, SECONDS, executors)) / 2
        beats = executors.beats
    # The kernel counts CPU in clock ticks: an idle AM over a short window (the smoke test's) may show
    # none. Below one tick over the window it is taken as one tick, the most it can have been.
    resolution = 1 / (os.sysconf("SC_CLK_TCK") * SECONDS)
    without = max(without, resolution)
    print(f"page load: first paint {paints.get('first-paint', 0):.0f} ms, first contentful paint "
          f"{paints.get('first-contentful-paint', 0):.0f} ms, the executors' tables shown at {executors_ms:.0f} ms, "
          f"a page of the task table at {table_ms:.0f} ms "
          f"(from the navigation's start, sign-in redirect included); AM CPU for the whole load "
          f"{load_cpu:.2f} s; the page polls the status summary ({size['summary'] / 1024:.1f} KiB) and a role "
          f"table's page ({size['role page'] / 1024:.1f} KiB), not the full status ({size['full'] / 1024:.0f} KiB)",
          flush=True)
    print(f"executors' heartbeats over the run: {beats:,}")
    print(f"ui page: AM CPU {with_page:.1%} of a core with one page open vs {without:.1%} without "
          f"({EXECUTORS:,} executors, {TASKS:,} tasks): {with_page / without:.2f}x")


if __name__ == "__main__":
    main()
