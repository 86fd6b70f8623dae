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
from primus_runtime.models import ExecutorView, StatusDocument, StatusSummary

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


#: The start of a blocking probe (a script run in a fresh interpreter, as the triggerer): it times
#: every step of the event loop (``asyncio.events.Handle._run`` runs each callback and task step) and
#: lists in ``slow`` those whose own time reached ``STEP_LIMIT``, with asyncio's description of the step
#: (a task's coroutine and line). A step's own time is its wall time less what no code of the step
#: caused: waiting for a CPU (``/proc`` schedstat's run-queue delay of the loop's thread: the other
#: processes of a loaded 2-core machine) and the garbage collector's passes (a full one walks every
#: object Airflow's imports left, ~0.15 s, in whichever step allocates when it is due). A step that
#: computes, or sleeps in a blocking call, counts whole.
LOOP_STEP_TIMER = """
import asyncio, gc, threading, time

STEP_LIMIT = 0.1
slow = []
_collecting = [0.0, 0.0]  # [seconds the garbage collector ran so far, when its current pass started]


def _on_gc(phase, info):
    if phase == "start":
        _collecting[1] = time.perf_counter()
    else:
        _collecting[0] += time.perf_counter() - _collecting[1]


gc.callbacks.append(_on_gc)
_SCHEDSTAT = f"/proc/self/task/{threading.get_native_id()}/schedstat"


def _waited_for_cpu():
    try:
        with open(_SCHEDSTAT) as f:
            return int(f.read().split()[1]) / 1e9  # (on CPU, waiting on a run queue, slices), in ns
    except OSError:  # no /proc, or a kernel without schedstats: count the whole wall time
        return 0.0


_run = asyncio.events.Handle._run


def _timed_run(self):
    started, waited, collected = time.perf_counter(), _waited_for_cpu(), _collecting[0]
    try:
        return _run(self)
    finally:
        wall = time.perf_counter() - started
        own = wall - (_waited_for_cpu() - waited) - (_collecting[0] - collected)
        if own >= STEP_LIMIT:
            step = getattr(self._callback, "__self__", self)  # a task's step: the task, its coroutine and line
            slow.append(f"{step!r} took {own:.3f} s ({wall:.3f} s with its waits for a CPU and the collector)")


asyncio.events.Handle._run = _timed_run
"""


# --- status snapshots for unit tests: the typed models the client returns, built from the parts a test names --

_JOB = {"app_id": "primus-1", "name": "test", "state": "running", "reason": ""}
_ROLE = {"released": True, "ignored": False, "failures": 0, "restarts": 0, "states": {}, "ready": 0}
_DATA = {"state": "running", "tasks": {}, "bytes": {}, "records_done": 0, "progress": None,
         "progress_of_discovered": 0.0, "partitions_listed": 0, "rate_bytes_per_s": 0.0, "eta_seconds": None,
         "watermark": None, "scan_complete": True, "waiting_for": None, "quarantined": [], "failure": None}
_KAFKA = {"source": "clicks", "bootstrap_servers": "broker:9092", "topics": ["clicks"], "group": "g",
          "start": "committed", "end": None, "consumer_config": {}, "reachable": True, "unreachable_since": None,
          "lag": None, "records_per_s": 0.0, "eta_seconds": None, "watermark": None, "progress": None,
          "partitions": []}
_EXECUTOR = {"role": "worker", "index": 0, "incarnation": "1", "attempt": 0, "state": "running", "host": None,
             "ports": [], "pid": None, "gpus": [], "exit_code": None, "reason": "", "logs": {}, "created_at": 0.0,
             "registered_at": None, "running_at": None, "finished_at": None, "ready": False, "ready_at": None,
             "stop_reason": None}


def status_summary(job: dict[str, Any] | None = None, roles: list[dict[str, Any]] | None = None,
                   data: dict[str, Any] | None = None) -> StatusSummary:
    """A ``StatusSummary`` with ``job``, ``roles`` and ``data`` as given (validated: what the AM
    would serve), the fields a test does not name filled with plain values."""
    return StatusSummary.model_validate(_status(job, roles, data))


def status_document(job: dict[str, Any] | None = None, roles: list[dict[str, Any]] | None = None,
                    data: dict[str, Any] | None = None,
                    executors: list[dict[str, Any]] | None = None) -> StatusDocument:
    """``status_summary`` as a full ``StatusDocument``, with its ``executors`` (``executor_row``s)."""
    return StatusDocument.model_validate({**_status(job, roles, data), "executors": executors or []})


def executor_row(executor_id: str = "worker-0", **fields: Any) -> dict[str, Any]:
    """One row of a status's ``executors`` (``models.ExecutorView``), ``fields`` as given."""
    role, _, index = executor_id.rpartition("-")
    return ExecutorView.model_validate({**_EXECUTOR, "id": executor_id, "role": role, "index": int(index),
                                        **fields}).model_dump(mode="json")


def _status(job: dict[str, Any] | None, roles: list[dict[str, Any]] | None,
            data: dict[str, Any] | None) -> dict[str, Any]:
    if data is not None:
        data = {**_DATA, **data}
        if data.get("kafka") is not None:
            data["kafka"] = {**_KAFKA, **data["kafka"]}
    return {"job": {**_JOB, **(job or {})}, "roles": [{**_ROLE, **role} for role in roles or []], "events": [],
            "data": data}
