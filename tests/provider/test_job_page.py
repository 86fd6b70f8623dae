"""The "Primus job" link and its page (plugins/job_page.py) on real local jobs, without an api-server:
the plugin's FastAPI app with Airflow's DAG permission check and the XCom lookup replaced.
The same page through a real api-server (authentication, XComs): test_live_airflow.py."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient

from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.links.primus import CONN_ID_KEY, PrimusJobLink, job_page_url
from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator
from airflow_provider_primus.plugins import LazyJobPageApp, PrimusPlugin
from airflow_provider_primus.plugins.job_page import (
    JobFacts,
    TaskJob,
    can_read_task_instance,
    create_app,
    job_response,
    outcome_page,
    task_job,
)
from conftest import make_spec

from .conftest import REPO, make_context, status_summary
from .live_airflow import PRIMUS_PLUGIN

SLEEPY = [{"name": "worker", "replicas": 1, "ports": 0, "command": "sleep 60"}]
SHORT = [{"name": "worker", "replicas": 2, "ports": 0, "command": "true"}]
PATH = "/jobs/dag/train?run_id=manual__1"


def test_the_link_names_the_task_instance_under_the_api_servers_base_url():
    assert job_page_url("dag", "train", "manual__2026-01-01T00:00:00+00:00", -1, "https://airflow.example.com/") == (
        "https://airflow.example.com/primus/jobs/dag/train?run_id=manual__2026-01-01T00%3A00%3A00%2B00%3A00&map_index=-1")
    # No [api] base_url: a path from the server's root (Airflow's UI opens same-origin paths as they are).
    assert job_page_url("a/b", "t x", "r", 3, None) == "/primus/jobs/a%2Fb/t%20x?run_id=r&map_index=3"
    assert job_page_url("d", "t", "r", -1, "http://host:8080/airflow") == "http://host:8080/airflow/primus/jobs/d/t?run_id=r&map_index=-1"


def test_the_plugin_serves_the_page_under_primus_and_builds_it_on_first_use():
    (app,) = PrimusPlugin.fastapi_apps
    assert app["url_prefix"] == "/primus" and isinstance(app["app"], LazyJobPageApp)


def test_the_plugin_is_the_distributions_airflow_plugins_entry_point():
    # (tomllib is Python 3.11+: the section read as text)
    pyproject = (REPO / "pyproject.toml").read_text()
    section = pyproject.split('[project.entry-points."airflow.plugins"]\n', 1)[1].split("\n[", 1)[0]
    # the same target the live tests' Airflow loads from its plugins folder when the venv predates it
    assert f'primus = "{PRIMUS_PLUGIN}"' in section.splitlines()
    module, _, name = PRIMUS_PLUGIN.partition(":")
    assert getattr(import_module(module), name) is PrimusPlugin


def test_before_its_am_serves_a_page_the_page_follows_the_job_and_links_yarns_application_page():
    job = TaskJob("application_1700000000000_0007", "primus_yarn")
    status = status_summary({"app_id": job.app_id, "name": "train", "state": "pending", "reason": "AM starting"})
    text = outcome_page(job, JobFacts(status, None, "http://rm:8088/cluster/app/application_1700000000000_0007",
                                      "primus ui application_1700000000000_0007", "primus_yarn"))
    assert "<th>Airflow connection</th><td>primus_yarn</td>" in text
    assert "The job is pending: its AM does not serve its page (yet)" in text
    assert '<meta http-equiv="refresh" content="5">' in text and "Ended at" not in text
    assert '<a href="http://rm:8088/cluster/app/application_1700000000000_0007">' in text


def test_the_operator_pushes_the_page_link_and_its_connection_not_the_ams_address(primus_home, client):
    context = make_context()
    app_id = PrimusSubmitJobOperator(task_id="train", spec=make_spec(SLEEPY), wait_for_completion=False).execute(context)
    xcoms = context["ti"].xcoms
    assert xcoms[PrimusJobLink.xcom_key] == job_page_url("dag", "train", "manual__1", -1, None)
    assert xcoms[CONN_ID_KEY] == "primus_default" and xcoms["app_id"] == app_id
    client.kill(app_id)


@pytest.fixture
def page() -> Iterator[tuple[TestClient, list[TaskJob]]]:
    """The plugin's app, signed in (the DAG permission check passes), serving the task's job that
    the test puts in the list."""
    app = create_app()
    jobs: list[TaskJob] = []
    app.dependency_overrides[can_read_task_instance] = lambda: None
    app.dependency_overrides[task_job] = lambda: jobs[0]
    with TestClient(app) as http:
        yield http, jobs


def test_a_running_jobs_link_leads_to_its_ams_page(primus_home, client, page):
    http, jobs = page
    app_id = PrimusHook().submit(make_spec(SLEEPY))
    jobs.append(TaskJob(app_id, "primus_default"))
    am_page = PrimusHook().job_url(app_id)
    reply = http.get(PATH, follow_redirects=False)
    assert reply.status_code == 307 and reply.headers["location"] == am_page
    _, token = client.cluster("local").am_endpoint(app_id)
    assert token not in am_page
    client.kill(app_id)


def test_an_ended_jobs_link_says_it_is_over_with_its_outcome_and_how_to_see_its_page(primus_home, client, page):
    http, jobs = page
    app_id = PrimusHook().submit(make_spec(SHORT))
    client.wait(app_id, timeout=60)
    jobs.append(TaskJob(app_id, "primus_default"))
    reply = http.get(PATH, follow_redirects=False)
    assert reply.status_code == 200, reply.text
    text = reply.text
    assert f"Primus job {app_id}: succeeded" in text
    assert "The job is over: it succeeded." in text
    assert "worker x2: 2 succeeded" in text  # the roles, as the task log says them
    assert "Ended at" in text and " UTC" in text
    assert f"primus --home {primus_home} ui {app_id}" in text  # where the full page comes back
    assert client.cluster("local").job(app_id).token.read_text().strip() not in text


def test_a_killed_jobs_page_gives_the_kill_reason(primus_home, client, page):
    http, jobs = page
    app_id = PrimusHook().submit(make_spec(SLEEPY))
    client.kill(app_id, reason="stopped by the test")
    jobs.append(TaskJob(app_id, "primus_default"))
    reply = http.get(PATH)
    assert reply.status_code == 200 and "The job is over: it was killed." in reply.text  # was "it killed."
    assert "stopped by the test" in reply.text


def test_an_unknown_job_is_a_404_page_that_names_it(primus_home, page):
    http, jobs = page
    jobs.append(TaskJob("primus-20260101-000000-abcdef", "primus_default"))
    reply = http.get(PATH)
    assert reply.status_code == 404 and "primus-20260101-000000-abcdef" in reply.text


def test_without_credentials_the_page_answers_401_and_never_looks_the_job_up():
    app = create_app()
    looked_up: list[bool] = []
    app.dependency_overrides[task_job] = lambda: looked_up.append(True)
    with TestClient(app) as http:
        reply = http.get(PATH)
        assert reply.status_code == 401 and looked_up == []
        # A browser (it accepts HTML) is sent to Airflow's login, which brings it back to the page.
        browser = http.get(PATH, headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"},
                           follow_redirects=False)
    assert browser.status_code == 303 and looked_up == []
    assert browser.headers["location"] == "/api/v2/auth/login?" + urlencode({"next": "http://testserver" + PATH})


def test_a_page_read_through_the_missing_default_connection_says_so(primus_home, client, page):
    http, jobs = page
    app_id = PrimusHook().submit(make_spec(SHORT))
    client.wait(app_id, timeout=60)
    jobs.append(TaskJob(app_id, "primus_default"))
    text = http.get(PATH).text
    assert "<th>Airflow connection</th><td>none (primus_default is not defined: the local backend, " \
           f"Primus home {primus_home})</td>" in text


def yarn_connection(monkeypatch: pytest.MonkeyPatch, conf_dir: Path, rm_port: int) -> TaskJob:
    """A ``primus`` connection to a YARN cluster whose ResourceManager listens on ``rm_port``."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / "yarn-site.xml").write_text(
        "<configuration><property><name>yarn.resourcemanager.webapp.address</name>"
        f"<value>127.0.0.1:{rm_port}</value></property></configuration>")
    monkeypatch.setenv("AIRFLOW_CONN_PRIMUS_YARN", json.dumps(
        {"conn_type": "primus", "extra": {"backend": "yarn", "hadoop_conf_dir": str(conf_dir)}}))
    return TaskJob("application_1700000000000_0001", "primus_yarn")


def test_an_unreachable_cluster_is_said_so(tmp_path, monkeypatch):
    with socket.socket() as closed:  # a port nothing listens on: connection refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    job = yarn_connection(monkeypatch, tmp_path / "conf", port)
    reply = asyncio.run(job_response(job))
    assert reply.status_code == 502
    assert "the job&#x27;s cluster is unreachable: ResourceManager http://127.0.0.1:" in reply.body.decode()


def test_a_cluster_that_never_answers_gets_a_page_at_the_deadline(tmp_path, monkeypatch):
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        job = yarn_connection(monkeypatch, tmp_path / "conf", silent.getsockname()[1])
        reply = asyncio.run(job_response(job, timeout=1.0))
    assert reply.status_code == 504
    assert "did not answer within 1 s" in reply.body.decode()
