"""The minicluster works for what the YARN backend and the HDFS data plane need: skein submits,
scales and kills on YARN; WebHDFS reads and writes through `hdfs` and fsspec."""

from __future__ import annotations

import subprocess
import time
import urllib.request

import pytest

from conftest import wait_for

from .conftest import Minicluster, processes_of

skein = pytest.importorskip("skein")

pytestmark = pytest.mark.timeout(300)

SMALL = {"memory": "128 MiB", "vcores": 1}
MASTER = {"memory": "256 MiB", "vcores": 1}


def _final_report(client, app_id: str, timeout: float = 120.0):
    def finished():
        report = client.application_report(app_id)
        return report if str(report.state) in ("FINISHED", "FAILED", "KILLED") else None

    return wait_for(finished, timeout=timeout, what=f"{app_id} to finish", poll=0.5)


def test_echo_in_a_container_succeeds_and_its_log_is_readable(minicluster: Minicluster, skein_client):
    spec = skein.ApplicationSpec(
        name="primus-minicluster-hello",
        master=skein.Master(resources=skein.Resources(**MASTER)),
        services={"hello": skein.Service(resources=skein.Resources(**SMALL),
                                         script="echo hello-from-yarn")},
    )
    app_id = skein_client.submit(spec)
    report = _final_report(skein_client, app_id)
    assert str(report.final_status) == "SUCCEEDED", report.diagnostics
    logs = minicluster.container_logs(app_id, "hello.log")
    assert len(logs) == 1, logs
    assert "hello-from-yarn" in logs[0].read_text()
    # The application master's own log sits next to it.
    assert minicluster.container_logs(app_id, "application.master.log")
    # The NodeManager serves the same files over REST (skein 0.8.2's application_logs only reads
    # aggregated logs in the Hadoop 2 layout, so it cannot be used on Hadoop 3.3+).
    container_id = logs[0].parent.name
    url = f"{minicluster.info['nm_web']}/ws/v1/node/containers/{container_id}/logs/hello.log"
    with urllib.request.urlopen(url, timeout=30) as response:
        assert "hello-from-yarn" in response.read().decode()


def test_scale_and_kill_containers_then_kill_the_application(minicluster: Minicluster, skein_client):
    spec = skein.ApplicationSpec(
        name="primus-minicluster-sleep",
        master=skein.Master(resources=skein.Resources(**MASTER)),
        services={"sleeper": skein.Service(instances=2, resources=skein.Resources(**SMALL),
                                           script="sleep 600")},
    )
    app = skein_client.submit_and_connect(spec)
    app_id = app.id
    try:
        def running(n: int):
            def check():
                containers = app.get_containers(services=["sleeper"], states=["RUNNING"])
                return containers if len(containers) == n else None
            return check

        wait_for(running(2), timeout=120, what="2 sleepers running", poll=0.5)
        listed = subprocess.run(["yarn", "application", "-list"], capture_output=True, text=True,
                                check=True).stdout
        assert app_id in listed

        app.scale("sleeper", 3)
        containers = wait_for(running(3), timeout=120, what="3 sleepers running", poll=0.5)

        victim = containers[0]
        app.kill_container(victim.id)
        wait_for(lambda: [c for c in app.get_containers(services=["sleeper"], states=["KILLED"])
                          if c.id == victim.id],
                 timeout=60, what="the killed container reported KILLED", poll=0.5)
        wait_for(running(2), timeout=60, what="2 sleepers left running", poll=0.5)
    finally:
        skein_client.kill_application(app_id)
    report = _final_report(skein_client, app_id, timeout=60)
    assert str(report.state) == "KILLED"
    # The NodeManager killed the master and every container: no process of it is left.
    wait_for(lambda: not processes_of(app_id), timeout=60,
             what=f"no process of {app_id} left", poll=0.5)


def test_yarn_command_kills_an_application(minicluster: Minicluster, skein_client):
    spec = skein.ApplicationSpec(
        name="primus-minicluster-yarn-kill",
        master=skein.Master(resources=skein.Resources(**MASTER), script="sleep 600"),
    )
    app_id = skein_client.submit(spec)
    wait_for(lambda: str(skein_client.application_report(app_id).state) == "RUNNING",
             timeout=120, what=f"{app_id} running", poll=0.5)
    subprocess.run(["yarn", "application", "-kill", app_id], check=True, capture_output=True)
    assert str(_final_report(skein_client, app_id, timeout=60).state) == "KILLED"
    wait_for(lambda: not processes_of(app_id), timeout=60,
             what=f"no process of {app_id} left", poll=0.5)


def test_webhdfs_write_and_read_with_the_hdfs_package(minicluster: Minicluster):
    hdfs = pytest.importorskip("hdfs")
    client = hdfs.InsecureClient(minicluster.webhdfs, user="primus")
    base = f"/tests/hdfs-{time.time_ns()}"
    client.makedirs(base)
    payload = b"".join(b"record %d\n" % i for i in range(10_000))
    client.write(f"{base}/part-0.txt", data=payload)
    client.write(f"{base}/_SUCCESS", data=b"")
    with client.read(f"{base}/part-0.txt") as reader:
        assert reader.read() == payload
    assert sorted(client.list(base)) == ["_SUCCESS", "part-0.txt"]
    assert client.status(f"{base}/part-0.txt")["length"] == len(payload)


def test_fsspec_webhdfs_lists_and_reads(minicluster: Minicluster):
    import fsspec

    host, port = minicluster.webhdfs.removeprefix("http://").rsplit(":", 1)
    fs = fsspec.filesystem("webhdfs", host=host, port=int(port), user="primus", skip_instance_cache=True)
    base = f"/tests/fsspec-{time.time_ns()}/2026/12/02"
    fs.makedirs(base, exist_ok=True)
    for name, data in (("part-0.txt", b"a\nb\n"), ("part-1.txt", b"c\n"), ("_SUCCESS", b"")):
        with fs.open(f"{base}/{name}", "wb") as f:
            f.write(data)
    names = sorted(p.rsplit("/", 1)[1] for p in fs.ls(base, detail=False))
    assert names == ["_SUCCESS", "part-0.txt", "part-1.txt"]
    assert fs.cat(f"{base}/part-0.txt") == b"a\nb\n"
    assert sorted(fs.glob(f"{base.rsplit('/', 3)[0]}/*/*/*/part-*.txt")) == [
        f"{base}/part-0.txt", f"{base}/part-1.txt"]
    with fs.open(f"{base}/part-0.txt", "rb") as f:
        f.seek(2)
        assert f.read() == b"b\n"
