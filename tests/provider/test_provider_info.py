"""The provider registers with Airflow: get_provider_info(), `airflow providers get|hooks`."""

from __future__ import annotations

import json
import re
from importlib import import_module
from pathlib import Path

import airflow
import jsonschema
from airflow.providers_manager import ProvidersManager

from airflow_provider_primus import __version__, get_provider_info
from airflow_provider_primus.hooks.primus import CONNECTION_FIELDS, PrimusHook
from airflow_provider_primus.links.primus import PrimusJobLink
from primus_runtime import backends

from .conftest import run_airflow


def test_provider_info_shape_is_valid_for_airflow(primus_home):
    info = get_provider_info()
    # The schema Airflow itself validates provider info against.
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(info, schema)
    # The distribution pyproject.toml declares, at its version.
    project = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text().split("\n[project]\n", 1)[1]
    assert info["package-name"] == re.search(r'^name = "([^"]+)"$', project, re.MULTILINE)[1]
    assert info["versions"] == [__version__] == [re.search(r'^version = "([^"]+)"$', project, re.MULTILINE)[1]]
    for kind in ("hooks", "operators", "sensors", "triggers"):
        for module in info[kind][0]["python-modules"]:
            __import__(module)
    (conn,) = info["connection-types"]
    module, _, name = conn["hook-class-name"].rpartition(".")
    hook = getattr(import_module(module), name)
    assert conn["connection-type"] == hook.conn_type == "primus"
    assert hook.default_conn_name == "primus_default"
    fields = conn["conn-fields"]
    # The form offers the registry's backends, and by default the one the hook takes without a connection.
    assert fields["backend"]["schema"]["enum"] == list(backends.NAMES)
    assert fields["backend"]["schema"]["default"] == hook().settings["backend"]
    # The form declares exactly the fields the hook reads from the connection.
    assert set(fields) == set(CONNECTION_FIELDS)
    (link,) = info["extra-links"]
    module, _, name = link.rpartition(".")
    assert getattr(import_module(module), name) is PrimusJobLink


def test_airflow_cli_lists_triggers_and_the_job_link():
    triggers = run_airflow("providers", "triggers", "-o", "json")
    assert triggers.returncode == 0, triggers.stderr
    ours = {t["class"] for t in json.loads(triggers.stdout) if t["package_name"] == "airflow-provider-primus"}
    info = get_provider_info()
    assert ours == {module for trigger in info["triggers"] for module in trigger["python-modules"]}
    assert len(ours) == 2  # the job trigger and the partition event trigger
    links = run_airflow("providers", "links", "-o", "json")
    assert links.returncode == 0, links.stderr
    assert f"{PrimusJobLink.__module__}.{PrimusJobLink.__qualname__}" in links.stdout
    assert info["extra-links"] == [f"{PrimusJobLink.__module__}.{PrimusJobLink.__qualname__}"]


def test_airflow_cli_lists_provider_and_hook():
    got = run_airflow("providers", "get", "airflow-provider-primus", "--full", "-o", "json")
    assert got.returncode == 0, got.stderr
    (provider,) = json.loads(got.stdout)
    info = get_provider_info()
    assert provider["package-name"] == info["package-name"] and provider["versions"] == [__version__]
    assert provider["connection-types"] == info["connection-types"]

    hooks = run_airflow("providers", "hooks", "-o", "json")
    assert hooks.returncode == 0, hooks.stderr
    primus = [h for h in json.loads(hooks.stdout) if h["connection_type"] == "primus"]
    assert primus and primus[0]["class"] == f"{PrimusHook.__module__}.{PrimusHook.__qualname__}"
    assert primus[0]["class"] == info["connection-types"][0]["hook-class-name"]
    assert primus[0]["package_name"] == info["package-name"]


def test_connection_form_fields_are_declarative():
    widgets = ProvidersManager().connection_form_widgets
    assert {"extra__primus__backend", "extra__primus__home"} <= set(widgets)
    assert widgets["extra__primus__backend"].field["schema"]["enum"] == list(backends.NAMES)
    assert ProvidersManager().field_behaviours["primus"]["hidden_fields"][0] == "host"
