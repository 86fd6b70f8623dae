"""Provider tests: a private AIRFLOW_HOME (never ~/airflow), set before Airflow is imported."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import airflow
import pytest

from airflow_provider_primus.version_compat import AIRFLOW_V_3_3_PLUS

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_DAGS = REPO / "example_dags"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))

_AIRFLOW_HOME = tempfile.mkdtemp(prefix="primus-airflow-home-")
os.environ.update({
    "AIRFLOW_HOME": _AIRFLOW_HOME,
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_FOLDER": str(EXAMPLE_DAGS),
})
os.environ.pop("AIRFLOW_CONN_PRIMUS_DEFAULT", None)


def requires_airflow_3_3(feature: str) -> pytest.MarkDecorator:
    """Skip a test of ``feature`` below Airflow 3.3, which brings it (the oldest-Airflow run shows why)."""
    return pytest.mark.skipif(not AIRFLOW_V_3_3_PLUS,
                              reason=f"{feature} needs Airflow 3.3+, installed {airflow.__version__}")


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_AIRFLOW_HOME, ignore_errors=True)


def airflow_env(airflow_home: Path, primus_home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(AIRFLOW_HOME=str(airflow_home), PRIMUS_HOME=str(primus_home))
    return env


def run_airflow(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([AIRFLOW, *args], env=env or dict(os.environ), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def migrated_airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An AIRFLOW_HOME with a migrated metadata DB, for ``airflow dags test`` (one per test module)."""
    airflow_home = tmp_path_factory.mktemp("airflow-home")
    got = run_airflow("db", "migrate", env=airflow_env(airflow_home, airflow_home / "unused"))
    assert got.returncode == 0, got.stderr[-3000:]
    return airflow_home


@pytest.fixture
def primus_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The default Primus home of the hook's no-connection fallback, per test."""
    monkeypatch.setenv("PRIMUS_HOME", str(home))
    return home


class FakeTaskInstance(SimpleNamespace):
    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value


class FakeStateStore(dict):
    """The get/set part of Airflow 3.3's TaskStateStoreAccessor."""

    def set(self, key: str, value: Any, *, retention: Any = None) -> None:
        self[key] = value


#: When the DAG run of ``make_context`` started (the scheduler's clock): part of each job's ``submit_id`` tag.
RUN_STARTED = datetime(2026, 12, 4, 17, 40, 57, tzinfo=timezone.utc)


def make_context(try_number: int = 1, map_index: int = -1, store: FakeStateStore | None = None,
                 run_started: datetime = RUN_STARTED, **extra: Any) -> dict[str, Any]:
    ti = FakeTaskInstance(dag_id="dag", task_id="train", run_id="manual__1", map_index=map_index,
                          try_number=try_number, xcoms={}, stats_tags={})
    context: dict[str, Any] = {"ti": ti, "dag_run": SimpleNamespace(start_date=run_started), **extra}
    if store is not None:
        context["task_state_store"] = store
    return context


def execute_in_thread(op: Any, context: dict[str, Any] | None = None) -> tuple[threading.Thread, dict[str, Any]]:
    """Start ``op.execute`` (with ``context``, default ``make_context()``) in a thread, as a worker
    runs a task (so a test can kill it meanwhile); the thread, and the outcome it fills in:
    ``result`` or ``error``."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = op.execute(context if context is not None else make_context())
        except BaseException as exc:  # noqa: BLE001 - the test looks at whatever ended the task
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def favoured() -> None:
    """A probe's ``preexec_fn``: a higher scheduling priority where allowed (root, as in CI), so that
    what it measures is its own code blocking the loop, not the other processes of a loaded 2-core
    machine (the clusters' JVMs, the job it watches) preempting it."""
    try:
        os.nice(-10)
    except OSError:
        pass
