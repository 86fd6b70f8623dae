"""The `primus` command: outcomes as exit codes, errors as one line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest
import yaml

from conftest import make_spec, wait_for
from primus_runtime.api_client import AMRejected
from primus_runtime.models import EventView, JobSummary, KafkaStatus, RoleView, StatusSummary
from primus_runtime.states import JobState


def primus(home, *args, timeout=120, env=None):
    proc = subprocess.run([sys.executable, "-m", "primus_runtime.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=timeout, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def write_spec(tmp_path, roles, **extra):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(make_spec(roles, **extra)))
    return path


def test_submit_wait_shows_progress_and_exits_0_on_success(tmp_path, home):
    spec = write_spec(tmp_path, [{"name": "worker", "replicas": 2, "command": "echo hello from $PRIMUS_INDEX"}])
    code, out, err = primus(home, "submit", str(spec), "--wait")
    assert code == 0, err
    app = out.strip()
    assert app.startswith("primus-")
    assert "worker-0: registered -> running" in err and "succeeded" in err.splitlines()[-1]
    code, out, _ = primus(home, "logs", app, "--role", "worker", "--index", "1")
    assert code == 0 and out == "hello from 1\n"
    code, out, _ = primus(home, "status", app, "--json")
    assert code == 0 and json.loads(out)["job"]["state"] == "succeeded"
    goodput = json.loads(out)["goodput"]  # the model as is, from the status the AM left
    assert set(goodput) == {"ratio", "seconds", "as_of"} and goodput["seconds"]["restarting"] == 0
    code, out, _ = primus(home, "status", app)
    assert "succeeded" in out.splitlines()[0] and "worker-1" in out
    assert "  goodput: ETTR " in out
    code, out, _ = primus(home, "logs", app)
    assert "AM API at" in out
    code, out, _ = primus(home, "list")
    assert app in out and "succeeded" in out


def test_submit_wait_exits_1_when_the_job_fails(tmp_path, home):
    spec = write_spec(tmp_path, [{"name": "worker", "command": "exit 9", "failover": {"restart": "never"}}])
    code, _, err = primus(home, "submit", str(spec), "--wait")
    assert code == 1 and "failed" in err.splitlines()[-1] and "exit 9" in err.splitlines()[-1]


def test_a_failed_job_shows_the_stderr_tail_of_its_failed_executor(tmp_path, home):
    spec = write_spec(tmp_path, [{"name": "worker", "failover": {"restart": "never"},
                                  "command": "for i in $(seq 1 12); do echo line-$i >&2; done; echo boom >&2; exit 3"}])
    code, out, err = primus(home, "submit", str(spec), "--wait")
    app = out.strip()
    heading = (f"  Executor worker-0 (attempt 0) failed (exit code 3, trainer exited 3); last stderr lines (all: "
               f"primus --home {home} logs {app} --role worker --index 0 --stream stderr --attempt 0):")
    tail = [heading] + [f"    line-{i}" for i in range(4, 13)] + ["    boom"]  # the last 10 lines
    lines = err.splitlines()
    assert code == 1 and lines[-12:-1] == tail, err  # was only the outcome: the cause one `primus logs` away
    assert lines[-1].startswith(f"{app}: failed: worker-0 failed (exit 3")  # the outcome stays the last line
    code, out, _ = primus(home, "status", app)
    lines = out.splitlines()
    assert code == 0 and lines[lines.index(heading):lines.index(heading) + 11] == tail, out


@pytest.mark.parametrize("max_attempts", [1, 2])  # 2: the AM runs under the supervisor, which would restart it
def test_an_am_port_in_use_fails_the_job_naming_the_port(tmp_path, home, max_attempts):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        spec = write_spec(tmp_path, [{"name": "worker", "command": "true"}],
                          am={"port": port, "max_attempts": max_attempts})
        code, out, err = primus(home, "submit", str(spec), "--wait")
    app = out.strip()
    reason = f"the AM cannot listen on port {port} of 127.0.0.1: address already in use (am.port)"
    # was "lost: the AM exited without recording an outcome; see am.log", the cause ending a traceback there
    assert code == 1 and err.splitlines()[-1] == f"{app}: failed: {reason}", err
    code, out, _ = primus(home, "status", app)
    assert code == 0 and out.splitlines()[0].split("  ")[2:] == ["failed", reason]


def test_a_job_whose_am_died_without_a_word_shows_the_am_log_and_no_history(tmp_path, home):
    # One AM attempt: nothing restarts it (by default a supervisor would start the next attempt).
    spec = write_spec(tmp_path, [{"name": "worker", "command": "true"}], am={"max_attempts": 1})
    # The AM inherits the submitter's environment: an attempt number it cannot read crashes it at its
    # start, before it saved any status (as an AM killed at its start, or broken by its installation).
    crashing = {**os.environ, "PRIMUS_AM_ATTEMPT": "x"}
    code, out, err = primus(home, "submit", str(spec), "--wait", env=crashing)
    app = out.strip()
    logs = f"primus --home {home} logs {app}"
    lines = err.splitlines()
    # was "...; see am.log", the cause at the end of a traceback there
    assert code == 1 and lines[-1] == f"{app}: lost: the AM exited without recording an outcome; its log: {logs}"
    assert f"  The AM's log, last lines (all: {logs}):" in lines
    assert lines[-2] == "    ValueError: invalid literal for int() with base 10: 'x'"
    code, out, _ = primus(home, "status", app)
    assert code == 0 and "    ValueError: invalid literal for int() with base 10: 'x'" in out.splitlines()
    assert out.splitlines()[-1] == "  page: none: its AM saved no status to show"  # was "primus ui APP (its history)"
    code, _, err = primus(home, "ui", app)
    assert code == 1 and "left no status" in err


def test_invalid_spec_is_one_clear_error_and_nothing_is_submitted(tmp_path, home):
    spec = write_spec(tmp_path, [{"name": "worker", "command": "x", "replicas": -1}])
    code, out, err = primus(home, "submit", str(spec))
    assert code == 2 and out == ""
    assert "roles[0].replicas: must be >= 1, got -1" in err
    assert not (home / "jobs").exists() or not any((home / "jobs").iterdir())
    code, _, err = primus(home, "validate", str(spec))
    assert code == 2 and "roles[0].replicas" in err


def test_validate_reports_a_files_entry_that_does_not_exist_as_submit_would(tmp_path, home):
    (tmp_path / "train.py").write_text("")
    spec = write_spec(tmp_path, [{"name": "worker", "command": "x", "files": ["train.py", "vocab.txt"]}])
    missing = f"roles[0].files[1]: no such file or directory, got {str(tmp_path / 'vocab.txt')!r}"
    code, out, err = primus(home, "validate", str(spec))
    # Relative entries are taken from the spec file's directory, as submit takes them.
    assert code == 2 and out == "" and missing in err, err
    code, out, err = primus(home, "submit", str(spec))
    assert code == 2 and out == "" and missing in err, err
    (tmp_path / "vocab.txt").write_text("")
    code, out, err = primus(home, "validate", str(spec))
    assert code == 0 and "valid" in out and err == "", err


def test_unsatisfiable_resources_are_rejected_before_submit(tmp_path, home):
    spec = write_spec(tmp_path, [{"name": "worker", "command": "x", "resources": {"gpu": 1}}],
                      backend={"type": "local", "gpus": []})
    code, _, err = primus(home, "submit", str(spec))
    assert code == 2 and "roles.worker.resources.gpu: one executor needs 1" in err


def test_unknown_job_exits_4(home):
    for command in (["status", "nope"], ["kill", "nope"], ["logs", "nope"], ["scale", "nope", "worker", "2"]):
        code, _, err = primus(home, *command)
        assert code == 4 and "no job 'nope'" in err, command


def test_logs_of_an_executor_the_job_does_not_have_names_those_it_has(tmp_path, home):
    spec = write_spec(tmp_path, [{"name": "ps", "command": "true", "success_percent": 0},
                                 {"name": "worker", "replicas": 2, "command": "echo hi"}])
    _, out, _ = primus(home, "submit", str(spec), "--wait")
    app = out.strip()
    code, out, err = primus(home, "logs", app, "--role", "worker", "--index", "9")
    assert (code, out) == (2, "")  # was 4, "no job 'APP worker-9'": the job exists
    assert err == f"primus: job {app} has no executor worker-9: its executors are ps-0, worker-0 to worker-1\n"
    code, _, err = primus(home, "logs", app, "--role", "trainer")
    assert code == 2 and err == f"primus: job {app} has no role 'trainer': its executors are ps-0, worker-0 to worker-1\n"
    code, out, _ = primus(home, "logs", app, "--role", "worker", "--index", "1")
    assert (code, out) == (0, "hi\n")


def test_logs_of_an_earlier_executor_attempt(tmp_path, home, client):
    spec = write_spec(tmp_path, [{"name": "worker", "failover": {"max_failures_per_index": 1},
                                  "command": 'if [ "$PRIMUS_ATTEMPT" = 0 ]; then echo first-try-broke >&2; exit 3; fi; '
                                             'echo second-try >&2; sleep 300'}])
    _, out, _ = primus(home, "submit", str(spec))
    app = out.strip()
    wait_for(lambda: [(ex.state, ex.restarts) for ex in client.status(app).executors] == [("running", 1)],
             60, "worker-0 restarted and running")
    stderr = ["logs", app, "--role", "worker", "--stream", "stderr"]
    code, out, _ = primus(home, *stderr, "--attempt", "0")
    assert (code, out) == (0, "first-try-broke\n")  # was: no --attempt, only the current incarnation's log
    assert wait_for(lambda: primus(home, *stderr)[1], 30, "the current incarnation's stderr") == "second-try\n"
    code, _, err = primus(home, *stderr, "--attempt", "5")
    assert code == 2 and err == f"primus: worker-0 of job {app} has no attempt 5: its attempts are 0, 1\n"
    client.kill(app)


def test_logs_of_each_am_attempt(tmp_path, home, client):
    spec = write_spec(tmp_path, [{"name": "worker", "command": "sleep 300"}],
                      am={"max_attempts": 2, "recovery_grace": "30s"})
    _, out, _ = primus(home, "submit", str(spec))
    app = out.strip()
    wait_for(lambda: client.status(app).job.state == "running", 30, "running")
    os.kill(json.loads(client.cluster("local").job(app).am_info.read_text())["pid"], signal.SIGKILL)
    wait_for(lambda: [a.recovered_at is not None for a in client.status(app).job.am_attempts]
             == [True], 60, "AM attempt 2 recovered the job")
    code, first, _ = primus(home, "logs", app, "--attempt", "1")  # was: no --attempt, am.log whole
    assert code == 0 and "AM API at" in first and "took over" not in first
    assert first.endswith("supervisor: AM attempt 1 killed by signal 9 with the job unfinished: starting attempt 2\n")
    code, second, _ = primus(home, "logs", app, "--attempt", "2")
    assert code == 0 and "AM attempt 2: adopting 1 executor(s)" in second
    assert primus(home, "logs", app)[1].startswith(first + second)
    code, _, err = primus(home, "logs", app, "--attempt", "3")
    assert code == 2 and err == f"primus: job {app} has had 2 AM attempts, not 3: they count from 1\n"
    client.kill(app)


def test_kill_and_scale_from_the_cli(tmp_path, home, client):
    spec = write_spec(tmp_path, [{"name": "worker", "command": "sleep 300"}])
    code, out, _ = primus(home, "submit", str(spec))
    app = out.strip()
    wait_for(lambda: client.status(app).job.state == "running", 30, "running")
    code, out, _ = primus(home, "scale", app, "worker", "2")
    assert code == 0 and "now has 2 replicas" in out
    code, out, _ = primus(home, "kill", app)
    assert code == 0 and "killed" in out
    code, _, err = primus(home, "scale", app, "worker", "3")
    assert code == 5 and "killed" in err


def test_a_reader_gone_ends_the_output_quietly(tmp_path, home):
    spec = write_spec(tmp_path, [{"name": "worker", "replicas": 3, "command": "echo hi"}])
    _, out, _ = primus(home, "submit", str(spec), "--wait")
    app = out.strip()
    for command in (["status", app], ["logs", app], ["schema"]):
        reader, writer = os.pipe()
        os.close(reader)  # `| head -4` once head has exited: every write to the pipe fails (EPIPE)
        try:
            proc = subprocess.run([sys.executable, "-m", "primus_runtime.cli", "--home", str(home), *command],
                                  stdout=writer, stderr=subprocess.PIPE, text=True, timeout=60)
        finally:
            os.close(writer)
        # was "primus: [Errno 32] Broken pipe", exit 5 (a connection error)
        assert (proc.returncode, proc.stderr) == (141, ""), command


def test_control_of_an_ended_job_says_it_ended(tmp_path, home, client):
    spec = write_spec(tmp_path, [{"name": "worker", "command": "true"}])
    _, out, _ = primus(home, "submit", str(spec), "--wait")
    app = out.strip()
    wait_for(lambda: client.cluster("local").am_pid(app) is None, 30, "the AM's exit")
    code, _, err = primus(home, "scale", app, "worker", "2")
    # was "job APP is succeeded: its AM is not running"
    assert (code, err) == (5, f"primus: job {app} has ended (succeeded): it cannot be scaled\n")
    code, _, err = primus(home, "data", "suspend", app)
    assert (code, err) == (5, f"primus: job {app} has ended (succeeded): its input cannot be suspended\n")
    code, out, _ = primus(home, "kill", app)
    assert code == 0 and out.startswith(f"{app} had already ended (succeeded: ") and out.endswith(
        "): nothing to kill\n"), out


def test_the_am_refuses_control_of_an_ending_job_or_an_ended_executor_in_words(tmp_path, home, client):
    app = client.submit(make_spec([{"name": "ps", "command": "trap '' TERM; sleep 60", "success_percent": 100},
                                   {"name": "worker", "command": "true", "success_percent": 0}],
                                  am={"shutdown_grace": 10}))
    wait_for(lambda: [ex.state for ex in client.status(app).executors] == ["running", "succeeded"], 30,
             "ps-0 running, worker-0 done")
    with pytest.raises(AMRejected) as refused:
        client.cluster_for(app).am_request(app, "POST", "/executors/worker-0/restart", {}, 10)
    assert refused.value.message == "worker-0 has ended (succeeded): it cannot be restarted"  # was "is succeeded"
    assert client.request_kill(app, "enough")  # ps-0 ignores SIGTERM: the job stops for shutdown_grace
    code, _, err = primus(home, "scale", app, "ps", "2")
    # was "the AM refused: job is already killed"
    assert (code, err) == (5, f"primus: the AM refused: job {app} is already stopping (killed): it cannot be scaled\n")
    with pytest.raises(AMRejected) as refused:
        client.cluster_for(app).am_request(app, "POST", "/executors/ps-0/drain", {}, 10)
    assert refused.value.message == f"job {app} is already stopping (killed): its executors cannot be drained"


def test_actions_from_the_cli_are_recorded_as_the_os_user_s(tmp_path, home, client):
    spec = write_spec(tmp_path, [{"name": "worker", "command": "sleep 300"}])
    as_alice = {**os.environ, "LOGNAME": "alice"}  # getpass.getuser()'s first source
    _, out, _ = primus(home, "submit", str(spec), env=as_alice)
    app = out.strip()
    wait_for(lambda: client.status(app).job.state == "running", 30, "running")
    assert primus(home, "scale", app, "worker", "2", env=as_alice)[0] == 0
    assert primus(home, "kill", app, "--reason", "enough", env=as_alice)[0] == 0
    events = client.status(app).events
    scaled = next(e for e in events if e.subject == "role/worker")
    killed = next(e for e in events if e.subject == "job" and e.to_state == "stopping")
    assert (scaled.actor, killed.actor) == ("alice", "alice")  # was "token": any holder of the job token


def test_list_filters_by_tag(tmp_path, home):
    spec = write_spec(tmp_path, [{"name": "worker", "command": "true"}], tags={"dag_id": "daily"})
    code, out, _ = primus(home, "submit", str(spec), "--wait")
    app = out.strip()
    _, out, _ = primus(home, "list", "--tag", "dag_id=daily", "--json")
    assert [j["app_id"] for j in json.loads(out)] == [app]
    _, out, _ = primus(home, "list", "--tag", "dag_id=other", "--json")
    assert json.loads(out) == []


def test_schema_prints_json_schema(home):
    code, out, _ = primus(home, "schema")
    assert code == 0 and json.loads(out)["title"] == "JobSpec"


def test_yarn_without_a_hadoop_configuration_is_a_clear_error(tmp_path, home, monkeypatch):
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    spec = write_spec(tmp_path, [{"name": "worker", "command": "x"}])
    code, out, err = primus(home, "submit", str(spec), "--backend", "yarn")
    assert code == 5 and out == ""
    assert "HADOOP_CONF_DIR is not set" in err


def test_logs_follow_streams_until_the_job_ends(tmp_path, home):
    spec = write_spec(tmp_path, [{"name": "worker", "command": "for i in 1 2 3; do echo tick $i; sleep 0.3; done"}])
    _, out, _ = primus(home, "submit", str(spec))
    code, out, _ = primus(home, "logs", out.strip(), "--role", "worker", "--follow")
    assert code == 0 and out == "tick 1\ntick 2\ntick 3\n"


def summary_of(roles: list[RoleView], **job: object) -> StatusSummary:
    """A running job's status summary with these roles (no events, no input)."""
    return StatusSummary(job=JobSummary.model_validate({"app_id": "primus-1", "name": "test", "state": "running",
                                                        "reason": "", **job}),
                         roles=roles, events=[], data=None)


def role_of(name: str, replicas: int, restarts: int, states: dict[str, int]) -> RoleView:
    return RoleView.model_validate({"name": name, "replicas": replicas, "released": True, "ignored": False,
                                    "failures": 0, "restarts": restarts, "states": states, "ready": 0})


def test_progress_line_summarises_every_role():
    from primus_runtime.client import progress_line

    status = summary_of([
        role_of("ps", 2, 0, {"running": 2, "failed": 0}),
        role_of("worker", 2, 1, {"running": 1, "succeeded": 1}),
    ])
    assert progress_line(status) == "ps x2: 2 running | worker x2: 1 running, 1 succeeded (1 restart)"
    assert progress_line(summary_of([])) == "no executors yet"


def test_the_kafka_line_says_lag_rate_watermark_and_whether_the_brokers_answer():
    from primus_runtime.client import kafka_progress

    source = {"source": "events", "bootstrap_servers": "localhost:9092", "topics": ["events"], "group": "primus",
              "start": "committed", "end": None, "consumer_config": {}, "partitions": []}
    kafka = {**source, "lag": 1203, "records_per_s": 713.6, "eta_seconds": 1.7,
             "watermark": "2026-12-01T00:19:57.000+00:00", "progress": None, "reachable": True,
             "unreachable_since": None}
    assert kafka_progress(KafkaStatus.model_validate(kafka)) == ("kafka lag 1203 records, 713.6 records/s, watermark 2026-12-01T00:19:57.000+00:00, "
                                     "caught up in ~1.7s, brokers reachable")
    starting = {**kafka, "lag": None, "records_per_s": 0.0, "eta_seconds": None, "watermark": None, "progress": 0.25,
                "reachable": False, "unreachable_since": "2026-12-04T14:00:00+00:00"}
    assert kafka_progress(KafkaStatus.model_validate(starting)) == ("kafka lag not known yet, 0.0 records/s, watermark none yet, 25% of the "
                                        "bounded range, brokers unreachable since 2026-12-04T14:00:00+00:00")


def test_a_backend_setting_required_at_submit_is_named_before_any_cluster_is_contacted(tmp_path, home, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))  # no cluster configuration: never read
    spec = write_spec(tmp_path, [{"name": "worker", "command": "x"}])
    code, out, err = primus(home, "submit", str(spec), "--backend", "kubernetes")
    assert code == 2 and out == ""
    assert "backend.image: is required: the image of the AM and executor pods" in err


def test_status_of_many_executors_lists_those_not_running_and_says_how_to_list_all(tmp_path, home, client):
    tiny = {"cpu": 0.01, "memory": "16Mi"}
    spec = write_spec(tmp_path, [{"name": "worker", "replicas": 2, "command": "sleep 300", "resources": tiny},
                                 {"name": "helper", "replicas": 53, "command": "true", "success_percent": 0,
                                  "resources": tiny}])
    _, out, _ = primus(home, "submit", str(spec))
    app = out.strip()
    try:
        wait_for(lambda: (s := client.status(app, summary=True)).roles and
                 s.roles[1].states["succeeded"] == 53 and s.roles[0].states["running"] == 2,
                 120, "the helpers done and the workers running")
        code, out, _ = primus(home, "status", app)
        assert code == 0
        listed = [line.split()[0] for line in out.splitlines() if line.startswith("    ") and "ports" in line]
        assert listed == [f"helper-{i}" for i in range(50)]  # the first 50 not running, none of the workers
        assert "55 executors: the first 50 of 53 not running listed, 2 running not listed; every one: primus " \
               f"--home {home} status {app} --executors" in out
        _, out, _ = primus(home, "status", app, "--executors")
        every = [line.split()[0] for line in out.splitlines() if line.startswith("    ") and "ports" in line]
        assert every == ["worker-0", "worker-1"] + [f"helper-{i}" for i in range(53)]
        assert "not listed" not in out
    finally:
        client.kill(app)


def test_the_goodput_line_gives_the_ettr_and_each_cause_in_seconds():
    from primus_runtime.cli import goodput_line
    from primus_runtime.models import Goodput

    goodput = Goodput.model_validate({"ratio": 0.9712, "seconds": {
        "productive": 1164.4, "pending_resources": 4.2, "restarting": 22.0, "waiting_for_data": 10.0, "draining": 0.0}})
    assert goodput_line(goodput) == ("goodput: ETTR 0.97 (productive 1,164 s, pending_resources 4 s, restarting 22 s, "
                                     "waiting_for_data 10 s, draining 0 s)")
    assert goodput_line(Goodput(ratio=None, seconds={})).startswith("goodput: ETTR n/a")


def test_an_event_within_one_state_is_printed_without_a_state_change():
    from primus_runtime.cli import event_line

    base = {"seq": 1, "subject": "ps-1", "exit_code": None, "time": 0.0, "incarnation": None}
    assert event_line(EventView.model_validate({**base, "from_state": "running", "to_state": "running",
                                                "reason": "ready: port 41185 accepts connections"})) == \
        "ps-1 (running): ready: port 41185 accepts connections"  # was "ps-1: running -> running ready: ..."
    assert event_line(EventView.model_validate({**base, "from_state": "running", "to_state": "failed", "exit_code": 3,
                                                "reason": "trainer exited 3"})) == \
        "ps-1: running -> failed (exit 3) trainer exited 3"


def test_the_progress_line_says_stopping_once_the_outcome_is_decided():
    import io

    from primus_runtime.cli import _Progress

    out = io.StringIO()
    progress = _Progress(out)
    progress(summary_of([], stopping=None))
    progress(summary_of([], stopping=JobState.KILLED))
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("== running | no executors yet")
    assert lines[1].endswith("== stopping (killed) | no executors yet")  # was "== running" after the kill
