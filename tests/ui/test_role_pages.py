"""The role tables of a job with many executors, in a real browser: each shows one page of its
executors (the server pages them: the page never holds them all), with a pager and a state filter.

The AM is a real one on the simulated backend (its executors never start on their own; the test
registers a few over the real protocol), served on a loopback port from a thread of its own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from aiohttp import web
from playwright.sync_api import Page, expect

from conftest import make_spec
from primus_runtime import protocol
from primus_runtime.am.master import ApplicationMaster
from primus_runtime.am.server import build_app
from primus_runtime.models import RegisterRequest
from primus_runtime.spec import JobSpec
from primus_runtime.ui.auth import make_ticket
from simulated_backend import SimulatedBackend

TOKEN = "role-pages-token"
WORKERS = 120
REGISTERED = range(60, 64)  # workers registered over the protocol: the others stay starting


class ServedAM:
    """An AM of 2 ps and WORKERS workers on the simulated backend, served until ``close``."""

    def __init__(self) -> None:
        spec = JobSpec.from_dict(make_spec([{"name": "ps", "replicas": 2, "command": "x"},
                                            {"name": "worker", "replicas": WORKERS, "command": "x"}],
                                           am={"heartbeat_timeout": "600s"}))
        self.am = ApplicationMaster(spec, "app-many", SimulatedBackend())
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(started,), daemon=True)
        self.thread.start()
        assert started.wait(30), "the AM did not start"
        self.url = f"http://127.0.0.1:{self.port}"

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        started.set()
        self.loop.run_forever()

    async def _start(self) -> None:
        await self.am.start("127.0.0.1:1")
        while any(ex.state.value != "starting" for ex in self.am.record.executors.values()):
            await asyncio.sleep(0.01)
        for index in REGISTERED:
            ex = self.am.record.executors[f"worker-{index}"]
            self.am.register(RegisterRequest(id=ex.id, role=ex.role, index=ex.index, incarnation=ex.incarnation,
                                             host="127.0.0.1"))
        self.runner = web.AppRunner(build_app(self.am, TOKEN))
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()

    async def _stop(self) -> None:
        await self.runner.cleanup()
        await self.am.close()


@pytest.fixture(scope="module")
def served() -> Iterator[ServedAM]:
    am = ServedAM()
    yield am
    am.close()


def role(page: Page, name: str):
    return page.locator(f'.role[data-role="{name}"]')


def test_a_role_of_many_executors_is_shown_a_page_at_a_time(served, page):
    page.goto(f"{served.url}/ui/login?ticket={make_ticket(TOKEN, 'pat')}")
    workers = role(page, "worker")
    rows, pager = workers.locator("tbody tr"), workers.locator(".executor-range")
    expect(pager).to_have_text(f"1-50 of {WORKERS}")
    expect(rows).to_have_count(50)
    expect(rows.first).to_have_attribute("data-ex", "worker-0")
    expect(workers.locator("[data-step='-1']")).to_be_disabled()
    expect(role(page, "ps").locator(".executor-range")).to_have_text("1-2 of 2")
    expect(workers.locator(".role-summary")).to_contain_text(f"{len(REGISTERED)} registered")

    workers.locator("[data-step='1']").click()
    expect(pager).to_have_text(f"51-100 of {WORKERS}")
    expect(rows.first).to_have_attribute("data-ex", "worker-50")
    workers.locator("[data-step='1']").click()
    expect(pager).to_have_text(f"101-{WORKERS} of {WORKERS}")
    expect(rows).to_have_count(WORKERS - 100)
    expect(workers.locator("[data-step='1']")).to_be_disabled()
    with page.expect_response(lambda r: "/executors?" in r.url and "role=worker&offset=100" in r.url):
        pass  # the next poll asks for the page shown, not the first one
    expect(pager).to_have_text(f"101-{WORKERS} of {WORKERS}")

    workers.locator(".executor-state").select_option("registered")
    expect(pager).to_have_text(f"1-{len(REGISTERED)} of {len(REGISTERED)}")
    expect(rows).to_have_count(len(REGISTERED))
    assert [rows.nth(i).get_attribute("data-ex") for i in range(len(REGISTERED))] == \
        [f"worker-{i}" for i in REGISTERED]
    assert page.evaluate("document.querySelectorAll('#role-tables tbody tr').length") == len(REGISTERED) + 2


def test_the_page_polls_the_summary_and_pages_revalidating_what_it_holds(served, page):
    answers: list[tuple[str, int]] = []
    page.on("response", lambda response: answers.append((response.url, response.status)))
    page.goto(f"{served.url}/ui/login?ticket={make_ticket(TOKEN, 'quinn')}")
    expect(role(page, "worker").locator("tbody tr")).to_have_count(50)
    polled = "/status?view=summary&events=0"  # after the first call, which brings the latest events
    # From the second on, with the ETag of the one before: nothing changed in this job but its goodput's
    # seconds, counted afresh every 5 s (am/goodput.VIEW_EVERY): a 304 within the next polls (2 s apart).
    for _ in range(5):
        with page.expect_response(lambda r: polled in r.url) as polled_reply:
            pass
        if polled_reply.value.status == 304:
            break
    status = [(url, code) for url, code in answers if f"{protocol.API_PREFIX}/status" in url]
    assert all("view=summary" in url for url, _ in status), status
    assert [code for url, code in status if polled in url][-1] == 304, status
    assert all("limit=50" in url for url, _ in answers if f"{protocol.API_PREFIX}/executors?" in url), answers
    expect(role(page, "worker").locator("tbody tr")).to_have_count(50)  # drawn from what it held
