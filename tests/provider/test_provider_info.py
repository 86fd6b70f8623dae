"""The provider registers with Airflow: get_provider_info(), `airflow providers get|hooks`."""

from __future__ import annotations

import json
from importlib import import_module
from pathlib import Path

import airflow
import jsonschema
from airflow.providers_manager import ProvidersManager

from airflow_provider_primus import __version__, get_provider_info
from airflow_provider_primus.hooks.primus import CONNECTION_FIELDS
from airflow_provider_primus.links.primus import PrimusJobLink

from .conftest import run_airflow


def test_provider_info_shape_is_valid_for_airflow():
    info = get_provider_info()
    # The schema Airflow itself validates provider info against.
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(info, schema)
    assert info["package-name"] == "airflow-provider-primus"
    assert info["versions"] == [__version__]
    for kind in ("hooks", "operators", "sensors", "triggers"):
        for module in info[kind][0]["python-modules"]:
            __import__(module)
    (conn,) = info["connection-types"]
    module, _, name = conn["hook-class-name"].rpartition(".")
    hook = getattr(import_module(module), name)
    assert conn["connection-type"] == hook.conn_type == "primus"
    assert hook.default_conn_name == "primus_default"
    fields = conn["conn-fields"]
    assert fields["backend"]["schema"]["enum"] == ["local", "yarn", "kubernetes"]
    assert fields["backend"]["schema"]["default"] == "local"
    # The form declares exactly the fields the hook reads from the connection.
    assert set(fields) == set(CONNECTION_FIELDS)
    (link,) = info["extra-links"]
    module, _, name = link.rpartition(".")
    assert getattr(import_module(module), name) is PrimusJobLink


def test_airflow_cli_lists_triggers_and_the_job_link():
    triggers = run_airflow("providers", "triggers", "-o", "json")
    assert triggers.returncode == 0, triggers.stderr
    ours = {t["class"] for t in json.loads(triggers.stdout) if t["package_name"] == "airflow-provider-primus"}
    assert ours == {"airflow_provider_primus.triggers.primus", "airflow_provider_primus.triggers.partition_events"}
    links = run_airflow("providers", "links", "-o", "json")
    assert links.returncode == 0, links.stderr
    assert "airflow_provider_primus.links.primus.PrimusJobLink" in links.stdout


def test_airflow_cli_lists_provider_and_hook():
    got = run_airflow("providers", "get", "airflow-provider-primus", "--full", "-o", "json")
    assert got.returncode == 0, got.stderr
    (provider,) = json.loads(got.stdout)
    assert provider["package-name"] == "airflow-provider-primus" and provider["versions"] == [__version__]
    assert provider["connection-types"][0]["connection-type"] == "primus"

    hooks = run_airflow("providers", "hooks", "-o", "json")
    assert hooks.returncode == 0, hooks.stderr
    primus = [h for h in json.loads(hooks.stdout) if h["connection_type"] == "primus"]
    assert primus and primus[0]["class"] == "airflow_provider_primus.hooks.primus.PrimusHook"
    assert primus[0]["package_name"] == "airflow-provider-primus"


def test_connection_form_fields_are_declarative():
    widgets = ProvidersManager().connection_form_widgets
    assert {"extra__primus__backend", "extra__primus__home"} <= set(widgets)
    assert widgets["extra__primus__backend"].field["schema"]["enum"] == ["local", "yarn", "kubernetes"]
    assert ProvidersManager().field_behaviours["primus"]["hidden_fields"][0] == "host"
