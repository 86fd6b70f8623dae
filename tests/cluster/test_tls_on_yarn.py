"""``am.tls`` on YARN: the CA certificate goes to every container and the job store, its key to the
AM's container only; executors and the CLI reach the AM over HTTPS."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import make_spec, wait_for
from primus_runtime import protocol
from primus_runtime.client import PrimusClient

from .conftest import Minicluster, processes_of
from .test_yarn_backend import SMALL, YARN, primus

pytest.importorskip("skein")

pytestmark = pytest.mark.timeout(300)


def _container_dirs(app_id: str) -> dict[int, Path]:
    dirs = {}
    for pid in processes_of(app_id):
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            continue
        if app_id in str(cwd):
            dirs[pid] = cwd
    return dirs


def _environ(pid: int) -> dict[str, str] | None:
    """The environment of a process, None once it has ended (the trainer's short-lived `sleep`s)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            pairs = [entry.decode(errors="replace").partition("=") for entry in f.read().split(b"\0") if entry]
    except (FileNotFoundError, ProcessLookupError):
        return None
    return {name: value for name, _, value in pairs}


def test_a_tls_job_runs_on_yarn_and_only_the_am_container_has_the_ca_key(minicluster: Minicluster, tmp_path):
    home = tmp_path / "home"
    client = PrimusClient(home)
    go = tmp_path / "go"
    command = f"sh -c 'while [ ! -e {go} ]; do sleep 0.2; done'"
    app_id = client.submit(make_spec([{"name": "worker", "replicas": 2, "command": command, "resources": SMALL}],
                                     am={"tls": True}, backend=YARN))
    try:
        wait_for(lambda: client.status(app_id).job.state == "running", 180, "the TLS job running on YARN", 1)
        status = primus(home, "status", app_id)
        assert status.returncode == 0 and "running" in status.stdout, status.stderr
        address, _ = client.cluster("yarn").am_endpoint(app_id)  # type: ignore[misc]
        link = client.page_link(app_id)
        assert link is not None and link.startswith(f"https://{address}/")

        dirs = _container_dirs(app_id)
        am = [pid for pid, cwd in dirs.items() if (cwd / "spec.json").exists()]
        # Read once: a process of the trainer's loop may end between two reads (CI, 2026-12-08).
        environs = {pid: env for pid in dirs if pid not in am and (env := _environ(pid))}
        executors = {pid: env for pid, env in environs.items() if env.get(protocol.ENV_TLS_CA_FILE)}
        assert am and len({dirs[pid] for pid in executors}) == 2, dirs
        assert (dirs[am[0]] / "ca.key").exists()
        for pid, env in executors.items():
            assert env[protocol.ENV_TLS_CA_FILE] == str(dirs[pid] / "ca.crt")
            assert not (dirs[pid] / "ca.key").exists()
            assert not any("PRIVATE KEY" in value or "ca.key" in value for value in env.values())
        store = client.cluster("yarn").store  # type: ignore[attr-defined]
        assert store.fs.exists(store.path(app_id, "ca.crt")) and not store.fs.exists(store.path(app_id, "ca.key"))

        go.touch()
        final = client.wait(app_id, timeout=120)
        assert final.job.state == "succeeded", final.job
        assert "AM API at https://" in primus(home, "logs", app_id).stdout
    finally:
        if client.cluster("yarn").am_alive(app_id):
            client.cluster("yarn").force_kill(app_id)
