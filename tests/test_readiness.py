"""Readiness: an ordered start waits for trainers that are ready, not for processes that exist."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import make_spec, wait_for

# One script for both roles. Each trainer notes when it started; a ps sleeps, then listens
# on PRIMUS_PORT (ports readiness) or calls trainer_api.ready() (file readiness) and notes when.
TRAINER = r"""
import os, socket, sys, time

out, me = os.environ["OUT"], os.environ["PRIMUS_ROLE"] + "-" + os.environ["PRIMUS_INDEX"]

def note(what):
    with open(os.path.join(out, me + "." + what), "w") as f:
        f.write(repr(time.time()))

note("started")
if os.environ["PRIMUS_ROLE"] != "ps":
    sys.exit(0)
time.sleep(float(os.environ.get("DELAY", "1.5")))
if os.environ.get("SIGNAL") == "file":
    note("ready")
    from primus_runtime.trainer_api import ready
    ready()
elif os.environ.get("SIGNAL") != "never":
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("", int(os.environ["PRIMUS_PORT"])))
    note("ready")
    server.listen()
time.sleep(60)
"""


def _job(tmp_path: Path, ps: dict | None = None, workers: int = 3, **scheduling) -> dict:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    command = [sys.executable, str(script)]
    ps_role = {"name": "ps", "replicas": 2, "command": command, "env": {"OUT": str(out)}, **(ps or {})}
    ps_role["env"] = {"OUT": str(out), **ps_role["env"]}
    return make_spec([
        ps_role,
        {"name": "worker", "replicas": workers, "ports": 0, "command": command, "env": {"OUT": str(out)}},
    ], scheduling={"policy": "ordered", "order": ["ps", "worker"], **scheduling})


def _times(out: Path, what: str) -> dict[str, float]:
    return {p.name.split(".")[0]: float(p.read_text()) for p in out.glob(f"*.{what}")}


def test_ordered_start_waits_until_every_ps_accepts_connections(client, tmp_path):
    # The default readiness of a role another role waits on is `ports`.
    for run in range(4):
        run_dir = tmp_path / f"run{run}"
        run_dir.mkdir()
        status = client.wait(client.submit(_job(run_dir)), timeout=60)
        assert status.job.state == "succeeded", status.job
        ready, started = _times(run_dir / "out", "ready"), _times(run_dir / "out", "started")
        first_worker = min(v for k, v in started.items() if k.startswith("worker"))
        for ps in ("ps-0", "ps-1"):
            assert ready.get(ps, float("inf")) < first_worker, f"run {run}: a worker started before {ps} listened"
        ps = {e.id: e for e in status.executors if e.role == "ps"}
        assert all(e.ready and e.ready_at >= ready[i] for i, e in ps.items())


def test_file_readiness_waits_for_the_trainer_to_say_so(client, tmp_path):
    job = _job(tmp_path, {"env": {"SIGNAL": "file", "DELAY": "1"}, "readiness": {"probe": "file"}}, workers=1)
    status = client.wait(client.submit(job), timeout=60)
    assert status.job.state == "succeeded", status.job
    ready, started = _times(tmp_path / "out", "ready"), _times(tmp_path / "out", "started")
    assert started["worker-0"] > max(ready.values())


def test_a_ps_that_never_listens_fails_the_job_naming_it_and_its_port(client, tmp_path):
    job = _job(tmp_path, {"replicas": 1, "env": {"SIGNAL": "never"}, "readiness": {"timeout": "2s"}}, workers=1)
    status = client.wait(client.submit(job), timeout=60)
    assert status.job.state == "failed"
    port = status.executors[0].ports[0]
    assert status.job.reason == f"ps-0 not ready after 2s: port {port} never accepted a connection"
    assert "worker-0" not in _times(tmp_path / "out", "started")


def test_a_gang_job_runs_only_once_every_trainer_is_ready(client, tmp_path):
    job = _job(tmp_path, {"replicas": 1, "env": {"DELAY": "1"}, "readiness": {"probe": "ports"}}, workers=1)
    job["scheduling"] = {"policy": "gang"}
    job["roles"][1]["command"] = "sleep 60"
    app = client.submit(job)
    wait_for(lambda: client.status(app).job.state == "running", 30, "job running")
    status = client.status(app)
    running = next(e.time for e in status.events if e.subject == "job" and e.to_state == "running")
    ps = next(e for e in status.executors if e.id == "ps-0")
    assert running >= ps.ready_at >= _times(tmp_path / "out", "ready")["ps-0"]
    client.kill(app)
