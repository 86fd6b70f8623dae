"""The job's web page in a real browser, against real local jobs: sign-in, live updates without
reloads, and actions through its buttons (each confirmed in a dialog, each recorded with who asked)."""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from conftest import make_spec, wait_for
from primus_runtime.ui.auth import make_ticket

CONSUMER = str(Path(__file__).resolve().parents[1] / "data" / "consumer.py")


@pytest.fixture(scope="module")
def module_client(tmp_path_factory):
    from primus_runtime.client import PrimusClient

    client = PrimusClient(tmp_path_factory.mktemp("ui") / "home")
    yield client
    for job in client.list():
        if job.state in ("pending", "starting", "running"):
            client.cluster("local").force_kill(job.app_id)


def _running(client, spec: dict) -> tuple[str, str, str]:
    app = client.submit(spec)
    wait_for(lambda: client.status(app).job.state == "running", 60, "the job running")
    address, token = client.cluster("local").am_endpoint(app)
    return app, f"http://{address}", token


WORKERS = [{"name": "worker", "replicas": 2, "command": "sleep 300"}]


@pytest.fixture(scope="module")
def workers(module_client):
    """A job of two `sleep 300` workers: (app id, base URL, token). Shared by the tests that only read
    it (sign-in, what the page asks for, a refused action): a test that changes the job (kills a
    trainer, scales, restarts) takes ``own_workers``."""
    yield _running(module_client, make_spec(WORKERS))


@pytest.fixture
def own_workers(module_client):
    """The same job as ``workers``, the test's own: ended after it."""
    job = _running(module_client, make_spec(WORKERS))
    yield job
    module_client.cluster("local").force_kill(job[0])


@pytest.fixture
def data_job(module_client, tmp_path):
    """A job with input, the test's own (its tests suspend it, skip and re-queue tasks): one worker
    reading a line a second, so most tasks stay queued."""
    root = tmp_path / "ui-data"
    data, out = root / "data", root / "out"
    data.mkdir(parents=True)
    out.mkdir()
    for f in range(3):
        (data / f"part-{f}.txt").write_text("".join(f"f{f}-{i:05d}\n" for i in range(300)))
    spec = make_spec([{"name": "worker", "consumes_input": True, "command": [sys.executable, CONSUMER],
                       "env": {"OUT_DIR": str(out), "SLEEP_EVERY": "1", "SLEEP": "1"}}],
                     input={"sources": [{"name": "lines", "path": str(data), "success_marker": None}],
                            "task_size": "1000B", "poll_interval": 0.2})
    job = _running(module_client, spec)
    yield job
    module_client.cluster("local").force_kill(job[0])


def sign_in(page: Page, base: str, token: str, name: str) -> None:
    page.goto(base + "/ui/")
    page.fill("input[name=token]", token)
    page.fill("input[name=name]", name)
    page.click("button[type=submit]")
    expect(page.locator("#user")).to_have_text(f"signed in as {name}")


def answer_dialogs(page: Page, answer: str | None = None) -> list[str]:
    """Accept every confirm/prompt (with ``answer``); the questions asked."""
    asked: list[str] = []

    def accept(dialog) -> None:
        asked.append(dialog.message)
        dialog.accept(answer) if answer is not None else dialog.accept()
    page.on("dialog", accept)
    return asked


def worker_row(page: Page, executor: str):
    return page.locator(f'.role[data-role="worker"] tr[data-ex="{executor}"]')


def cell(row, column: str):
    """A cell of a role table's row by its column's heading."""
    columns = ["index", "incarnation", "host", "ports", "state", "ready", "restarts", "exit", "last change"]
    return row.locator(f"td:nth-child({columns.index(column) + 1})")


def _http_status(base: str, method: str, path: str) -> int:
    host, port = base.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request(method, path)
    status = conn.getresponse().status
    conn.close()
    return status


def test_without_a_session_the_page_asks_to_sign_in_and_shows_no_data(workers, page):
    app, base, token = workers
    page.goto(base + "/ui/")
    expect(page.locator("input[name=token]")).to_be_visible()
    expect(page.locator("#role-tables")).to_have_count(0)
    assert app not in page.content()
    assert page.request.get(base + "/api/v1/status").status == 401
    assert _http_status(base, "GET", "/api/v1/status?events=0") == 401
    assert _http_status(base, "GET", "/ui/static/app.js") == 200  # the code is public, the data is not

    page.fill("input[name=token]", token + "x")
    page.fill("input[name=name]", "mallory")
    page.click("button[type=submit]")
    expect(page.locator(".error")).to_contain_text("Wrong job token")
    expect(page.locator("input[name=token]")).to_be_visible()


def test_a_one_time_link_signs_in_once(workers, page, browser):
    app, base, token = workers
    link = f"{base}/ui/login?ticket={make_ticket(token, 'bob')}"
    page.goto(link)
    expect(page.locator("#user")).to_have_text("signed in as bob")
    expect(page.locator("#app-id")).to_have_text(app)

    other = browser.new_context().new_page()
    other.goto(link)
    expect(other.locator(".error")).to_contain_text("expired or was used already")
    other.context.close()


def test_an_ended_session_shows_the_sign_in_link_and_signing_out_ends_it(workers, page):
    app, base, token = workers
    sign_in(page, base, token, "frank")
    page.context.clear_cookies()
    expect(page.locator("#expired")).to_be_visible()
    expect(page.locator("#expired a")).to_have_attribute("href", "./")

    sign_in(page, base, token, "frank")
    expect(page.locator("#expired")).to_be_hidden()
    page.click("#logout")
    expect(page.locator("input[name=token]")).to_be_visible()
    assert page.request.get(base + "/api/v1/status").status == 401


def test_the_role_table_follows_a_killed_trainer_without_a_reload(own_workers, module_client, page, artifacts):
    app, base, token = own_workers
    sign_in(page, base, token, "alice")
    expect(page.locator('.role[data-role="worker"] tbody tr.st-running')).to_have_count(2)
    row = worker_row(page, "worker-0")
    expect(cell(row, "restarts")).to_have_text("0")
    first = cell(row, "incarnation").inner_text()
    page.evaluate("window.notReloaded = true")

    executor_pid = next(e for e in module_client.status(app).executors if e.id == "worker-0").pid
    trainers = children(executor_pid)
    assert trainers, f"executor {executor_pid} has no trainer process"
    for pid in trainers:
        os.kill(pid, signal.SIGKILL)

    expect(cell(row, "restarts")).to_have_text("1")
    expect(cell(row, "incarnation")).not_to_have_text(first)
    expect(cell(row, "state")).to_have_text("running")
    assert page.evaluate("window.notReloaded === true"), "the page reloaded"
    expect(page.locator("#event-list")).to_contain_text("worker-0")
    # Goodput in the summary: the ETTR and the seconds by cause, the restart's among them.
    assert module_client.status(app, summary=True).goodput.seconds["restarting"] > 0
    expect(page.locator("#goodput-ratio")).to_have_text(re.compile(r"^[01]\.\d{3}$"))
    expect(page.locator('#goodput-causes [data-cause="restarting"]')).to_have_text(re.compile(r"^restarting [\d.,]+ s$"))
    expect(page.locator("#goodput-causes .cause")).to_have_count(5)
    path = artifacts / "running.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot of a running job: {path}")


def children(pid: int) -> list[int]:
    """Direct child processes of ``pid`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def test_scaling_through_the_page_adds_executors_and_records_who_asked(own_workers, page):
    app, base, token = own_workers
    sign_in(page, base, token, "carol")
    asked = answer_dialogs(page, "3")
    expect(page.locator('.role[data-role="worker"] tbody tr')).to_have_count(2)
    page.click('.role[data-role="worker"] [data-act="scale"]')

    expect(page.locator("#notice")).to_contain_text("worker now wants 3 executors")
    assert "Scale role worker" in asked[0]
    expect(page.locator('.role[data-role="worker"] tbody tr')).to_have_count(3)
    expect(cell(worker_row(page, "worker-2"), "state")).to_have_text("running")
    scale_event = page.locator("#event-list tr", has_text="role/worker")
    expect(scale_event).to_contain_text("carol")
    expect(scale_event).to_contain_text("scaled from 2 to 3")


def test_the_page_of_a_job_without_input_asks_for_nothing_it_does_not_have(workers, page):
    app, base, token = workers
    failed: list[str] = []
    page.on("response", lambda response: failed.append(f"{response.status} {response.url}")
            if response.status >= 400 else None)
    sign_in(page, base, token, "fay")
    expect(cell(worker_row(page, "worker-0"), "state")).to_have_text("running")
    page.wait_for_timeout(4500)  # two more polls
    expect(page.locator("#data")).to_be_hidden()
    assert failed == []


def test_an_action_the_server_refuses_shows_its_error(workers, page):
    app, base, token = workers
    sign_in(page, base, token, "dave")
    answer_dialogs(page, "-1")
    page.click('.role[data-role="worker"] [data-act="scale"]')
    expect(page.locator("#notice.error")).to_contain_text("whole number of 0 or more")


def test_restarting_an_executor_and_killing_the_job_through_the_page(module_client, page):
    app, base, token = _running(module_client, make_spec([{"name": "worker", "replicas": 2, "command": "sleep 300"}]))
    sign_in(page, base, token, "gina")
    asked = answer_dialogs(page, "stuck on a barrier")
    row = worker_row(page, "worker-1")
    expect(cell(row, "state")).to_have_text("running")
    first = cell(row, "incarnation").inner_text()
    row.locator('[data-act="restart"]').click()
    expect(page.locator("#notice")).to_contain_text(f"stopping incarnation {first}")
    expect(cell(row, "incarnation")).not_to_have_text(first)
    expect(cell(row, "restarts")).to_have_text("1")
    expect(cell(row, "state")).to_have_text("running")
    expect(page.locator('.role[data-role="worker"] .role-summary')).to_contain_text("1 restart · 0 failures")
    restarting = page.locator("#event-list tr", has_text="restarting")
    expect(restarting).to_contain_text("gina")
    expect(restarting).to_contain_text("stuck on a barrier")

    page.click("#kill-job")
    assert any("Kill job" in question for question in asked), asked
    final = module_client.wait(app, timeout=60)
    assert final.job.state == "killed" and final.job.reason == "stuck on a barrier"
    assert [e.actor for e in final.events if e.to_state == "stopping"] == ["gina"]
    assert module_client.status(app).roles[0].failures == 0  # neither the restart nor the kill is charged
    expect_final_state(page, app, "killed")


def test_an_earlier_incarnations_stderr_is_one_click_away(module_client, page):
    app, base, token = _running(module_client, make_spec([{
        "name": "worker", "failover": {"max_failures_per_index": 1},
        "command": 'if [ "$PRIMUS_ATTEMPT" = 0 ]; then echo first-try-broke >&2; exit 3; fi; '
                   'echo second-try >&2; sleep 300'}]))
    wait_for(lambda: [(ex.state, ex.restarts) for ex in module_client.status(app).executors]
             == [("running", 1)], 60, "worker-0 restarted and running")
    sign_in(page, base, token, "jo")
    row = worker_row(page, "worker-0")
    row.locator('[data-act="log"][data-attempt="0"]').click()  # was: only the current incarnation's logs
    expect(page.locator("#log-title")).to_have_text("worker-0 stderr (attempt 0)")
    expect(page.locator("#log-text")).to_have_text("first-try-broke\n")
    row.locator('[data-act="log"][data-stream="stderr"]:not([data-attempt])').click()
    expect(page.locator("#log-title")).to_have_text("worker-0 stderr")
    expect(page.locator("#log-text")).to_have_text("second-try\n")
    host, port = base.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", "/api/v1/executors/worker-0/logs/stderr?attempt=4", headers={"Authorization": "Bearer " + token})
    answer = conn.getresponse()
    assert (answer.status, answer.read()) == (404, b'{"error": "worker-0 has no attempt 4"}')
    conn.close()
    module_client.kill(app)


def expect_final_state(page: Page, app: str, state: str) -> None:
    """The page ends on the job's outcome, says so, and keeps it once the AM is gone."""
    expect(page.locator("#job-state")).to_have_text(state, timeout=30_000)
    expect(page.locator("#ended")).to_contain_text(f"The job ended: {state}.")
    expect(page.locator("#ended")).to_contain_text(f"primus ui {app}")
    expect(page.locator("#kill-job")).to_be_hidden()  # nothing left to act on
    for row in page.locator('.role[data-role="worker"] tr[data-ex]').all():
        expect(cell(row, "state")).not_to_have_text("running")
        expect(cell(row, "state")).not_to_contain_text("stopping")  # ended: no longer "stopped (stopping)"
    page.wait_for_timeout(3000)  # a poll would come by now: none does, and nothing turns into an error
    expect(page.locator("#job-state")).to_have_text(state)
    expect(page.locator("#fetch-error")).to_be_hidden()


def test_a_job_killed_from_the_cli_ends_the_page_on_killed(module_client, page):
    app, base, token = _running(module_client, make_spec([{"name": "worker", "replicas": 2, "command": "sleep 300"}]))
    sign_in(page, base, token, "hana")
    expect(cell(worker_row(page, "worker-1"), "state")).to_have_text("running")
    module_client.kill(app, reason="from the command line")
    expect_final_state(page, app, "killed")
    expect(page.locator("#job-reason")).to_contain_text("from the command line")


def test_a_job_that_ends_by_itself_ends_the_page_on_its_outcome(module_client, page):
    app, base, token = _running(module_client, make_spec([{"name": "worker", "replicas": 2, "command": "sleep 6"}]))
    sign_in(page, base, token, "ida")
    expect(page.locator("#job-state")).to_have_text("running")
    expect_final_state(page, app, "succeeded")
    for index in (0, 1):
        expect(cell(worker_row(page, f"worker-{index}"), "state")).to_have_text("succeeded")


def test_a_task_skipped_and_requeued_through_the_page(data_job, module_client, page):
    app, base, token = data_job
    sign_in(page, base, token, "erin")
    asked = answer_dialogs(page, "bad records")
    page.click("#data-suspend")
    expect(page.locator("#data-state")).to_have_text("suspended")

    page.select_option("#task-state", "queued")
    first_queued = page.locator("#tasks tr.st-queued").first
    expect(first_queued).to_be_visible()
    task = first_queued.get_attribute("data-task")
    page.select_option("#task-state", "")
    page.fill("#task-q", task)
    row = page.locator(f'#tasks tr[data-task="{task}"]')
    expect(page.locator("#tasks tr[data-task]")).to_have_count(1)
    expect(row.locator("td:nth-child(3)")).to_have_text("queued")

    row.locator('[data-act="skip"]').click()
    expect(row.locator("td:nth-child(3)")).to_have_text("quarantined")
    expect(page.locator("#quarantined")).to_contain_text(task)
    row.locator('[data-act="requeue"]').click()
    expect(row.locator("td:nth-child(3)")).to_have_text("queued")
    expect(page.locator("#quarantined")).not_to_contain_text(task)
    assert any(f"Skip task {task}" in question for question in asked), asked

    page.fill("#event-q", task)
    events = page.locator("#event-list tr")
    expect(events).to_have_count(2)  # newest first: the re-queue, then the skip
    expect(events.nth(0)).to_contain_text("quarantined → queued")
    expect(events.nth(1)).to_contain_text("queued → quarantined")
    for event in (events.nth(0), events.nth(1)):
        expect(event).to_contain_text("bad records")
        expect(event).to_contain_text("erin")
    assert module_client.data(app).state == "suspended"


def test_a_failed_jobs_history_page_is_read_only(module_client, page, artifacts):
    app = module_client.submit(make_spec([{"name": "worker", "command": "echo boom >&2; exit 3",
                                           "failover": {"restart": "never"}}]))
    assert module_client.wait(app, timeout=60).job.state == "failed"
    # The AM writes the history's task and partition tables after the outcome: once it exited, all is there.
    wait_for(lambda: module_client.cluster("local").am_pid(app) is None, 10, "the AM gone")
    server = subprocess.Popen([sys.executable, "-m", "primus_runtime.cli", "--home", str(module_client.cluster("local").home),
                               "ui", app], stdout=subprocess.PIPE, text=True)
    try:
        link = history_link(server)
        page.goto(link)
        expect(page.locator("#job-state")).to_have_text("failed")
        expect(page.locator("#job-reason")).to_contain_text("worker-0")
        row = worker_row(page, "worker-0")
        expect(cell(row, "state")).to_have_text("failed")
        expect(cell(row, "exit")).to_contain_text("3")
        expect(page.locator("body.readonly")).to_have_count(1)
        for action in ("#kill-job", '[data-act="scale"]', "#data-suspend"):
            expect(page.locator(action)).to_be_hidden()
        row.locator('[data-act="log"][data-stream="stderr"]').click()
        expect(page.locator("#log-text")).to_contain_text("boom")
        page.click("#log-close")
        path = artifacts / "failed.png"
        page.screenshot(path=str(path), full_page=True)
        print(f"screenshot of a failed job: {path}")
    finally:
        server.terminate()
        server.wait(10)


def history_link(server: subprocess.Popen) -> str:
    """The sign-in link `primus ui APP` prints once its history server listens."""
    found: list[str] = []

    def read() -> None:
        assert server.stdout is not None
        found.extend(line.strip() for line in server.stdout if line.startswith("http"))
    # A thread, not select(): the pipe's reader buffers lines select() no longer sees.
    threading.Thread(target=read, daemon=True).start()
    return wait_for(lambda: found and found[0], 30, f"the link primus ui prints (exit {server.poll()})")
