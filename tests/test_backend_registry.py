"""The backend registry: every backend is one package the rest of the code reaches only through
``primus_runtime.backends``; nothing outside ``backends/`` names a backend."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import get_args

import pytest

from primus_runtime import backends
from primus_runtime.backends.base import ClusterClient, ExecutorBackend, JobStore
from primus_runtime.spec import JobSpec, SpecError

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", backends.NAMES)
def test_each_backend_is_one_package_with_its_four_parts(name):
    info = backends.get(name)
    assert get_args(info.settings.model_fields["type"].annotation) == (name,)
    client = importlib.import_module(f"primus_runtime.backends.{name}.client")
    assert inspect.signature(client.cluster_client).return_annotation  # typed factory
    assert any(issubclass(obj, ClusterClient) for obj in vars(client).values()
               if inspect.isclass(obj) and obj.__module__ == client.__name__)
    executors = importlib.import_module(f"primus_runtime.backends.{name}.executors")
    assert any(issubclass(obj, ExecutorBackend) for obj in vars(executors).values()
               if inspect.isclass(obj) and obj.__module__ == executors.__name__)
    am = importlib.import_module(f"primus_runtime.backends.{name}.am")
    assert inspect.iscoroutinefunction(am.run_am)
    assert any(issubclass(obj, JobStore) for obj in vars(am).values()
               if inspect.isclass(obj) and obj.__module__.startswith(info.package))


@pytest.mark.parametrize(("app_id", "name"), [
    ("primus-20261203-101500-abc123", "local"),
    ("application_1764756000000_0007", "yarn"),
    ("k8s.team-a.primus-train-3f9a1c", "kubernetes"),
])
def test_a_job_id_says_its_backend(app_id, name):
    assert backends.of_app_id(app_id).name == name


def test_an_id_of_no_backend_is_refused_naming_them_all():
    with pytest.raises(backends.UnknownBackend, match="'nope' is not a job id of any backend"):
        backends.of_app_id("nope")


def test_the_spec_accepts_every_registered_section_and_names_them_when_wrong():
    roles = [{"name": "w", "command": "true"}]
    for name, info in backends.BACKENDS.items():
        required = {k for k, f in info.settings.model_fields.items() if f.is_required() and k != "type"}
        section = {"type": name, **{k: "x" for k in required}}
        assert JobSpec.from_dict({"name": "j", "roles": roles, "backend": section}).backend.type == name
    with pytest.raises(SpecError) as err:
        JobSpec.from_dict({"name": "j", "roles": roles, "backend": {"type": "mesos"}})
    assert "backend: must be one of 'local', 'yarn', 'kubernetes', got 'mesos'" in str(err.value)


# A backend named in a comparison, as a key of a dict (``{"yarn": ...}``, ``d["yarn"]``,
# ``d.get("yarn")``) or by its id format: what the registry is for.
_BACKEND = r"""["'](local|yarn|kubernetes)["']"""
_NAMES_A_BACKEND = re.compile(
    rf"""(==|!=|\bin)\s*\(?\s*{_BACKEND}|{_BACKEND}\s*(==|!=)"""
    rf"""|{_BACKEND}\s*:|\[\s*{_BACKEND}\s*\]|\.(get|pop|setdefault)\(\s*{_BACKEND}"""
    r"""|startswith\(\s*["'](application_|k8s\.|primus-)""")


@pytest.mark.parametrize("line", [
    'if backend == "yarn":', 'if "local" != name:', 'if name in ("local", "yarn"):',
    'OPTIONS = {"kubernetes": through_airflow}', '{"yarn": 1}', "QUEUES = {'yarn' : 'queue'}",
    'fields["yarn"]', "hook.settings['kubernetes']", 'DEFAULTS.get("yarn", {})',
    'if app_id.startswith("application_"):'])
def test_the_guard_sees_a_backend_named_in_code(line):
    assert _NAMES_A_BACKEND.search(line)


@pytest.mark.parametrize("line", [
    'backend = backends.DEFAULT', 'info = backends.get(name)', 'x = {"backend": name}',
    'print("the local backend")', '"""the yarn queue"""'])
def test_the_guard_lets_code_that_asks_the_registry_be(line):
    assert not _NAMES_A_BACKEND.search(line)


def test_no_code_outside_the_backends_branches_on_a_backend():
    offenders = []
    for package in ("runtime/primus_runtime", "airflow_provider_primus"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "backends" in path.relative_to(ROOT).parts:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if _NAMES_A_BACKEND.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def test_each_backend_says_how_to_reach_its_jobs_from_a_shell(tmp_path):
    """What a message tells a person to type (e.g. the job page's `primus ui APP`) finds the job."""
    from primus_runtime.backends.kubernetes.client import KubernetesClusterClient
    from primus_runtime.backends.local.client import LocalClusterClient
    from primus_runtime.backends.yarn.client import YarnClusterClient

    assert LocalClusterClient(tmp_path / "my home").cli_command("ui", "primus-1") == \
        f"primus --home '{tmp_path / 'my home'}' ui primus-1"
    assert YarnClusterClient("/etc/hadoop/conf").cli_command("ui", "application_1_0001") == \
        "HADOOP_CONF_DIR=/etc/hadoop/conf primus ui application_1_0001"
    assert YarnClusterClient(None).cli_command("ui", "application_1_0001") == "primus ui application_1_0001"
    assert KubernetesClusterClient(api=None, namespace="ml").cli_command("ui", "primus-k-1") == \
        "primus --namespace ml ui primus-k-1"
