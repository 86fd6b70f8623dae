"""The "Primus job" link, the plugin, and the link's route (plugins/job_page.py): it leads to the task
instance's Primus tab in Airflow's UI. The panel itself: test_panel.py (its API on
real jobs), tests/ui/test_airflow_panel.py (in a real Airflow, in a browser)."""

from __future__ import annotations

from importlib import import_module
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient

from airflow_provider_primus.links.primus import CONN_ID_KEY, PrimusJobLink, job_page_url, panel_tab_url
from airflow_provider_primus.operators.primus import PrimusSubmitJobOperator
from airflow_provider_primus.plugins import LazyJobPageApp, PrimusPlugin
from airflow_provider_primus.plugins.app import create_app
from airflow_provider_primus.plugins.job_page import can_read_task_instance, task_job
from conftest import make_spec

from .conftest import REPO, make_context
from .live_airflow import PRIMUS_PLUGIN

SLEEPY = [{"name": "worker", "replicas": 1, "ports": 0, "command": "sleep 60"}]
PATH = "/jobs/dag/train?run_id=manual__1"


def test_the_link_names_the_task_instance_under_the_api_servers_base_url():
    assert job_page_url("dag", "train", "manual__2026-01-01T00:00:00+00:00", -1, "https://airflow.example.com/") == (
        "https://airflow.example.com/primus/jobs/dag/train?run_id=manual__2026-01-01T00%3A00%3A00%2B00%3A00&map_index=-1")
    # No [api] base_url: a path from the server's root (Airflow's UI opens same-origin paths as they are).
    assert job_page_url("a/b", "t x", "r", 3, None) == "/primus/jobs/a%2Fb/t%20x?run_id=r&map_index=3"
    assert job_page_url("d", "t", "r", -1, "http://host:8080/airflow") == "http://host:8080/airflow/primus/jobs/d/t?run_id=r&map_index=-1"


def test_the_panels_tab_is_the_task_instances_page_in_airflows_ui():
    assert panel_tab_url("dag", "train", "manual__2026-01-01T00:00:00+00:00", -1, "https://airflow.example.com/") == (
        "https://airflow.example.com/dags/dag/runs/manual__2026-01-01T00%3A00%3A00%2B00%3A00/tasks/train/plugin/primus")
    # A mapped task instance's page, as Airflow's UI routes it.
    assert panel_tab_url("d", "t x", "r", 3, None) == "/dags/d/runs/r/tasks/t%20x/mapped/3/plugin/primus"
    assert panel_tab_url("d", "t", "r", -1, "http://host:8080/airflow") == (
        "http://host:8080/airflow/dags/d/runs/r/tasks/t/plugin/primus")


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


def test_the_operator_pushes_the_page_link_and_its_connection_not_the_ams_address(primus_home, client):
    context = make_context()
    app_id = PrimusSubmitJobOperator(task_id="train", spec=make_spec(SLEEPY), wait_for_completion=False).execute(context)
    xcoms = context["ti"].xcoms
    assert xcoms[PrimusJobLink.xcom_key] == job_page_url("dag", "train", "manual__1", -1, None)
    assert xcoms[CONN_ID_KEY] == "primus_default" and xcoms["app_id"] == app_id
    client.kill(app_id)


@pytest.fixture
def signed_in() -> TestClient:
    """The plugin's app, signed in (the DAG permission check passes); no job is ever looked up."""
    app = create_app()
    app.dependency_overrides[can_read_task_instance] = lambda: None
    app.dependency_overrides[task_job] = lambda: pytest.fail("the route looked the job up")
    return TestClient(app)


@pytest.mark.parametrize(("query", "tab"), [
    ("run_id=manual__1", "/dags/dag/runs/manual__1/tasks/train/plugin/primus"),
    ("run_id=manual__1&map_index=-1", "/dags/dag/runs/manual__1/tasks/train/plugin/primus"),
    ("run_id=r%2B1&map_index=3", "/dags/dag/runs/r%2B1/tasks/train/mapped/3/plugin/primus"),
])
def test_the_link_leads_to_the_task_instances_primus_tab(signed_in, query, tab):
    reply = signed_in.get(f"/jobs/dag/train?{query}", follow_redirects=False)
    assert reply.status_code == 307 and reply.headers["location"] == tab


def test_without_credentials_the_link_answers_401_or_sends_a_browser_to_airflows_login():
    app = create_app()
    looked_up: list[bool] = []
    app.dependency_overrides[task_job] = lambda: looked_up.append(True)
    with TestClient(app) as http:
        reply = http.get(PATH, follow_redirects=False)
        assert reply.status_code == 401 and looked_up == []
        # A browser (it accepts HTML) is sent to Airflow's login, which brings it back to the page.
        browser = http.get(PATH, headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"},
                           follow_redirects=False)
    assert browser.status_code == 303 and looked_up == []
    assert browser.headers["location"] == "/api/v2/auth/login?" + urlencode({"next": "http://testserver" + PATH})
