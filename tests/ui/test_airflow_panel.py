"""The Primus panel in Airflow's own UI, in a real browser: a real Airflow (scheduler, dag-processor,
triggerer, api-server; provider/live_airflow.py) with two users of the simple auth manager, an admin
and a viewer, runs live_dags/primus_live_panel.py, whose job's trainer holds at gates the test opens.

Each user signs in through Airflow's login form; the panel is the task instance page's Primus tab,
signed in by Airflow's session: nobody types the job token, and no response the browser receives
holds it. Airflow is not imported here (a UI test session may not set AIRFLOW_HOME)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from playwright.sync_api import Browser, Frame, Page, Response, expect
from provider.live_airflow import LIVE_DAGS, LiveAirflow

from conftest import wait_for
from primus_runtime.client import PrimusClient

AIRFLOW_3_3 = tuple(int(part) for part in re.findall(r"\d+", version("apache-airflow"))[:2]) >= (3, 3)
# Starting Airflow and running a job through the scheduler and the triggerer on a loaded 2-core machine.
pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(not AIRFLOW_3_3, reason="the live Airflow harness needs Airflow 3.3+")]

DAG_ID = "primus_live_panel"
FILES = 4
USERS = {"admin": "admin", "viewer": "viewer"}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveAirflow]:
    root = tmp_path_factory.mktemp("airflow-panel")
    dags = root / "dags"  # this DAG only: less for the dag-processor to parse
    dags.mkdir()
    shutil.copy(LIVE_DAGS / f"{DAG_ID}.py", dags)
    airflow = LiveAirflow(root, dags_folder=dags, users=USERS)
    airflow.start()
    try:
        yield airflow
    finally:
        stray = airflow.stop()
    assert stray == [], f"Airflow processes outlived their components' sessions: {stray}"


def sign_in(page: Page, live: LiveAirflow, name: str, then: str) -> None:
    """Through Airflow's login form, as a person does; the browser lands on ``then``."""
    page.goto(f"{live.base_url}/auth/login?" + urlencode({"next": then}))
    page.locator("input[name=username]").fill(name)
    page.locator("input[name=password]").fill(live.passwords[name])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/auth/login" not in url)


def panel_frame(page: Page) -> Frame:
    """The panel: the Primus tab's iframe."""
    iframe = page.locator('iframe[title="Primus"]')
    expect(iframe).to_be_visible()
    frame = iframe.element_handle().content_frame()
    assert frame is not None
    return frame


def record_bodies(page: Page, bodies: list[tuple[str, bytes]]) -> None:
    """Every response body the page's browser context receives (its frames' too), with its URL."""
    def keep(response: Response) -> None:
        if 300 <= response.status < 400:
            return  # a redirect has no body to read
        try:
            bodies.append((response.url, response.body()))
        except Exception as exc:  # noqa: BLE001 - a body the browser dropped (a navigation): said in the list
            bodies.append((response.url, f"(not read: {exc})".encode()))

    page.context.on("response", keep)


def tasks_done(frame: Frame) -> int:
    text = frame.locator("#data-done").inner_text()  # "1 of 4 done"
    return int(text.split(" of ")[0].replace(",", ""))


@pytest.fixture
def gates(tmp_path: Path) -> dict[str, Any]:
    data = tmp_path / "data"
    data.mkdir()
    for f in range(FILES):
        (data / f"part-{f}.txt").write_text("".join(f"f{f}-{i:05d}\n" for i in range(100)))
    return {"data": str(data), "more": str(tmp_path / "more"), "finish": str(tmp_path / "finish")}


def test_the_primus_tab_shows_the_live_job_signed_in_by_airflow_with_actions_for_editors_only(
        live: LiveAirflow, browser: Browser, page: Page, gates: dict[str, Any], artifacts: Path):
    client = PrimusClient(live.primus_home)
    with live.explain_failure(DAG_ID):
        live.wait_for_dag(DAG_ID)
        run_id = live.trigger_dag(DAG_ID, gates)
        ti = live.wait_for_task_state(DAG_ID, run_id, "train", ("deferred", "failed", "success", "up_for_retry"))
        assert ti["state"] == "deferred", ti
        app_id = live.xcom(DAG_ID, run_id, "train", "app_id")
        wait_for(lambda: (client.status(app_id, summary=True).data or None) and
                 client.status(app_id, summary=True).data.tasks.get("done", 0) >= 1, 120,
                 "the job's first file to be done", poll=0.5)
        token = client.cluster("local").job(app_id).token.read_text().strip()
        ti_page = f"{live.base_url}/dags/{DAG_ID}/runs/{quote(run_id, safe='')}/tasks/train"
        bodies: list[tuple[str, bytes]] = []
        record_bodies(page, bodies)
        viewer = browser.new_context(viewport={"width": 1400, "height": 900})
        try:
            # --- the admin: the task instance's page, its Primus tab -------------------------------------
            sign_in(page, live, "admin", ti_page)
            page.get_by_text("Primus", exact=True).first.click()
            page.wait_for_url(re.compile(r"/tasks/train/plugin/primus$"))
            frame = panel_frame(page)
            expect(frame.locator("#roles")).to_contain_text("worker")
            expect(frame.locator("#executors")).to_contain_text("worker-0")
            expect(frame.locator("#executors")).to_contain_text("running")
            expect(frame.locator("#data-done")).to_contain_text(f"of {FILES} done")
            before = tasks_done(frame)
            assert 1 <= before < FILES
            expect(frame.locator("#kill")).to_be_visible()  # an admin may edit the task instance
            expect(frame.locator("button[data-scale='worker']")).to_be_visible()
            expect(frame.locator("button[data-restart='worker-0']")).to_be_visible()
            frame.evaluate("window.primusTestMark = 'no reload'")

            Path(gates["more"]).touch()  # the rest of the data: the panel follows it by polling
            expect(frame.locator("#data-done")).to_have_text(f"{FILES} of {FILES} done", timeout=60_000)
            assert frame.evaluate("window.primusTestMark") == "no reload"
            expect(frame.locator("#charts svg").first).to_be_visible()
            expect(frame.locator("#goodput")).to_contain_text("ratio (ETTR)")  # the AM's goodput
            expect(frame.locator("#goodput")).to_contain_text("productive")
            page.screenshot(path=str(artifacts / "airflow-panel-admin.png"), full_page=True)

            # --- the viewer: through the "Primus job" link, no actions, a POST refused -------------------
            viewer_page = viewer.new_page()
            record_bodies(viewer_page, bodies)
            link = live.xcom(DAG_ID, run_id, "train", "primus_job_url")
            sign_in(viewer_page, live, "viewer", link)
            viewer_page.wait_for_url(re.compile(r"/tasks/train/plugin/primus$"))
            viewer_frame = panel_frame(viewer_page)
            expect(viewer_frame.locator("#executors")).to_contain_text("worker-0")
            expect(viewer_frame.locator("#data-done")).to_have_text(f"{FILES} of {FILES} done")
            expect(viewer_frame.locator("#kill")).to_be_hidden()
            expect(viewer_frame.locator("button[data-scale], button[data-restart]")).to_have_count(0)
            kill = (f"{live.base_url}/primus/api/panel/{DAG_ID}/train/kill?"
                    + urlencode({"run_id": run_id, "map_index": -1}))
            refused = viewer_page.request.post(kill, data={"reason": "a viewer tries"},
                                               headers={"Content-Type": "application/json", "Origin": live.base_url})
            assert refused.status == 403, refused.text()
            assert client.status(app_id, summary=True).job.state == "running"

            # --- the end: the final page, from what the AM left --------------------------------------
            Path(gates["finish"]).touch()
            expect(frame.locator("#ended")).to_contain_text("The job ended: succeeded", timeout=60_000)
            assert live.wait_for_run_state(DAG_ID, run_id)["state"] == "success"
        except BaseException:
            for n, tab in enumerate(viewer.pages + [page]):
                tab.screenshot(path=str(artifacts / f"airflow-panel-failure-{n}.png"), full_page=True)
            raise
        finally:
            viewer.close()

    panel_replies = [body for url, body in bodies if "/primus/api/panel/" in url and app_id.encode() in body]
    assert len(panel_replies) >= 4, [url for url, _ in bodies]  # the listener saw the panel's polls
    assert not [url for url, body in bodies if token.encode() in body], "the job token reached the browser"
