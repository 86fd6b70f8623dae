"""Shared fixtures: a private job home per test and helpers to drive real jobs."""

from __future__ import annotations

import copy
import importlib.util
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from primus_runtime.backends.local.jobs import processes_of_job
from primus_runtime.client import PrimusClient
from primus_runtime.models import ExecutorView, StatusDocument

BENCH = Path(__file__).resolve().parents[1] / "bench"


def chaos_bench() -> ModuleType:
    """bench/chaos.py, imported once as ``chaos_bench`` (``chaos`` is a test package's name), with
    bench/ on the path for its own imports (netfault)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    if "chaos_bench" not in sys.modules:
        spec = importlib.util.spec_from_file_location("chaos_bench", BENCH / "chaos.py")
        assert spec is not None and spec.loader is not None
        sys.modules["chaos_bench"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["chaos_bench"])
    return sys.modules["chaos_bench"]


# Fast but tolerant of a loaded 2-core CI machine.
FAST_AM = {"heartbeat_interval": 0.25, "heartbeat_timeout": 3.0, "shutdown_grace": 2.0}


def make_spec(roles: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "test", "am": dict(FAST_AM), "roles": copy.deepcopy(roles)}
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key].update(value)
        else:
            spec[key] = value
    return spec


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
             poll: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(poll)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def client(home: Path):
    client = PrimusClient(home)
    yield client
    for job in client.list():  # never leave a test's processes behind
        if processes_of_job(job.app_id):
            client.cluster("local").force_kill(job.app_id)


def executor(status: StatusDocument, executor_id: str) -> ExecutorView:
    for ex in status.executors:
        if ex.id == executor_id:
            return ex
    raise AssertionError(f"no executor {executor_id} in {[e.id for e in status.executors]}")


def read_log(client: PrimusClient, app_id: str, role: str, index: int, stream: str = "stdout") -> str:
    return b"".join(client.follow_log(app_id, client.log_path(app_id, role, index, stream))).decode()


# --- CI fails on an unexpected skip ----------------------------------------------------------------
# scripts/test.sh provides every cluster, browser, framework and extra, so a skip there is a test that
# silently stopped testing, unless its reason is one of these: what legitimately differs between
# machines CI runs on. Active only when PRIMUS_CI_STRICT_SKIPS is set (scripts/test.sh sets it, so a
# developer's partial run is never failed for a skip): "1" for the main suite, "oldest-airflow" for
# scripts/test-oldest-airflow.sh's run, which also allows what that smaller venv lacks by design.
STRICT_SKIPS_ENV = "PRIMUS_CI_STRICT_SKIPS"
ALLOWED_SKIPS = {
    # test_no_orphans: cgroup v2 is read-only in some containers and user namespaces (scripts/in-netns.sh
    # as a non-root user); the test of the no-cgroup case runs instead.
    r"^cgroup v2 is not writable here",
    # test_formats: an interpreter to run the executor's modules as 3.9 is optional; the AST check as
    # Python 3.9 runs everywhere.
    r"^no Python 3\.9 interpreter here",
}
ALLOWED_SKIPS_OLDEST_AIRFLOW = ALLOWED_SKIPS | {
    # Features Airflow 3.2 lacks (tests/provider/conftest.py's requires_airflow_3_3, test_example_dags).
    r"needs Airflow 3\.3\+, installed 3\.2\.",
    # .venv-oldest has the package without extras: no hdfs provider.
    r"^could not import 'airflow\.providers\.apache\.hdfs\.",
}
_SKIPS: list[tuple[str, str]] = []  # (node id, reason) of every skip of this session


def skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def unexpected_skips(skips: list[tuple[str, str]], mode: str) -> list[tuple[str, str]]:
    allowed = ALLOWED_SKIPS_OLDEST_AIRFLOW if mode == "oldest-airflow" else ALLOWED_SKIPS
    return [(nodeid, reason) for nodeid, reason in skips
            if not any(re.search(pattern, reason) for pattern in allowed)]


def _note_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):  # a module's importorskip is a collect report
        _SKIPS.append((report.nodeid, skip_reason(report)))


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _note_skip(report)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _note_skip(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    mode = os.environ.get(STRICT_SKIPS_ENV)
    if not mode:
        return
    unexpected = unexpected_skips(_SKIPS, mode)
    if not unexpected:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{STRICT_SKIPS_ENV}={mode}: {len(unexpected)} skip(s) with a reason not in tests/conftest.py's "
             "allowed list (a test that stopped testing):"] + [f"  {nodeid}: {reason}" for nodeid, reason in unexpected]
    if reporter is not None:
        reporter.ensure_newline()
    for line in lines:
        if reporter is not None:
            reporter.write_line(line, red=True)
        else:
            print(line)
    if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
