"""The YARN backend on a Kerberized minicluster (scripts/minicluster.sh start DIR --kerberos: a
MiniKdc, secure HDFS and YARN, SPNEGO on the RM, NM and WebHDFS): a job submitted with the test
user's principal and keytab runs and its status and logs are read; without them the submit fails
at once with a clear error; the AM gets the keytab, the trainer does not."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import make_spec, read_log
from primus_runtime.backends.yarn.kerberos import KerberosError
from primus_runtime.client import PrimusClient

from .conftest import SCRIPT, Minicluster, _env_of, _failed, _status

pytest.importorskip("skein")
pytest.importorskip("gssapi")

pytestmark = pytest.mark.timeout(420)

SMALL = {"cpu": 1, "memory": "256Mi"}
# HDFS delegation tokens that expire 20 s after their last renewal and live 45 s at most (a day and a
# week by default): a job of a minute meets both ends, as a job of days does with the defaults.
TOKEN_RENEW_INTERVAL, TOKEN_MAX_LIFETIME = 20, 45
SHORT_TOKENS = (f"dfs.namenode.delegation.token.renew-interval={TOKEN_RENEW_INTERVAL * 1000},"
                f"dfs.namenode.delegation.token.max-lifetime={TOKEN_MAX_LIFETIME * 1000}")
# The trainer reports whether anything of Kerberos reached it: a keytab in its container directory
# (the parent of its working directory) or in its environment.
PROBE = ("import os, pathlib; d = pathlib.Path.cwd().parent; "
         "print('keytabs:', sorted(str(p) for p in d.rglob('*') if p.name.endswith('keytab'))); "
         "print('env:', sorted(k for k, v in os.environ.items() if 'KEYTAB' in k or 'keytab' in v)); "
         "import time; time.sleep(1)")


@pytest.fixture(scope="module")
def kerberized() -> Iterator[Minicluster]:
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            pytest.skip(f"the Hadoop minicluster needs {tool} (Java 17 and Maven)")
    directory = Path(tempfile.mkdtemp(prefix="primus-minicluster-krb-"))
    saved = dict(os.environ)
    failed = True  # until the tests ran: a failed start keeps the directory too
    try:
        subprocess.run([str(SCRIPT), "start", str(directory), "--kerberos"], check=True,
                       env={**os.environ, "PRIMUS_MINICLUSTER_CONF": SHORT_TOKENS})
        info = _status(directory)
        assert info is not None and info.get("kerberos") == "true", info
        for key in ("PRIMUS_MINICLUSTER_DIR", "SKEIN_CONFIG"):
            os.environ.pop(key, None)
        # HADOOP_CONF_DIR, PATH, JAVA_HOME, SKEIN_CONFIG, KRB5_CONFIG, KRB5CCNAME (in DIR),
        # PRIMUS_TEST_PRINCIPAL, PRIMUS_TEST_KEYTAB, JAVA_TOOL_OPTIONS.
        os.environ.update(_env_of(directory))
        yield Minicluster(directory, info)
        failed = bool(_failed)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        subprocess.run([str(SCRIPT), "stop", str(directory)], check=False)
        if failed:
            print(f"\nminicluster (Kerberos): logs kept in {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)


def _spec(**backend: str) -> dict:
    return make_spec([{"name": "worker", "replicas": 1, "resources": SMALL,
                       "command": [sys.executable, "-c", PROBE]}],
                     backend={"type": "yarn", "am_memory": "512Mi", **backend})


def test_the_rest_apis_refuse_anonymous_requests(kerberized: Minicluster):
    for url in (kerberized.rm_web + "/ws/v1/cluster/info",
                kerberized.webhdfs + "/webhdfs/v1/?op=LISTSTATUS&user.name=nobody"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=10)
        assert refused.value.code in (401, 403), url


def test_a_job_submitted_with_a_keytab_runs_and_its_status_and_logs_are_read(kerberized: Minicluster, tmp_path):
    principal, keytab = os.environ["PRIMUS_TEST_PRINCIPAL"], os.environ["PRIMUS_TEST_KEYTAB"]
    ccache = Path(os.environ["KRB5CCNAME"].removeprefix("FILE:"))
    client = PrimusClient(tmp_path / "home")
    started = time.monotonic()
    app_id = client.submit(_spec(principal=principal, keytab=keytab))
    try:
        status = client.wait(app_id, timeout=240)
        assert status.job.state == "succeeded", json.dumps(status.model_dump(mode="json"))[-2000:]
        # Another client (the CLI, an Airflow worker) with the keytab from its options reads it too.
        from primus_runtime.backends.base import ClientOptions

        reader = PrimusClient(options=ClientOptions(home=str(tmp_path / "home2"), kerberos_principal=principal,
                                                    kerberos_keytab=keytab))
        assert reader.status(app_id).job.state == "succeeded"
        assert [j.app_id for j in reader.list(backend="yarn")] == [app_id]
        # The logs: the client's request to the NodeManager passes SPNEGO, but a secure NodeManager
        # serves container logs only with Hadoop's native code (SecureIOUtils), which the
        # minicluster's JVM lacks: HTTP 500 "Secure IO is not possible without native code
        # extensions" instead of the 401 an unauthenticated request gets. On a real cluster the
        # same call returns the log; here its content is read from the NodeManager's log dir.
        with pytest.raises(urllib.error.HTTPError) as no_native_io:
            read_log(reader, app_id, "worker", 0)
        assert no_native_io.value.code == 500
        unauthenticated = reader.log_path(app_id, "worker", 0, "stdout")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(unauthenticated, timeout=10)
        assert refused.value.code == 401
        (stdout,) = kerberized.container_logs(app_id, "stdout.log")
        out = stdout.read_text()
        assert "keytabs: []" in out and "env: []" in out, out  # the trainer got nothing of Kerberos
        # The AM's container got the keytab (skein localized it there, beside the spec).
        assert list(kerberized.dir.glob(f"target/**/appcache/{app_id}/container_*_000001/primus.keytab"))
        # The login used a private in-memory cache: the default one was never written.
        assert not ccache.exists()
    finally:
        yarn = client.cluster("yarn")
        if yarn.am_alive(app_id):
            yarn.force_kill(app_id)
    print(f"kerberized job: {time.monotonic() - started:.1f}s")


def test_a_submit_without_the_keytab_fails_at_once_with_a_clear_error(kerberized: Minicluster, tmp_path):
    client = PrimusClient(tmp_path / "home")
    started = time.monotonic()
    with pytest.raises(KerberosError, match="backend.principal and backend.keytab"):
        client.submit(_spec())
    with pytest.raises(KerberosError, match=r"backend.keytab: /nonexistent.keytab is not a readable file"):
        client.submit(_spec(principal=os.environ["PRIMUS_TEST_PRINCIPAL"], keytab="/nonexistent.keytab"))
    with pytest.raises(KerberosError, match=r"backend.principal 'nobody@EXAMPLE.COM'"):
        client.submit(_spec(principal="nobody@EXAMPLE.COM", keytab=os.environ["PRIMUS_TEST_KEYTAB"]))
    assert time.monotonic() - started < 30


def test_executors_read_hdfs_input_with_the_ams_delegation_token(kerberized: Minicluster, tmp_path):
    """The AM lists the input with its keytab; the executor, which has none, reads the file through
    WebHDFS with the delegation token the AM put in its launch environment."""
    from primus_runtime.backends.yarn.kerberos import login_from
    from primus_runtime.hadoop import hdfs_filesystem

    principal, keytab = os.environ["PRIMUS_TEST_PRINCIPAL"], os.environ["PRIMUS_TEST_KEYTAB"]
    fs = hdfs_filesystem(login=login_from(principal, keytab))
    base = f"/primus-tests/krb-{time.time_ns()}"
    expected = [f"r{i:05d}" for i in range(3000)]
    fs.makedirs(f"{base}/20261201", exist_ok=True)
    with fs.open(f"{base}/20261201/part-0.txt", "wb") as f:
        f.write(("\n".join(expected) + "\n").encode())
    with fs.open(f"{base}/20261201/_SUCCESS", "wb") as f:
        f.write(b"")
    out = tmp_path / "out"
    out.mkdir()
    spec = make_spec(
        [{"name": "worker", "replicas": 1, "consumes_input": True, "resources": SMALL,
          "command": [sys.executable, str(Path(__file__).resolve().parents[1] / "data" / "consumer.py")],
          "env": {"OUT_DIR": str(out)}}],
        input={"sources": [{"name": "rows", "path": "hdfs://" + base + "/{{YYYY}}{{MM}}{{DD}}/"}],
               "time_range": {"start": "2026-12-01", "end": "2026-12-01"}},
        backend={"type": "yarn", "am_memory": "512Mi", "principal": principal, "keytab": keytab})
    client = PrimusClient(tmp_path / "home")
    app_id = client.submit(spec)
    try:
        status = client.wait(app_id, timeout=240)
        assert status.job.state == "succeeded", json.dumps(status.model_dump(mode="json"))[-2000:]
        assert sorted(line for f in out.glob("worker-*.txt") for line in f.read_text().split()) == expected
    finally:
        yarn = client.cluster("yarn")
        if yarn.am_alive(app_id):
            yarn.force_kill(app_id)


def test_executors_read_hdfs_for_longer_than_a_tokens_max_lifetime(kerberized: Minicluster, tmp_path):
    """Issue 35: an executor's delegation token was never renewed, so an executor reading HDFS for
    longer than its lifetime failed. The trainer here reads for over a minute, opening a task every few
    seconds, on a cluster whose tokens expire 20 s after a renewal and live 45 s at most: the AM renews
    the token and replaces it before its end, and hands it to the running executor on a heartbeat."""
    from primus_runtime.backends.yarn.kerberos import login_from
    from primus_runtime.hadoop import hdfs_filesystem

    principal, keytab = os.environ["PRIMUS_TEST_PRINCIPAL"], os.environ["PRIMUS_TEST_KEYTAB"]
    fs = hdfs_filesystem(login=login_from(principal, keytab))
    base = f"/primus-tests/krb-long-{time.time_ns()}"
    expected = [f"r{i:05d}" for i in range(3000)]
    fs.makedirs(f"{base}/20261201", exist_ok=True)
    for part in range(3):
        with fs.open(f"{base}/20261201/part-{part}.txt", "wb") as f:
            f.write(("\n".join(expected[part * 1000:(part + 1) * 1000]) + "\n").encode())
    with fs.open(f"{base}/20261201/_SUCCESS", "wb") as f:
        f.write(b"")
    out = tmp_path / "out"
    out.mkdir()
    spec = make_spec(
        [{"name": "worker", "replicas": 1, "consumes_input": True, "resources": SMALL,
          "command": [sys.executable, str(Path(__file__).resolve().parents[1] / "data" / "consumer.py")],
          # 50 records a second: 60 s of reading, a 2 KiB task (~290 records) opened every ~6 s.
          "env": {"OUT_DIR": str(out), "SLEEP_EVERY": "50", "SLEEP": "1"}}],
        input={"sources": [{"name": "rows", "path": "hdfs://" + base + "/{{YYYY}}{{MM}}{{DD}}/"}],
               "time_range": {"start": "2026-12-01", "end": "2026-12-01"}, "task_size": "2Ki",
               "max_task_attempts": 1, "prefetch": 0},
        backend={"type": "yarn", "am_memory": "512Mi", "principal": principal, "keytab": keytab})
    client = PrimusClient(tmp_path / "home")
    started = time.monotonic()
    app_id = client.submit(spec)
    try:
        status = client.wait(app_id, timeout=300)
        assert status.job.state == "succeeded", json.dumps(status.model_dump(mode="json"))[-2000:]
        assert time.monotonic() - started > TOKEN_MAX_LIFETIME + TOKEN_RENEW_INTERVAL, "read too fast to prove it"
        assert sorted(line for f in out.glob("worker-*.txt") for line in f.read_text().split()) == expected
        [worker] = status.executors
        # Read from the NodeManager's log dir: the minicluster's secure NodeManager cannot serve it (see above).
        executor_log = "".join(p.read_text() for p in kerberized.container_logs(app_id, "worker.log"))
        renewed = [line for line in executor_log.splitlines() if "credentials renewed by the AM" in line]
        assert renewed, executor_log[-3000:]  # a new token reached the running executor
        assert worker.attempt == 0  # the same executor read it all: no restart got it a fresh token
    finally:
        yarn = client.cluster("yarn")
        if yarn.am_alive(app_id):
            yarn.force_kill(app_id)
