"""The web page's server side on real local jobs: signing in (token form, one-time links, session
cookies), the read API the page polls, the actions (recorded with who asked), and the history a
finished job leaves (event log, task table) served again by `primus ui`.

The page itself, in a real browser, is tests/ui/."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import signal
import threading
import time

import pytest
import requests
from data.test_data_plane import data_spec, write_day

from conftest import make_spec, wait_for
from primus_runtime.ui.auth import ACTION_HEADER, USER_HEADER, make_ticket


def base(client, app: str) -> str:
    address, _ = wait_for(lambda: client.cluster("local").am_endpoint(app), 20, "the AM's address")
    return f"http://{address}"


@pytest.fixture
def sleeper(client):
    app = client.submit(make_spec([{"name": "worker", "replicas": 2, "command": "echo hello-from-$PRIMUS_INDEX; "
                                                                                "sleep 300"}]))
    wait_for(lambda: client.status(app).job.state == "running", 30, "job running")
    yield app
    client.kill(app)


def signed_in(url: str, token: str, name: str = "alice") -> requests.Session:
    session = requests.Session()
    reply = session.post(f"{url}/ui/login", data={"token": token, "name": name}, allow_redirects=False)
    assert reply.status_code == 303 and reply.headers["Location"] == "./", reply.text
    return session


def test_the_page_and_its_data_need_the_job(client, sleeper):
    url = base(client, sleeper)
    _, token = client.cluster("local").am_endpoint(sleeper)
    root = requests.get(url + "/", allow_redirects=False)
    assert root.status_code == 302 and root.headers["Location"] == "ui/"
    login = requests.get(url + "/ui/")
    assert login.status_code == 200 and "<form" in login.text and sleeper not in login.text
    assert requests.get(url + "/api/v1/status").status_code == 401
    wrong = requests.post(url + "/ui/login", data={"token": "nope", "name": "eve"}, allow_redirects=False)
    assert wrong.status_code == 401 and "Wrong job token" in wrong.text and "Set-Cookie" not in wrong.headers

    reply = requests.post(url + "/ui/login", data={"token": token, "name": "alice"}, allow_redirects=False)
    cookie = reply.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and token not in cookie
    session = signed_in(url, token)
    page = session.get(url + "/ui/")
    assert page.status_code == 200 and "<form" not in page.text and token not in page.text
    assert session.get(url + "/api/v1/whoami").json() == {"user": "alice", "live": True, "app_id": sleeper}
    assert session.get(url + "/api/v1/status").json()["job"]["app_id"] == sleeper
    # A forged or foreign session is nobody's.
    forged = requests.Session()
    forged.cookies.update({name: value + "x" for name, value in session.cookies.items()})
    assert forged.get(url + "/api/v1/status").status_code == 401
    assert session.post(url + "/ui/logout", allow_redirects=False).status_code == 303
    assert session.get(url + "/api/v1/status").status_code == 401


def test_a_one_time_link_signs_in_once_and_expires(client, sleeper):
    url = base(client, sleeper)
    _, token = client.cluster("local").am_endpoint(sleeper)
    link = client.page_link(sleeper, user="bob")
    assert link.startswith(url + "/ui/login?ticket=") and token not in link
    browser = requests.Session()
    assert browser.get(link).url == url + "/ui/"  # redeemed, redirected to the page
    assert browser.get(url + "/api/v1/whoami").json()["user"] == "bob"
    again = requests.get(link)
    assert again.status_code == 401 and "expired or was used already" in again.text
    expired = requests.get(f"{url}/ui/login?ticket={make_ticket(token, 'bob', ttl=-1)}")
    assert expired.status_code == 401
    other_job = requests.get(f"{url}/ui/login?ticket={make_ticket('another-jobs-token', 'bob')}")
    assert other_job.status_code == 401


def test_a_signed_in_action_needs_the_action_header_and_records_who_asked(client, sleeper):
    url = base(client, sleeper)
    _, token = client.cluster("local").am_endpoint(sleeper)
    session = signed_in(url, token, name="alice")
    refused = session.post(url + "/api/v1/roles/worker/scale", json={"replicas": 3})
    assert refused.status_code == 403 and ACTION_HEADER in refused.json()["error"]
    assert client.status(sleeper).roles[0].replicas == 2  # nothing happened
    done = session.post(url + "/api/v1/roles/worker/scale", json={"replicas": 3}, headers={ACTION_HEADER: "1"})
    assert done.json() == {"role": "worker", "replicas": 3}
    by_token = requests.post(url + "/api/v1/roles/worker/scale", json={"replicas": 2},
                             headers={"Authorization": "Bearer " + token, USER_HEADER: "ci-bot"})
    assert by_token.status_code == 200
    scaled = session.get(url + "/api/v1/events", params={"subject": "role/"}).json()["events"]
    assert [(e["to_state"], e["actor"]) for e in scaled] == [("3", "alice"), ("2", "ci-bot")]
    assert session.get(url + "/api/v1/events", params={"q": "CI-BOT"}).json()["events"] == scaled[1:]


def test_restarting_one_executor_replaces_it_uncharged(client, sleeper):
    url = base(client, sleeper)
    _, token = client.cluster("local").am_endpoint(sleeper)
    session = signed_in(url, token, name="carol")
    before = {ex.id: ex for ex in client.status(sleeper).executors}
    reply = session.post(url + "/api/v1/executors/worker-1/restart", json={"reason": "stuck"},
                         headers={ACTION_HEADER: "1"})
    assert reply.json() == {"executor": "worker-1", "incarnation": before["worker-1"].incarnation}

    def replaced():
        ex = {e.id: e for e in client.status(sleeper).executors}["worker-1"]
        return ex.incarnation != before["worker-1"].incarnation and ex.state == "running" and ex

    now = wait_for(replaced, 30, "worker-1 replaced")
    assert now.restarts == 1
    role = client.status(sleeper).roles[0]
    assert role.failures == 0 and role.restarts == 1
    history = session.get(url + "/api/v1/executors", params={"history": "true"}).json()["history"]
    assert [(ex["id"], ex["state"]) for ex in history] == [("worker-1", "stopped")]
    restarting = session.get(url + "/api/v1/events", params={"subject": "worker-1", "q": "restarting"}).json()
    assert [(e["reason"], e["actor"]) for e in restarting["events"]] == [("stuck", "carol")]
    assert session.post(url + "/api/v1/executors/worker-9/restart", json={},
                        headers={ACTION_HEADER: "1"}).status_code == 404


def test_a_log_tail_follows_an_executors_output(client, sleeper):
    url = base(client, sleeper)
    _, token = client.cluster("local").am_endpoint(sleeper)
    session = signed_in(url, token)
    tail = wait_for(lambda: (c := session.get(url + "/api/v1/executors/worker-1/logs/stdout").json())["text"]
                    and c, 20, "stdout written")
    assert tail["text"] == "hello-from-1\n" and tail["offset"] == 0 and tail["size"] == tail["next_offset"] == 13
    after = session.get(url + "/api/v1/executors/worker-1/logs/stdout", params={"offset": tail["size"]}).json()
    assert after["text"] == "" and after["offset"] == tail["size"]
    missing = session.get(url + "/api/v1/executors/worker-1/logs/nothing")
    assert missing.status_code == 404 and "stdout" in missing.json()["error"]


def test_task_table_pages_and_task_actions(client, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    out.mkdir()
    for day in (1, 2, 3):
        write_day(data, day, lines=2500)
    app = client.submit(data_spec(out, data, replicas=1, env={"SLEEP_EVERY": "100", "SLEEP": "0.2"},
                                  max_tasks_per_executor=1, prefetch=0, task_size="16Ki"))
    url = base(client, app)
    _, token = client.cluster("local").am_endpoint(app)
    session = signed_in(url, token, name="dana")
    act = {ACTION_HEADER: "1"}
    running = wait_for(lambda: session.get(url + "/api/v1/data/tasks", params={"state": "running"}).json()["tasks"],
                       30, "a task running")[0]
    assert running["holder"] == "worker-0" and running["state"] == "running"
    refused = session.post(url + "/api/v1/data/tasks/requeue", json={"task": running["id"]}, headers=act)
    assert refused.status_code == 409 and "being read" in refused.json()["error"]

    page = session.get(url + "/api/v1/data/tasks", params={"offset": 2, "limit": 3}).json()
    everything = session.get(url + "/api/v1/data/tasks", params={"limit": 1000}).json()
    assert page["total"] == everything["total"] == len(everything["tasks"]) > 5
    assert page["tasks"] == everything["tasks"][2:5]
    day2 = session.get(url + "/api/v1/data/tasks", params={"q": "/2026-12-02/", "limit": 1000}).json()
    assert day2["total"] == len(day2["tasks"]) > 0 and all("/2026-12-02/" in t["id"] for t in day2["tasks"])

    queued = everything["tasks"][-1]
    skipped = session.post(url + "/api/v1/data/tasks/skip", json={"task": queued["id"], "reason": "bad day"},
                           headers=act).json()
    assert skipped["state"] == "quarantined"
    assert client.data(app).quarantined == [queued["id"]]
    requeued = session.post(url + "/api/v1/data/tasks/requeue", json={"task": queued["id"]}, headers=act).json()
    assert requeued["state"] == "queued" and client.data(app).quarantined == []
    # Skipping the task being read restarts its executor (uncharged); its other tasks are kept. A caller
    # told that nobody reads it (the page's row was older) is refused, and nobody is restarted.
    now = session.get(url + "/api/v1/data/tasks", params={"state": "running"}).json()["tasks"][0]
    stale = session.post(url + "/api/v1/data/tasks/skip", json={"task": now["id"], "holder": ""}, headers=act)
    assert stale.status_code == 409, stale.text
    assert stale.json()["error"] == (f"task {now['id']} is read by worker-0 now, not by no executor as you were told: "
                                     f"skipping it now restarts worker-0; look again and confirm")
    assert client.status(app).roles[0].restarts == 0 and client.data(app).quarantined == []
    session.post(url + "/api/v1/data/tasks/skip", json={"task": now["id"], "holder": "worker-0"}, headers=act)
    wait_for(lambda: client.status(app).roles[0].restarts == 1, 30, "its reader restarted")
    events = session.get(url + "/api/v1/events", params={"subject": "task/"}).json()["events"]
    assert [(e["to_state"], e["actor"]) for e in events] == [("quarantined", "dana"), ("queued", "dana"),
                                                              ("quarantined", "dana")]
    parts = session.get(url + "/api/v1/data/partitions").json()
    assert {(p["source"], p["partition"]) for p in parts["partitions"]} == {
        ("clicks", f"2026-12-0{d}") for d in (1, 2, 3)}
    assert sum(p["tasks"] for p in parts["partitions"]) == everything["total"]
    assert parts["sources"][0]["name"] == "clicks" and parts["scan_complete"]

    status = client.wait(app, timeout=120)
    assert status.job.state == "succeeded", status.job
    assert status.data.quarantined == [now["id"]]  # the user's skip stays
    job_dir = client.cluster("local").job(app).path
    table = [json.loads(line) for line in gzip.decompress((job_dir / "tasks.jsonl.gz").read_bytes()).splitlines()]
    assert len(table) == everything["total"] and {t["state"] for t in table} == {"done", "quarantined"}


def history_server(client, app: str):
    """`primus ui APP`'s server for a finished job, in a thread; (base URL, session signed in)."""
    from primus_runtime.ui.history import archive_view, start_history_server

    loop = asyncio.new_event_loop()
    started: dict = {}

    async def run():
        runner, link = await start_history_server(archive_view(client, app), "127.0.0.1", 0, "erin")
        started.update(link=link, runner=runner)

    threading.Thread(target=lambda: (loop.run_until_complete(run()), loop.run_forever()), daemon=True).start()
    link = wait_for(lambda: started.get("link"), 10, "history server")
    session = requests.Session()
    assert session.get(link).status_code == 200
    return link.split("/ui/")[0], session


def test_a_finished_jobs_history_page_shows_it_as_it_ended(client):
    app = client.submit(make_spec([{"name": "worker", "replicas": 2, "command": "echo done; sleep 0.5"}]))
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded"
    job_dir = client.cluster("local").job(app).path
    logged = [json.loads(line) for line in (job_dir / "events.jsonl").read_text().splitlines()]
    assert [e["seq"] for e in logged if e["kind"] == "event"] == [e.seq for e in status.events]
    assert any(e["kind"] == "sample" for e in logged)

    url, session = history_server(client, app)
    final = json.loads((job_dir / "status.json").read_text())
    shown = session.get(url + "/api/v1/status", params={"events": 100000})
    assert shown.json() == {key: value for key, value in final.items() if key != "history"}
    unchanged = session.get(url + "/api/v1/status", params={"events": 100000},
                            headers={"If-None-Match": shown.headers["ETag"]})
    assert unchanged.status_code == 304  # a finished job's page never changes
    page = session.get(url + "/api/v1/executors", params={"role": "worker", "offset": 1, "limit": 5}).json()
    assert page["total"] == 2 and page["executors"] == final["executors"][1:]
    assert session.get(url + "/api/v1/whoami").json() == {"user": "erin", "live": False, "app_id": app}
    assert session.get(url + "/api/v1/executors/worker-0/logs/stdout").json()["text"] == "done\n"
    samples = session.get(url + "/api/v1/timeline").json()["samples"]
    assert samples[-1]["executors"] == {"succeeded": 2}
    assert session.post(url + "/api/v1/job/kill", json={}, headers={ACTION_HEADER: "1"}).status_code in (404, 405)
    assert requests.get(url + "/api/v1/status").status_code == 401  # its own sign-in, like the AM's


def test_the_cli_says_where_the_page_is(client, sleeper, capsys):
    from primus_runtime.cli import main as cli

    assert cli(["--home", str(client.cluster("local").home), "status", sleeper]) == 0
    line = [text for text in capsys.readouterr().out.splitlines() if "page:" in text][0]
    assert "/ui/login?ticket=" in line
    assert cli(["--home", str(client.cluster("local").home), "history"]) == 0


def test_the_event_log_keeps_what_happened_when_the_am_is_killed(client):
    app = client.submit(make_spec([{"name": "worker", "replicas": 1, "command": "sleep 300"}], am={"max_attempts": 1}))
    wait_for(lambda: client.status(app).job.state == "running", 30, "job running")
    job_dir = client.cluster("local").job(app).path
    wait_for(lambda: '"to_state":"running"' in (job_dir / "events.jsonl").read_text(), 10, "events logged")
    before = (job_dir / "events.jsonl").read_text()
    os.kill(client.cluster("local").am_pid(app), signal.SIGKILL)
    wait_for(lambda: not client.cluster("local").am_alive(app), 10, "the AM gone")
    after = (job_dir / "events.jsonl").read_text()
    assert after.startswith(before)  # nothing the AM had logged is lost or rewritten by its death
    logged = [json.loads(line) for line in after.splitlines()]  # every line whole
    assert ("job", "running") in {(e["subject"], e["to_state"]) for e in logged if e["kind"] == "event"}
    # What the finished job's page (primus ui APP) shows is that log, though the AM saved no outcome.
    from primus_runtime.ui.history import archive_view

    shown = archive_view(client, app).events_from(0)
    assert {("job", "running"), ("worker-0", "running")} <= {(e["subject"], e["to_state"]) for e in shown}
    client.cluster("local").force_kill(app)


def test_spec_secrets_are_masked(client):
    app = client.submit(make_spec([{"name": "worker", "command": "sleep 300",
                                    "env": {"DB_PASSWORD": "hunter2", "API_TOKEN": "abc", "MODE": "fast"}}]))
    try:
        url = base(client, app)
        _, token = client.cluster("local").am_endpoint(app)
        spec = signed_in(url, token).get(url + "/api/v1/spec").json()
        assert spec["roles"][0]["env"] == {"DB_PASSWORD": "***", "API_TOKEN": "***", "MODE": "fast"}
    finally:
        client.kill(app)


def test_an_unchanged_answer_is_a_304_and_a_change_a_new_etag(client, sleeper):
    from primus_runtime.ui.web import etag_matches

    url = base(client, sleeper)
    _, token = client.cluster("local").am_endpoint(sleeper)
    session = signed_in(url, token)
    summary = {"view": "summary", "events": 0}
    first = session.get(url + "/api/v1/status", params=summary)
    etag = first.headers["ETag"]
    again = session.get(url + "/api/v1/status", params=summary, headers={"If-None-Match": etag})
    assert (again.status_code, again.content, again.headers["ETag"]) == (304, b"", etag)
    listed = session.get(url + "/api/v1/status", params=summary, headers={"If-None-Match": f'"other", W/{etag}'})
    assert listed.status_code == 304
    count = len(session.get(url + "/api/v1/events").json()["events"])
    events = session.get(url + "/api/v1/events", params={"since": count})
    assert session.get(url + "/api/v1/events", params={"since": count},
                       headers={"If-None-Match": events.headers["ETag"]}).status_code == 304

    assert session.post(url + "/api/v1/roles/worker/scale", json={"replicas": 3},
                        headers={ACTION_HEADER: "1"}).status_code == 200
    changed = session.get(url + "/api/v1/status", params=summary, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["ETag"] != etag
    assert changed.json()["roles"][0]["replicas"] == 3
    assert etag_matches("*", etag) and not etag_matches(None, etag) and not etag_matches('"x"', etag)


def test_the_summary_counts_the_executors_without_listing_them(client, sleeper):
    from primus_runtime import models

    url = base(client, sleeper)
    _, token = client.cluster("local").am_endpoint(sleeper)
    session = signed_in(url, token)
    summary = session.get(url + "/api/v1/status", params={"view": "summary", "events": 3}).json()
    models.StatusSummary.model_validate(summary)
    assert set(summary) == {"job", "roles", "events", "data", "goodput"} and len(summary["events"]) == 3
    full = session.get(url + "/api/v1/status").json()
    [role] = summary["roles"]
    assert role["states"]["running"] == len([e for e in full["executors"] if e["state"] == "running"]) == 2
    assert role["ready"] == 2 and role["restarts"] == 0 and role["failures"] == 0
    assert summary["job"] == full["job"]
    assert "executors" not in client.status(sleeper, summary=True).model_dump(mode="json")


def _register(am, executor_id: str) -> dict:
    ex = am.record.executors[executor_id]
    return {"id": ex.id, "role": ex.role, "index": ex.index, "incarnation": ex.incarnation, "host": "127.0.0.1",
            "ports": [], "pid": 0}


def test_executors_are_paged_filtered_by_role_state_and_id_with_a_total():
    """In the AM itself (a simulated backend, 3 ps and 120 workers, 5 of them registered)."""
    from aiohttp.test_utils import TestClient, TestServer

    from primus_runtime import protocol
    from primus_runtime.am.master import ApplicationMaster
    from primus_runtime.am.server import build_app
    from primus_runtime.spec import JobSpec
    from simulated_backend import SimulatedBackend

    async def scenario() -> None:
        spec = JobSpec.from_dict(make_spec([{"name": "ps", "replicas": 3, "command": "x"},
                                            {"name": "worker", "replicas": 120, "command": "x"}],
                                           am={"heartbeat_timeout": "600s"}))
        am = ApplicationMaster(spec, "app", SimulatedBackend())
        await am.start("127.0.0.1:1")
        while any(ex.state.value != "starting" for ex in am.record.executors.values()):
            await asyncio.sleep(0.01)
        auth = {"Authorization": "Bearer t"}
        async with TestClient(TestServer(build_app(am, "t"))) as http:
            async def executors(**params) -> dict:
                reply = await http.get(protocol.API_PREFIX + "/executors", params=params, headers=auth)
                assert reply.status == 200, await reply.text()
                return await reply.json()

            for i in range(10, 15):
                await http.post(protocol.REGISTER_PATH, json=_register(am, f"worker-{i}"), headers=auth)
            everyone = await executors()
            assert everyone["total"] == 123 and everyone["limit"] is None
            assert [e["id"] for e in everyone["executors"]] == [f"ps-{i}" for i in range(3)] + \
                [f"worker-{i}" for i in range(120)]
            page = await executors(role="worker", offset=50, limit=50)
            assert (page["total"], page["offset"], page["limit"]) == (120, 50, 50)
            assert [e["index"] for e in page["executors"]] == list(range(50, 100))
            assert [e["index"] for e in (await executors(role="worker", offset=100, limit=50))["executors"]] == \
                list(range(100, 120))
            assert (await executors(role="worker", offset=500, limit=50))["executors"] == []
            registered = await executors(state="registered")
            assert registered["total"] == 5 and [e["id"] for e in registered["executors"]] == \
                [f"worker-{i}" for i in range(10, 15)]
            either = await executors(role="ps", state="registered,starting", limit=2)
            assert either["total"] == 3 and [e["id"] for e in either["executors"]] == ["ps-0", "ps-1"]
            named = await executors(ids="worker-3,ps-1,worker-999")
            assert named["total"] == 2 and [e["id"] for e in named["executors"]] == ["ps-1", "worker-3"]
            assert page["executors"][0] == everyone["executors"][53]  # the same rows as the whole list

            status = await http.get(protocol.API_PREFIX + "/status", params={"view": "summary"}, headers=auth)
            summary = await status.json()
            assert "executors" not in summary
            assert {r["name"]: (r["states"]["registered"], r["states"]["starting"]) for r in summary["roles"]} == \
                {"ps": (0, 3), "worker": (5, 115)}
            bad = await http.get(protocol.API_PREFIX + "/executors", params={"state": "running,asleep"}, headers=auth)
            assert bad.status == 400 and "state" in (await bad.json())["error"]
        await am.close()

    asyncio.run(scenario())


def test_the_status_is_encoded_once_for_every_poller_until_an_event():
    from primus_runtime.ui.web import EncodedCache

    builds: list[int] = []

    def build() -> dict:
        builds.append(1)
        return {"builds": len(builds)}

    cache = EncodedCache(seconds=3600)
    first = cache.get(("summary", 0), 7, build)
    assert cache.get(("summary", 0), 7, build) is first and len(builds) == 1  # pollers share one encoding
    moved = cache.get(("summary", 0), 8, build)  # an event happened
    assert len(builds) == 2 and moved.etag != first.etag
    assert cache.get(("full", 0), 8, build) is not moved  # each view (and events=N) is kept apart
    expired = EncodedCache(seconds=0)  # kept no time: built again at each call
    expired.get("k", 1, build)
    expired.get("k", 1, build)
    assert len(builds) == 5


def test_the_am_lingers_only_for_pages_seen_lately_that_have_not_read_the_outcome():
    from types import SimpleNamespace

    from primus_runtime.ui.web import PageReaders

    readers = PageReaders("primus_session", seen_within=0.3)
    api_client = SimpleNamespace(cookies={})
    page = SimpleNamespace(cookies={"primus_session": "s1"})
    readers.saw(api_client, False)
    assert readers.waiting() == 0  # an API client falls back to the job store: nobody to wait for
    readers.saw(page, False)
    assert readers.waiting() == 1
    readers.saw(page, True)
    assert readers.waiting() == 0
    other = SimpleNamespace(cookies={"primus_session": "s2"})
    readers.saw(other, False)
    assert readers.waiting() == 1
    # Time passing is what is tested: a tab closed (or hidden: it stops polling) holds nobody once not
    # seen within seen_within (0.3 s).
    time.sleep(0.35)
    assert readers.waiting() == 0
    readers.saw(other, False)
    asyncio.run(readers.until_read(0.0, 0.2))  # a page that never reads the outcome: waited for within the bound
    assert readers.waiting() == 1
