"""The Hadoop minicluster (YARN + HDFS) for tests/cluster, started by scripts/minicluster.sh.

If PRIMUS_MINICLUSTER_DIR names a running cluster (scripts/test.sh starts one before pytest),
the tests use it and leave it running. Otherwise the session starts its own in a fresh
directory and stops it at the end; the directory (minicluster.log, container logs under
target/) is kept when a test failed and removed otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from primus_runtime.client import PrimusClient

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "minicluster.sh"


@dataclass(frozen=True)
class Minicluster:
    dir: Path
    info: dict[str, str]

    @property
    def webhdfs(self) -> str:
        return self.info["webhdfs"]

    @property
    def rm_web(self) -> str:
        return self.info["rm_web"]

    @property
    def nm_log_dirs(self) -> list[Path]:
        return [Path(p) for p in self.info["nm_log_dirs"].split(",")]

    def container_logs(self, app_id: str, name: str) -> list[Path]:
        """Files called `name` in the NodeManager's log dirs of this application's containers."""
        return sorted(p for d in self.nm_log_dirs for p in (d / app_id).glob(f"*/{name}"))


def processes_of(app_id: str) -> list[int]:
    """Processes started for a YARN application: their working directory (the container's) or
    command line names it."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if app_id in cwd or app_id in cmdline:
            pids.append(int(entry.name))
    return pids


def _status(directory: Path) -> dict[str, str] | None:
    proc = subprocess.run([str(SCRIPT), "status", str(directory)], capture_output=True, text=True)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def _env_of(directory: Path) -> dict[str, str]:
    out = subprocess.run(["bash", "-c", f". {directory}/env.sh && env -0"], capture_output=True,
                         check=True).stdout.decode()
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


_failed: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and "tests/cluster" in str(item.fspath).replace(os.sep, "/"):
        _failed.append(item.nodeid)


@pytest.fixture(scope="session")
def minicluster() -> Iterator[Minicluster]:
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None and not os.environ.get("PRIMUS_MINICLUSTER_DIR"):
            pytest.skip(f"the Hadoop minicluster needs {tool} (Java 17 and Maven)")
    given = os.environ.get("PRIMUS_MINICLUSTER_DIR")
    owned = False
    if given and _status(Path(given)) is not None:
        directory = Path(given)
    else:
        directory = Path(tempfile.mkdtemp(prefix="primus-minicluster-"))
        subprocess.run([str(SCRIPT), "start", str(directory)], check=True)
        owned = True
    info = _status(directory)
    assert info is not None, f"minicluster in {directory} is not running"
    saved = dict(os.environ)
    # HADOOP_CONF_DIR, PATH (bin/yarn for skein), JAVA_HOME, SKEIN_CONFIG.
    os.environ.update(_env_of(directory))
    try:
        yield Minicluster(directory, info)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if owned:
            subprocess.run([str(SCRIPT), "stop", str(directory)], check=False)
            if _failed:
                print(f"\nminicluster: logs kept in {directory} (minicluster.log, target/)")
            else:
                shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def yarn_client(minicluster: Minicluster, tmp_path: Path) -> Iterator[PrimusClient]:
    """A client with a home of its own; every application it left running is killed after the test."""
    client = PrimusClient(tmp_path / "home")
    yield client
    for job in client.list(backend="yarn"):
        if client.cluster("yarn").am_alive(job.app_id):
            client.cluster("yarn").force_kill(job.app_id)


@pytest.fixture(scope="session")
def skein_client(minicluster: Minicluster):
    skein = pytest.importorskip("skein")
    client = skein.Client(log=str(minicluster.dir / "skein-driver.log"))
    try:
        yield client
    finally:
        client.close()


def put_day_on_hdfs(minicluster: Minicluster, tmp_path: Path, prefix: str) -> str:
    """The upstream pipeline's part of the daily-retraining example: 3000 samples of 2026-12-01 and
    their _SUCCESS marker (written last) under a fresh HDFS directory; that directory."""
    import getpass
    import sys
    import time

    import hdfs

    local = tmp_path / "20261201"
    trainer = Path(__file__).resolve().parents[2] / "examples" / "ps_worker" / "trainer.py"
    assert subprocess.run([sys.executable, str(trainer), "make-partition", str(local), "3000"]).returncode == 0
    base = f"/tests/{prefix}-{time.time_ns()}"
    webhdfs = hdfs.InsecureClient(minicluster.webhdfs, user=getpass.getuser())
    for path in sorted(local.iterdir(), key=lambda p: p.name == "_SUCCESS"):  # the marker last
        webhdfs.upload(f"{base}/20261201/{path.name}", str(path))
    return base


def webhdfs_connection(minicluster: Minicluster) -> str:
    """``AIRFLOW_CONN_WEBHDFS_DEFAULT`` for the minicluster's NameNode (the partition sensor's)."""
    import getpass
    from urllib.parse import urlparse

    url = urlparse(minicluster.webhdfs)
    return json.dumps({"conn_type": "webhdfs", "host": url.hostname, "port": url.port, "login": getpass.getuser()})
