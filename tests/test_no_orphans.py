"""No process of a job outlives it, not even one its trainer moved to a session of its own:
with a cgroup per executor where cgroup v2 is writable, and without (subreaper + sweep)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from conftest import make_spec, wait_for
from primus_runtime.backends.local.jobs import ENV_NO_CGROUPS, job_cgroup, processes_of_job

ESCAPED = b"sleep\x00302\x00"
# The trainer's child leaves the trainer's process group and session (setsid).
ESCAPER = [sys.executable, "-c", "import subprocess, sys, time; "
           "subprocess.Popen(['sleep', '302'], start_new_session=True); time.sleep(float(sys.argv[1]))"]


def _cgroups_writable() -> bool:
    probe = job_cgroup(f"probe-{os.getpid()}")
    if probe is None:
        return False
    probe.remove()
    return True


@pytest.fixture(params=["cgroup", "no-cgroup"])
def containment(request, monkeypatch) -> str:
    if request.param == "no-cgroup":
        monkeypatch.setenv(ENV_NO_CGROUPS, "1")  # the submitting process's environment reaches the AM
    elif not _cgroups_writable():
        pytest.skip("cgroup v2 is not writable here: the no-cgroup case covers this machine")
    return request.param


def _escaped(app: str) -> list[int]:
    found = []
    for pid in processes_of_job(app):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes() == ESCAPED:
                found.append(pid)
        except OSError:
            pass
    return found


def _check_containment(client, app: str, containment: str) -> str | None:
    """Where the escaped child runs: inside the job's cgroup with one, nowhere special without."""
    pid = wait_for(lambda: _escaped(app), 30, "the trainer's child to start")[0]
    assert os.getsid(pid) == pid  # it did leave the trainer's session
    cgroup_file = client.cluster("local").jobs / app / "cgroup"
    if containment == "no-cgroup":
        assert not cgroup_file.exists()
        return None
    job_cgroup_dir = cgroup_file.read_text()
    assert f"/{app}/" in Path(f"/proc/{pid}/cgroup").read_text()
    return job_cgroup_dir


def _assert_all_gone(app: str, job_cgroup_dir: str | None) -> None:
    assert processes_of_job(app) == []
    if job_cgroup_dir is not None:
        assert not Path(job_cgroup_dir).exists()  # removed with the job


def test_kill_ends_what_the_trainer_moved_to_a_new_session(client, containment):
    app = client.submit(make_spec([{"name": "worker", "replicas": 2, "command": [*ESCAPER, "300"]}]))
    job_cgroup_dir = _check_containment(client, app, containment)
    wait_for(lambda: len(_escaped(app)) == 2, 30, "both trainers' children")
    status = client.kill(app)
    assert status.job.state == "killed"
    _assert_all_gone(app, job_cgroup_dir)


def test_success_ends_what_the_trainer_left_behind(client, containment):
    app = client.submit(make_spec([{"name": "worker", "command": [*ESCAPER, "3"]}]))
    job_cgroup_dir = _check_containment(client, app, containment)
    assert client.wait(app, timeout=60).job.state == "succeeded"
    wait_for(lambda: client.cluster("local").am_pid(app) is None, 30, "the AM to exit")
    _assert_all_gone(app, job_cgroup_dir)


def test_am_death_ends_what_the_trainer_moved_to_a_new_session(client, containment):
    app = client.submit(make_spec([{"name": "worker", "command": [*ESCAPER, "300"]}],
                                  am={"heartbeat_timeout": 2.0, "max_attempts": 1}))  # no next AM attempt
    job_cgroup_dir = _check_containment(client, app, containment)
    os.kill(client.cluster("local").am_pid(app), signal.SIGKILL)
    # The executor gives up on the AM after the heartbeat timeout and ends its trainer's processes.
    wait_for(lambda: processes_of_job(app) == [], 30, "every process of the job to exit")
    if job_cgroup_dir is not None:
        wait_for(lambda: not Path(job_cgroup_dir).exists(), 10, "the job's cgroup to be removed")
