"""The Primus panel (plugins/panel.py) and its API on real local jobs, without an api-server: the
plugin's FastAPI app with the XCom lookup (and, except where a test checks Airflow's permissions,
the permission checks) replaced. The panel in a real Airflow, in a browser: tests/ui/test_airflow_panel.py."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
from airflow.api_fastapi.core_api.datamodels.plugins import ExternalViewResponse
from airflow.api_fastapi.core_api.security import get_user
from fastapi import HTTPException
from fastapi.testclient import TestClient

from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.plugins import PANEL_VIEW, PrimusPlugin
from airflow_provider_primus.plugins import panel as panel_module
from airflow_provider_primus.plugins.app import create_app
from airflow_provider_primus.plugins.job_page import TaskJob, can_edit_task_instance, can_read_task_instance, task_job
from airflow_provider_primus.plugins.panel import PanelReply, bounded, may_edit_task_instance, read_panel
from conftest import make_spec, wait_for

from .conftest import AIRFLOW

SLEEPY = [{"name": "worker", "replicas": 1, "ports": 0, "command": "sleep 60"}]
SHORT = [{"name": "worker", "replicas": 2, "ports": 0, "command": "true"}]
QUERY = "?run_id=manual__1&map_index=-1"
API = "/api/panel/dag/train" + QUERY
SAME_ORIGIN = {"Origin": "http://testserver"}


def action(name: str) -> str:
    return f"/api/panel/dag/train/{name}" + QUERY


@dataclass
class Panel:
    """The plugin's app as a signed-in user sees it: ``jobs[0]`` is the task instance's job."""

    http: TestClient
    jobs: list[TaskJob] = field(default_factory=list)
    may_edit: list[bool] = field(default_factory=lambda: [True])

    def show(self, job: TaskJob, **params: Any) -> PanelReply:
        self.jobs[:] = [job]
        reply = self.http.get(API, params=params)
        assert reply.status_code == 200, reply.text
        return PanelReply.model_validate_json(reply.text)


def _the_job(jobs: list[TaskJob]) -> TaskJob:
    if not jobs:
        raise HTTPException(404, "has submitted no Primus job")
    return jobs[0]


@pytest.fixture
def panel() -> Iterator[Panel]:
    app = create_app()
    view = Panel(TestClient(app))
    app.dependency_overrides.update({
        can_read_task_instance: lambda: None, can_edit_task_instance: lambda: None,
        task_job: lambda: _the_job(view.jobs), may_edit_task_instance: lambda: view.may_edit[0],
        get_user: lambda: SimpleAuthManagerUser(username="alice", role="admin"),
    })
    with view.http:
        yield view


def token_of(client: Any, app_id: str) -> str:
    return client.cluster("local").job(app_id).token.read_text().strip()


# --- the tab ----------------------------------------------------------------------------------

def test_the_panel_is_a_tab_of_every_task_instance_page_in_airflows_ui():
    (view,) = PrimusPlugin.external_views
    assert view is PANEL_VIEW
    parsed = ExternalViewResponse.model_validate(view)  # what Airflow's /ui/plugins serves the UI
    assert parsed.destination == "task_instance" and parsed.url_route == "primus" and parsed.name == "Primus"
    assert parsed.href == "/primus/panel/{DAG_ID}/{TASK_ID}?run_id={RUN_ID}&map_index={MAP_INDEX}"


def test_the_page_knows_its_api_and_an_unmapped_tasks_placeholder_is_map_index_minus_1(panel):
    # An unmapped task's page leaves {MAP_INDEX} as it is (Airflow's UI fills it on mapped ones only).
    reply = panel.http.get("/panel/dag/train?run_id=manual__2026-01-01T00%3A00%3A00%2B00%3A00&map_index=%7BMAP_INDEX%7D")
    assert reply.status_code == 200
    assert ('data-api="/api/panel/dag/train?run_id=manual__2026-01-01T00%3A00%3A00%2B00%3A00&amp;map_index=-1"'
            in reply.text)
    assert "frame-ancestors 'self'" in reply.headers["content-security-policy"]
    assert '<script src="/static/panel.js"' in reply.text
    for name in ("panel.js", "panel.css", "primus.svg"):
        assert panel.http.get(f"/static/{name}").status_code == 200
    assert panel.http.get("/panel/dag/train?run_id=r&map_index=x").status_code == 422


# --- the API: a running job, an ended one ---------------------------------------------------------

def test_a_running_jobs_panel_is_live_with_its_roles_executors_and_timeline(primus_home, client, panel):
    app_id = PrimusHook().submit(make_spec(SLEEPY))
    job = TaskJob(app_id, "primus_default")
    client_wait_running(client, app_id)
    panel.jobs.append(job)
    raw = panel.http.get(API)
    assert raw.status_code == 200 and raw.headers["cache-control"] == "no-store"
    reply = PanelReply.model_validate_json(raw.text)
    assert (reply.app_id, reply.live, reply.can_edit) == (app_id, True, True)
    assert reply.status.job.state == "running" and [r.name for r in reply.status.roles] == ["worker"]
    (executor,) = reply.executors.executors
    assert (executor.id, executor.state, executor.restarts) == ("worker-0", "running", 0)
    assert reply.timeline is not None and reply.timeline.samples
    latest = reply.timeline.samples[-1].time
    assert all(s.time > latest for s in panel.show(job, since=latest).timeline.samples)
    assert token_of(client, app_id) not in raw.text
    client.kill(app_id)


def client_wait_running(client: Any, app_id: str) -> None:
    wait_for(lambda: client.status(app_id, summary=True).job.state == "running", 60, f"{app_id} to run", poll=0.2)


def test_an_ended_jobs_panel_is_its_final_page_from_what_its_am_left(primus_home, client, panel):
    app_id = PrimusHook().submit(make_spec(SHORT))
    client.wait(app_id, timeout=60)
    panel.may_edit[0] = False
    panel.jobs.append(TaskJob(app_id, "primus_default"))
    raw = panel.http.get(API)
    reply = PanelReply.model_validate_json(raw.text)
    assert (reply.live, reply.can_edit, reply.status.job.state) == (False, False, "succeeded")
    assert [(ex.id, ex.state, ex.exit_code) for ex in reply.executors.executors] == [
        ("worker-0", "succeeded", 0), ("worker-1", "succeeded", 0)]
    assert reply.timeline is not None and reply.timeline.samples  # the event log's samples
    assert reply.ui_command == f"primus --home {primus_home} ui {app_id}"
    assert reply.connection == f"none (primus_default is not defined: the local backend, Primus home {primus_home})"
    assert token_of(client, app_id) not in raw.text


def test_the_panel_shows_a_page_of_executors_and_how_many_there_are(primus_home, client, panel, monkeypatch):
    """A job of 10,000 executors would make every 3-second poll megabytes: the reply carries the
    first rows and the total (the roles' counts cover every executor)."""
    monkeypatch.setattr(panel_module, "EXECUTOR_ROWS", 1)
    app_id = PrimusHook().submit(make_spec([{"name": "worker", "replicas": 2, "ports": 0, "command": "sleep 2"}]))
    panel.jobs.append(TaskJob(app_id, "primus_default"))
    client_wait_running(client, app_id)
    live = panel.show(TaskJob(app_id, "primus_default"))
    client.wait(app_id, timeout=60)
    ended = panel.show(TaskJob(app_id, "primus_default"))
    for reply in (live, ended):
        assert (reply.executors.total, [ex.id for ex in reply.executors.executors]) == (2, ["worker-0"]), reply
        assert sum(role.replicas for role in reply.status.roles) == 2


def test_a_killed_jobs_panel_gives_the_kill_reason(primus_home, client, panel):
    app_id = PrimusHook().submit(make_spec(SLEEPY))
    client.kill(app_id, reason="stopped by the test")
    reply = panel.show(TaskJob(app_id, "primus_default"))
    assert reply.status.job.state == "killed" and "stopped by the test" in reply.status.job.reason


def test_a_task_without_a_job_and_an_unknown_job_are_404s_that_say_so(primus_home, panel):
    reply = panel.http.get(API)
    assert reply.status_code == 404 and "has submitted no Primus job" in reply.json()["detail"]
    panel.jobs.append(TaskJob("primus-20260101-000000-abcdef", "primus_default"))
    reply = panel.http.get(API)
    assert reply.status_code == 404 and "primus-20260101-000000-abcdef" in reply.json()["detail"]


def yarn_job(monkeypatch: pytest.MonkeyPatch, conf_dir: Path, rm_port: int) -> TaskJob:
    """A job of a ``primus`` connection to a YARN cluster whose ResourceManager listens on ``rm_port``."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / "yarn-site.xml").write_text(
        "<configuration><property><name>yarn.resourcemanager.webapp.address</name>"
        f"<value>127.0.0.1:{rm_port}</value></property></configuration>")
    monkeypatch.setenv("AIRFLOW_CONN_PRIMUS_YARN", json.dumps(
        {"conn_type": "primus", "extra": {"backend": "yarn", "hadoop_conf_dir": str(conf_dir)}}))
    return TaskJob("application_1700000000000_0001", "primus_yarn")


def test_an_unreachable_cluster_is_said_so(tmp_path, monkeypatch, panel):
    with socket.socket() as closed:  # a port nothing listens on: connection refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    panel.jobs.append(yarn_job(monkeypatch, tmp_path / "conf", port))
    reply = panel.http.get(API)
    assert reply.status_code == 502
    assert "the job's cluster is unreachable: ResourceManager http://127.0.0.1:" in reply.json()["detail"]


def test_a_cluster_that_never_answers_is_said_so_at_the_deadline(tmp_path, monkeypatch):
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        job = yarn_job(monkeypatch, tmp_path / "conf", silent.getsockname()[1])
        with pytest.raises(HTTPException) as caught:
            asyncio.run(bounded(job, lambda: read_panel(job, 0.0, False), timeout=1.0))
    assert caught.value.status_code == 504 and "did not answer within 1 s" in caught.value.detail


# --- actions ------------------------------------------------------------------------------------

def test_actions_reach_the_am_in_the_airflow_users_name(primus_home, client, panel):
    app_id = PrimusHook().submit(make_spec(SLEEPY))
    client_wait_running(client, app_id)
    panel.jobs.append(TaskJob(app_id, "primus_default"))
    scaled = panel.http.post(action("scale"), json={"role": "worker", "replicas": 2}, headers=SAME_ORIGIN)
    assert scaled.status_code == 200, scaled.text
    assert scaled.json() == {"message": "role worker scaled to 2 replicas"}
    restarted = panel.http.post(action("restart"), json={"executor": "worker-0"}, headers=SAME_ORIGIN)
    assert restarted.status_code == 200 and restarted.json()["message"].startswith("worker-0: stopping"), restarted.text
    missing = panel.http.post(action("restart"), json={"executor": "worker-9"}, headers=SAME_ORIGIN)
    assert missing.status_code == 404, missing.text  # the AM's answer, in its words
    killed = panel.http.post(action("kill"), json={"reason": ""}, headers=SAME_ORIGIN)
    assert killed.status_code == 200, killed.text
    final = client.wait(app_id, timeout=60)
    assert final.job.state == "killed" and final.job.reason == "killed by alice from Airflow"
    actors = {event.actor for event in final.events if event.actor}
    assert actors == {"alice"}, [e for e in final.events if e.actor]


@pytest.mark.parametrize(("headers", "status"), [
    ({"Origin": "https://evil.example"}, 403),
    ({"Referer": "http://evil.example:8080/x"}, 403),
    ({}, 403),  # neither Origin nor Referer
    ({"Origin": "http://testserver:8080"}, 403),  # another origin of the same site
    ({"Origin": "http://testserver", "Content-Type": "text/plain"}, 415),  # what a cross-site form can send
])
def test_an_action_from_another_origin_or_not_in_json_is_refused(panel, headers, status):
    panel.jobs.append(TaskJob("primus-20260101-000000-abcdef", "primus_default"))
    body = {"content": json.dumps({"reason": "x"})} if "Content-Type" in headers else {"json": {"reason": "x"}}
    reply = panel.http.post(action("kill"), headers=headers, **body)
    assert reply.status_code == status, reply.text


def test_an_action_from_this_origin_by_its_referer_passes_the_check(primus_home, panel):
    panel.jobs.append(TaskJob("primus-20260101-000000-abcdef", "primus_default"))
    reply = panel.http.post(action("kill"), json={}, headers={"Referer": "http://testserver/dags/d/runs/r"})
    assert reply.status_code == 404, reply.text  # past the check: the job is unknown


# --- Airflow's permissions (its auth manager, not replaced) ----------------------------------------

@pytest.fixture(scope="module")
def metadata_db() -> None:
    """This process's metadata DB migrated (Airflow's DAG permission check reads the DAG's team from
    it); the configuration the migration writes goes to a home of its own, not this process's."""
    from airflow.configuration import conf

    url = conf.get("database", "sql_alchemy_conn")
    env = {**os.environ, "AIRFLOW_HOME": os.path.join(os.environ["AIRFLOW_HOME"], "migrate"),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url}
    done = subprocess.run([AIRFLOW, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture
def signed_in(metadata_db) -> Iterator[tuple[TestClient, list[SimpleAuthManagerUser | None], list[TaskJob]]]:
    """The app with Airflow's own permission checks (the simple auth manager); the user signed in is
    ``users[0]`` (None: nobody), and the XCom lookup is the real one unless ``jobs`` names one."""
    from airflow.api_fastapi.app import _AuthManagerState, create_auth_manager

    before = _AuthManagerState.instance
    create_auth_manager()
    app = create_app()
    users: list[SimpleAuthManagerUser | None] = [None]
    jobs: list[TaskJob] = []

    def user() -> SimpleAuthManagerUser:
        if users[0] is None:
            raise HTTPException(401, "Not authenticated")
        return users[0]

    app.dependency_overrides[get_user] = user
    with TestClient(app) as http:
        yield http, users, jobs
    _AuthManagerState.instance = before


def test_without_credentials_the_api_answers_401_and_a_browser_goes_to_the_login(metadata_db):
    with TestClient(create_app()) as http:  # no cookie, no Authorization: Airflow's own 401
        assert http.get(API).status_code == 401
        assert http.post(action("kill"), json={}, headers=SAME_ORIGIN).status_code == 401
        page = http.get("/panel/dag/train" + QUERY, headers={"Accept": "text/html"}, follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"].startswith("/api/v2/auth/login?next=")


def test_a_viewer_reads_a_task_without_a_job_as_a_plain_404(signed_in):
    http, users, _ = signed_in
    users[0] = SimpleAuthManagerUser(username="vera", role="viewer")
    reply = http.get(API)  # the real XCom lookup: this task instance pushed none
    assert reply.status_code == 404
    assert reply.json()["detail"] == ("task instance dag.train of run 'manual__1' (map index -1) has submitted "
                                      "no Primus job")


def test_can_edit_is_what_airflow_says_and_a_viewers_action_is_forbidden(primus_home, client, signed_in):
    http, users, jobs = signed_in
    app_id = PrimusHook().submit(make_spec(SLEEPY))
    jobs.append(TaskJob(app_id, "primus_default"))
    http.app.dependency_overrides[task_job] = lambda: jobs[0]
    users[0] = SimpleAuthManagerUser(username="vera", role="viewer")
    assert PanelReply.model_validate_json(http.get(API).text).can_edit is False
    forbidden = http.post(action("kill"), json={"reason": "no"}, headers=SAME_ORIGIN)
    assert forbidden.status_code == 403 and forbidden.json() == {"detail": "Forbidden"}
    assert client.status(app_id, summary=True).job.state not in ("killed", "stopping")
    users[0] = SimpleAuthManagerUser(username="ada", role="admin")
    assert PanelReply.model_validate_json(http.get(API).text).can_edit is True
    users[0] = None
    assert http.get(API).status_code == 401
    client.kill(app_id)
