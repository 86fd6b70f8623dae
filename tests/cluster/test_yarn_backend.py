"""The YARN backend against the minicluster: the AM runs in the application's master container
and asks skein for executor containers; outcomes, failures and kills reach YARN and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest

from conftest import make_spec, read_log, wait_for
from primus_runtime.client import PrimusClient
from primus_runtime.hadoop import hadoop_user

from .conftest import REPO, Minicluster, processes_of

skein = pytest.importorskip("skein")

pytestmark = pytest.mark.timeout(300)

CONSUMER = str(REPO / "tests" / "data" / "consumer.py")
SMALL = {"cpu": 1, "memory": "256Mi"}
YARN = {"type": "yarn", "am_memory": "512Mi"}


def primus(home: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "primus_runtime.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=timeout)


def yarn_report(client: PrimusClient, app_id: str) -> dict:
    return client.cluster("yarn").rm.app(app_id)  # type: ignore[attr-defined]


def wait_app_done(client: PrimusClient, app_id: str) -> dict:
    return wait_for(lambda: (r := yarn_report(client, app_id))["state"] in ("FINISHED", "FAILED", "KILLED") and r,
                    timeout=60, what=f"{app_id} to end in YARN", poll=0.5)


def test_ps_worker_example_succeeds_on_yarn_from_the_cli(minicluster: Minicluster, yarn_client, tmp_path):
    home = tmp_path / "home"
    proc = primus(home, "submit", str(REPO / "examples" / "ps_worker" / "job.yaml"), "--backend", "yarn",
                  "--wait")
    app_id = proc.stdout.strip()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert app_id.startswith("application_")
    assert "success policy met: worker 2/2 succeeded" in proc.stderr

    report = wait_app_done(yarn_client, app_id)
    assert (report["state"], report["finalStatus"]) == ("FINISHED", "SUCCEEDED")
    assert "primus" in report["applicationTags"].split(",")
    status = primus(home, "status", app_id)
    assert status.returncode == 0 and "succeeded" in status.stdout
    worker_log = primus(home, "logs", app_id, "--role", "worker", "--index", "1")
    assert "final loss" in worker_log.stdout, worker_log.stderr  # read from the NodeManager
    am_log = primus(home, "logs", app_id)
    assert "every executor is running" in am_log.stdout
    assert [j.app_id for j in yarn_client.list(backend="yarn") if j.app_id == app_id]
    store = yarn_client.cluster("yarn").store  # type: ignore[attr-defined]
    assert store.fs.info(store.path(app_id, "token"))["permission"] == "600"  # the job token: owner only
    assert store.fs.info(store.path(app_id, "token").rsplit("/", 1)[0])["permission"] == "700"
    wait_for(lambda: not processes_of(app_id), timeout=60, what=f"no process of {app_id} left", poll=0.5)


def test_the_wordcount_example_runs_on_yarn_with_its_input_put_on_hdfs_as_the_readme_says(
        minicluster: Minicluster, yarn_client, tmp_path):
    example = REPO / "examples" / "data_wordcount"
    home = tmp_path / "home"
    refused = primus(home, "submit", str(example / "job.yaml"), "--backend", "yarn")
    assert refused.returncode == 2 and "input.sources[0].path: a local path is read on every node" in refused.stderr

    put = primus(home, "hdfs", "put", str(example / "data"), "hdfs:///tmp/primus-examples/data_wordcount")
    assert put.returncode == 0, put.stderr
    written = put.stdout.split()
    assert len(written) == 9 and all(p.endswith("_SUCCESS") for p in written[-3:])  # the markers last
    proc = primus(home, "submit", str(example / "yarn.yaml"), "--wait")
    assert proc.returncode == 0, proc.stderr[-3000:]
    app_id = proc.stdout.strip()
    expected = sorted(line.split()[0] for f in (example / "data").glob("*/part-*.txt")
                      for line in f.read_text().splitlines())
    logs = [primus(home, "logs", app_id, "--role", "worker", "--index", str(i)).stdout for i in range(2)]
    assert sorted(i for log in logs for i in json.loads(log.strip().splitlines()[-1])["ids"]) == expected


def test_a_worker_container_killed_through_yarn_is_replaced_and_its_task_resumed(
        minicluster: Minicluster, yarn_client, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    (data / "20261201").mkdir(parents=True)
    out.mkdir()
    expected = [f"r{i:06d}" for i in range(20_000)]
    (data / "20261201" / "part-0.txt").write_text("\n".join(expected) + "\n")
    (data / "20261201" / "_SUCCESS").write_text("")
    hdfs_dir = f"hdfs:///primus-tests/{uuid.uuid4().hex[:12]}"
    put = primus(tmp_path / "home", "hdfs", "put", str(data), hdfs_dir)
    assert put.returncode == 0, put.stderr
    spec = make_spec(
        [{"name": "worker", "replicas": 2, "consumes_input": True, "resources": SMALL,
          "command": [sys.executable, CONSUMER],
          "env": {"OUT_DIR": str(out), "SLEEP_EVERY": "100", "SLEEP": "0.2"}}],  # ~20 s of reading each
        input={"sources": [{"name": "rows", "path": hdfs_dir + "/{{YYYY}}{{MM}}{{DD}}/"}],
               "time_range": {"start": "2026-12-01", "end": "2026-12-01"}, "task_size": "20k"},
        backend=YARN)
    app_id = yarn_client.submit(spec)
    app = skein.Client(log=False).connect(app_id)

    def worker0_reading():
        read = sum(len(f.read_text().split()) for f in out.glob("worker-0-0-*.txt"))
        status = yarn_client.status(app_id)
        worker0 = [e for e in status.executors if e.id == "worker-0" and e.state == "running"]
        return read > 1000 and worker0 and worker0[0]
    worker0 = wait_for(worker0_reading, timeout=180, what="worker-0's trainer reading its input", poll=0.5)

    # Kill worker-0's container through YARN (skein asks the NodeManager to stop it).
    container_id = worker0.logs["stdout"].split("/containers/")[1].split("/")[0]
    victim = [c for c in app.get_containers() if c.yarn_container_id == container_id]
    assert victim, f"{container_id} not among {app.get_containers()}"
    app.kill_container(victim[0].id)

    status = yarn_client.wait(app_id, timeout=240)
    assert status.job.state == "succeeded", status.job
    replaced = [e for e in status.events if e.subject == "worker-0" and "replacement" in e.reason]
    assert replaced, [(e.from_state, e.to_state, e.reason) for e in status.events
                      if e.subject == "worker-0"]
    read = [line for f in out.iterdir() for line in f.read_text().split()]
    assert set(read) == set(expected)  # nothing lost: the killed worker's task went on elsewhere
    assert status.data.records_done == len(expected) and status.data.state == "succeeded"


def test_a_container_yarn_kills_from_outside_ends_with_yarns_exit_status_and_diagnostics(
        minicluster: Minicluster, yarn_client):
    spec = make_spec(
        [{"name": "worker", "replicas": 1, "resources": SMALL, "command": ["sleep", "600"],
          "failover": {"restart": "never"}}],
        # Longer than skein takes to report the container's end (its idle heartbeat is 5 s): the
        # end, not the executor's silence, is what the AM must see first.
        am={"heartbeat_timeout": 30.0}, backend=YARN)
    app_id = yarn_client.submit(spec)

    def running_worker():
        status = yarn_client.status(app_id)
        # Running, and its container known: a container started with the application may register
        # and start its trainer before skein tells the AM where it runs.
        return next((e for e in status.executors if e.id == "worker-0" and e.state == "running"
                     and "stdout" in e.logs), None)
    worker = wait_for(running_worker, timeout=180, what="worker-0 running", poll=0.5)
    container_id = worker.logs["stdout"].split("/containers/")[1].split("/")[0]
    # What `yarn container -signal ID FORCEFUL_SHUTDOWN` asks: the NodeManager SIGKILLs the container.
    request = urllib.request.Request(f"{minicluster.rm_web}/ws/v1/cluster/containers/{container_id}/signal/"
                                     f"FORCEFUL_SHUTDOWN?user.name={hadoop_user()}", method="POST")
    urllib.request.urlopen(request, timeout=10).close()

    status = yarn_client.wait(app_id, timeout=120)
    job, worker = status.job, next(e for e in status.executors if e.id == "worker-0")
    assert (job.state, worker.state, worker.exit_code) == ("failed", "failed", 137), (job, worker)
    assert "Killed by external signal" in worker.reason, worker
    assert "exit 137" in job.reason and "Killed by external signal" in job.reason, job
    ended = [e for e in status.events if e.subject == "worker-0" and e.to_state == "failed"]
    assert ended and ended[-1].exit_code == 137, status.events


def test_a_ps_failure_fails_the_application_with_the_reason_in_status_and_yarn(
        minicluster: Minicluster, yarn_client):
    spec = make_spec(
        [{"name": "ps", "replicas": 1, "resources": SMALL,
          "command": ["sh", "-c", "sleep 2; echo shard lost >&2; exit 3"]},
         {"name": "worker", "replicas": 1, "resources": SMALL, "command": ["sleep", "120"]}],
        backend=YARN)
    app_id = yarn_client.submit(spec)
    status = yarn_client.wait(app_id, timeout=240)
    assert status.job.state == "failed"
    assert "ps-0" in status.job.reason and "exit 3" in status.job.reason, status.job
    report = wait_app_done(yarn_client, app_id)
    assert report["finalStatus"] == "FAILED"
    assert "ps-0" in report["diagnostics"], report["diagnostics"]
    wait_for(lambda: not processes_of(app_id), timeout=60, what=f"no process of {app_id} left", poll=0.5)


def test_the_trainer_works_in_its_own_directory_with_its_files_and_not_the_token(
        minicluster: Minicluster, yarn_client, tmp_path):
    """Issue 25: the trainer's working directory was the container's, where YARN localizes the job's
    token beside the role's files: ``cat token`` read it."""
    script = tmp_path / "hello.sh"
    script.write_text("echo hello from a role file\n")
    spec = make_spec([{"name": "worker", "resources": SMALL, "files": [str(script)],
                       "command": ["sh", "-c", 'echo "cwd=$(basename "$PWD") files=$(ls -A | tr "\\n" " ")"; '
                                               "sh hello.sh; cat token || echo no token here; sleep 5"]}],
                     backend=YARN)  # the sleep: an executor ending within its launch loses its log paths (noted)
    app_id = yarn_client.submit(spec)
    assert yarn_client.wait(app_id, timeout=240).job.state == "succeeded"
    out = read_log(yarn_client, app_id, "worker", 0)
    token = yarn_client.cluster("yarn").store.read(app_id, "token").decode().strip()  # type: ignore[attr-defined]
    assert token not in out
    assert "cwd=work files=hello.sh \n" in out and "hello from a role file" in out and "no token here" in out, out


def test_kill_stops_the_application_and_leaves_no_process(minicluster: Minicluster, yarn_client, tmp_path):
    spec = make_spec([{"name": "worker", "replicas": 2, "resources": SMALL, "command": ["sleep", "600"]}],
                     backend=YARN)
    app_id = yarn_client.submit(spec)
    wait_for(lambda: yarn_client.status(app_id).job.state == "running", timeout=180,
             what=f"{app_id} running", poll=0.5)
    proc = primus(tmp_path / "home", "kill", app_id, "--reason", "test says stop")
    assert proc.returncode == 0, proc.stderr
    status = yarn_client.status(app_id)
    assert status.job.state == "killed" and "test says stop" in status.job.reason
    report = wait_app_done(yarn_client, app_id)
    assert report["finalStatus"] == "KILLED"
    wait_for(lambda: not processes_of(app_id), timeout=60, what=f"no process of {app_id} left", poll=0.5)


def test_force_kill_through_the_resourcemanager_when_the_am_does_not_answer(minicluster: Minicluster, yarn_client):
    spec = make_spec([{"name": "worker", "replicas": 1, "resources": SMALL, "command": ["sleep", "600"]}],
                     backend=YARN)
    app_id = yarn_client.submit(spec)
    wait_for(lambda: yarn_client.status(app_id).job.state == "running", timeout=180,
             what=f"{app_id} running", poll=0.5)
    assert yarn_client.cluster("yarn").force_kill(app_id) == 1
    assert wait_app_done(yarn_client, app_id)["state"] == "KILLED"
    status = yarn_client.status(app_id)
    # The NodeManager SIGTERMs the AM's container: an AM quick enough saves its own outcome first, else
    # the client reads YARN's.
    assert status.job.state == "killed", status.job
    reason = status.job.reason
    assert reason == "AM received SIGTERM" or reason.startswith("YARN application killed"), status.job
    wait_for(lambda: not processes_of(app_id), timeout=60, what=f"no process of {app_id} left", poll=0.5)


def test_a_role_larger_than_any_node_is_refused_before_submitting(minicluster: Minicluster, yarn_client):
    from primus_runtime.spec import SpecError

    spec = make_spec([{"name": "worker", "command": ["true"], "resources": {"cpu": 1, "memory": "512Gi"}}],
                     backend=YARN)
    before = {j.app_id for j in yarn_client.list(backend="yarn")}
    with pytest.raises(SpecError, match=r"roles.worker.resources: one executor needs memory 524288Mi"):
        yarn_client.submit(spec)
    with pytest.raises(SpecError, match=r"no node offers yarn.io/gpu"):
        yarn_client.submit(make_spec([{"name": "worker", "command": ["true"], "resources": {"gpu": 1}}],
                                     backend=YARN))
    assert {j.app_id for j in yarn_client.list(backend="yarn")} == before  # nothing was submitted


def test_the_page_of_a_yarn_job_and_its_history(minicluster: Minicluster, yarn_client, tmp_path):
    import requests

    from primus_runtime.ui.auth import ACTION_HEADER
    from primus_runtime.ui.history import archive_view

    spec = make_spec([{"name": "worker", "replicas": 1, "command": "echo hi-from-yarn; sleep 60",
                       "resources": SMALL}], backend=YARN)
    app_id = yarn_client.submit(spec)
    link = wait_for(lambda: yarn_client.page_link(app_id, user="yuri"), 90, "the AM's page")
    browser = requests.Session()
    page = browser.get(link, timeout=10)
    base = page.url.split("/ui/")[0]
    assert page.status_code == 200 and browser.get(base + "/api/v1/whoami").json()["user"] == "yuri"
    # (404 until skein reports the container running on its node: the AM knows its logs from then on)
    tail = wait_for(lambda: browser.get(base + "/api/v1/executors/worker-0/logs/stdout").json().get("text"), 60,
                    "worker-0's stdout through its NodeManager")
    assert tail == "hi-from-yarn\n"
    browser.post(base + "/api/v1/job/kill", json={"reason": "seen enough"}, headers={ACTION_HEADER: "1"})
    assert yarn_client.wait(app_id, timeout=90).job.state == "killed"
    wait_app_done(yarn_client, app_id)
    # The history comes from the job store on HDFS: the event log next to the final status.
    view = archive_view(yarn_client, app_id)
    kill = [e for e in view.events_from(0) if e["to_state"] == "stopping"]
    assert kill and kill[0]["actor"] == "yuri" and "seen enough" in kill[0]["reason"]
    assert view.status()["job"]["state"] == "killed" and view.timeline(0)["samples"]
