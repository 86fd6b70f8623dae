"""AM recovery on the local backend: the AM is SIGKILLed (once, twice, during a scale-up, after the
outcome) and the supervisor's next attempt carries the job on from the AM journal, adopting the
executors still running: same processes, no record lost or read twice, nothing charged."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import make_spec, wait_for
from primus_runtime.am.journal import JOURNAL, load, restore
from primus_runtime.am.master import ApplicationMaster
from primus_runtime.am.state import JobRecord, RoleState
from primus_runtime.client import PrimusClient
from primus_runtime.models import StatusDocument
from primus_runtime.spec import JobSpec
from primus_runtime.states import ExecutorState
from simulated_backend import SimulatedBackend

BENCH = Path(__file__).resolve().parents[1] / "bench"
RECORDS = 20_000
PACE = 2000  # records/s per trainer: each of 2 trainers reads for ~5 s


def write_input(data: Path) -> list[str]:
    day = data / "20200103"
    day.mkdir(parents=True)
    lines = [f"r{i:019d}" for i in range(RECORDS)]
    half = len(lines) // 2
    for n, part in enumerate((lines[:half], lines[half:])):
        (day / f"data-{n}.txt").write_text("\n".join(part) + "\n")
    (day / "_SUCCESS").write_text("")
    return lines


def input_spec(data: Path, out: Path, exactly_once: bool = False, replicas: int = 2) -> dict[str, Any]:
    env = {"OUT_DIR": str(out), "PACE": str(PACE)}
    if exactly_once:
        env["COMMIT_EVERY"] = "500"
    return {
        "name": "recovery",
        "roles": [{"name": "worker", "replicas": replicas, "consumes_input": True,
                   "command": [sys.executable, str(BENCH / "chaos_trainer.py")], "env": env,
                   "failover": {"restart": "on_failure", "max_failures_per_index": 3}}],
        "am": {"max_attempts": 3, "recovery_grace": "30s", "shutdown_grace": "3s"},
        "input": {"sources": [{"name": "daily", "path": str(data) + "/{{YYYY}}{{MM}}{{DD}}/", "pattern": "data-*"}],
                  "time_range": {"start": "2020-01-03", "end": "2020-01-03"}, "task_size": "64Ki",
                  "delivery": "exactly_once" if exactly_once else "at_least_once"},
    }


def am_pid(client: PrimusClient, app: str) -> int:
    return int(json.loads(client.cluster("local").job(app).am_info.read_text())["pid"])


def kill_am(client: PrimusClient, app: str) -> int:
    """SIGKILL the AM serving ``app`` now; its pid."""
    pid = am_pid(client, app)
    os.kill(pid, signal.SIGKILL)
    return pid


def wait_recovered(client: PrimusClient, app: str, attempts: int) -> dict[str, Any]:
    def recovered() -> dict[str, Any] | None:
        status = client.cluster("local").last_status(app) or {}
        done = [a for a in status.get("job", {}).get("am_attempts", []) if a.get("recovered_at")]
        return status if len(done) >= attempts else None
    return wait_for(recovered, timeout=60, what=f"AM attempt {attempts + 1} recovered the job")


def delivered(out: Path, exactly_once: bool, client: PrimusClient, app: str) -> Counter:
    if exactly_once:
        names = [json.loads(line)["checkpoint"] for f in client.cluster("local").job(app).path.rglob("commits.jsonl")
                 for line in f.read_text().splitlines()]
        return Counter(line for name in names for line in (out / f"batch-{name}.txt").read_text().split())
    return Counter(line for f in out.glob("worker-*.txt") for line in f.read_text().split())


def reading(client: PrimusClient, app: str, records: int) -> StatusDocument:
    def enough() -> StatusDocument | None:
        status = client.status(app)
        records_done = status.data.records_done if status.data is not None else 0
        running = [e for e in status.executors if e.state == "running"]
        return status if records_done >= records and len(running) == 2 else None
    return wait_for(enough, timeout=60, what=f"{records} records read")


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at_least_once", "exactly_once"])
def test_am_sigkilled_mid_job_keeps_its_executors_and_loses_no_record(client, tmp_path, exactly_once):
    expected = write_input(tmp_path / "data")
    out = tmp_path / "out"
    out.mkdir()
    app = client.submit(input_spec(tmp_path / "data", out, exactly_once))
    before = reading(client, app, 3000)
    pids = {e.id: e.pid for e in before.executors}
    killed = kill_am(client, app)

    status = client.wait(app, timeout=120)
    assert status.job.state == "succeeded", status.job
    assert am_pid(client, app) != killed
    assert {e.id: e.pid for e in status.executors} == pids  # the same processes carried on
    attempt, = status.job.am_attempts
    assert attempt.attempt == 2 and attempt.adopted == 2 and attempt.gone == 0
    assert attempt.down_since <= attempt.started_at <= attempt.recovered_at
    assert [r.restarts for r in status.roles] == [0] and [r.failures for r in status.roles] == [0]
    assert [e.attempt for e in status.executors] == [0, 0], "no executor was replaced"
    got = delivered(out, exactly_once, client, app)
    assert set(expected) == set(got), f"{len(set(expected) - set(got))} records lost"
    assert sum(n - 1 for n in got.values()) == 0, "records read twice"
    recovered = [e.reason for e in status.events if "recovered the job in" in e.reason]
    assert len(recovered) == 1, status.events[-10:]

    shown = subprocess.run([sys.executable, "-m", "primus_runtime.cli", "status", app], capture_output=True,
                           text=True, env={**os.environ, "PRIMUS_HOME": str(client.cluster("local").home)}, check=True).stdout
    assert "AM attempt 2 started" in shown and "recovered in" in shown and "2 executor(s) adopted" in shown, shown


def test_am_killed_twice_in_a_row(client, tmp_path):
    expected = write_input(tmp_path / "data")
    out = tmp_path / "out"
    out.mkdir()
    app = client.submit(input_spec(tmp_path / "data", out))
    pids = {e.id: e.pid for e in reading(client, app, 2000).executors}
    kill_am(client, app)
    wait_recovered(client, app, 1)
    kill_am(client, app)

    status = client.wait(app, timeout=120)
    assert status.job.state == "succeeded", status.job
    assert [a.attempt for a in status.job.am_attempts] == [2, 3]
    assert {e.id: e.pid for e in status.executors} == pids
    got = delivered(out, False, client, app)
    assert set(expected) == set(got) and sum(n - 1 for n in got.values()) == 0


def test_input_suspended_on_request_stays_suspended_after_an_am_restart(client, tmp_path):
    expected = write_input(tmp_path / "data")
    out = tmp_path / "out"
    out.mkdir()
    app = client.submit(input_spec(tmp_path / "data", out))
    reading(client, app, 2000)
    client.data_suspend(app)
    kill_am(client, app)
    status = wait_recovered(client, app, 1)
    assert status["data"]["state"] == "suspended", status["data"]
    assert client.status(app).data.state == "suspended"
    client.data_resume(app)
    status = client.wait(app, timeout=120)
    assert status.job.state == "succeeded", status.job
    got = delivered(out, False, client, app)
    assert set(expected) == set(got) and sum(n - 1 for n in got.values()) == 0


def sleeper(seconds: float, replicas: int = 1, **am: Any) -> dict[str, Any]:
    return make_spec([{"name": "worker", "replicas": replicas,
                       "command": [sys.executable, "-c", f"import time; time.sleep({seconds})"]}],
                     scheduling={"policy": "dynamic"},
                     am={"max_attempts": 3, "recovery_grace": "30s", **am})


def test_am_killed_while_a_scale_up_is_half_done(client):
    app = client.submit(sleeper(8))
    wait_for(lambda: client.status(app).job.state == "running", what="running")
    client.scale(app, "worker", 3)
    kill_am(client, app)  # the new executors are being created, launched, registered

    status = client.wait(app, timeout=120)
    assert status.job.state == "succeeded", status.job
    assert [(e.id, e.state) for e in status.executors] == \
        [("worker-0", "succeeded"), ("worker-1", "succeeded"), ("worker-2", "succeeded")]
    # Each index ran one trainer: none was started twice (a launch the dead AM asked for is adopted or
    # ended before the new AM launches it again; an executor whose registration the dead AM took in but
    # never committed to its journal is such a launch: it registers again, its trainer never started).
    started = Counter(e.subject for e in status.events if e.to_state == "running" and e.subject != "job")
    assert started == {"worker-0": 1, "worker-1": 1, "worker-2": 1}, status.events
    assert len(status.job.am_attempts) == 1


def test_am_killed_after_the_outcome_saves_it_again(client):
    app = client.submit(sleeper(1))
    job = client.cluster("local").job(app)

    def ended() -> bool:
        status = job.read_json(job.status) or {}
        return status.get("job", {}).get("state") == "succeeded"
    wait_for(ended, timeout=60, what="the outcome")
    kill_am(client, app)  # while it saves the history and lingers

    supervisor = int(job.am_pid.read_text())
    wait_for(lambda: client.cluster("local").am_pid(app) is None, timeout=60, what="the supervisor's exit")
    status = client.status(app)
    assert status.job.state == "succeeded"
    attempt, = status.job.am_attempts
    assert attempt.adopted == 0
    assert any("took over after the job ended" in e.reason for e in status.events)
    assert (job.path / "events.jsonl").exists()
    assert supervisor != am_pid(client, app)


def test_supervisor_stops_the_job_once_out_of_attempts(client):
    app = client.submit(sleeper(60, max_attempts=2))
    wait_for(lambda: client.status(app).job.state == "running", what="running")
    kill_am(client, app)
    wait_recovered(client, app, 1)
    worker = client.status(app).executors[0].pid
    kill_am(client, app)

    wait_for(lambda: client.cluster("local").am_pid(app) is None, timeout=60, what="the supervisor's exit")
    wait_for(lambda: not Path(f"/proc/{worker}").exists(), timeout=30, what="the executor's end")
    log = client.cluster("local").job(app).am_log.read_text()
    said = "the AM died 2 times within 1h (am.max_attempts 2); the last: AM attempt 2 killed by signal 9"
    assert f"{said}: stopping what is left of the job" in log
    # The job's reason is the supervisor's, not "the AM exited without recording an outcome" (issue 35).
    status = client.status(app)
    assert status.job.state == "lost" and status.job.reason.startswith(said + "; its log: "), status.job
    assert [e.state for e in status.executors] == ["lost"]  # not `running` for a job that is over
    [entry] = [j for j in client.list() if j.app_id == app]
    assert (entry.state, entry.reason) == ("lost", said)


def test_am_deaths_count_toward_max_attempts_only_within_the_validity_interval(client):
    """A job of days loses its AM now and then; each death recovered, it must not be lost for the sum of
    them (issue 35). Two deaths 4 s apart with max_attempts 2 and a 3 s window: the job carries on."""
    app = client.submit(sleeper(14, max_attempts=2, attempt_failures_validity_interval="3s"))
    wait_for(lambda: client.status(app).job.state == "running", what="running")
    kill_am(client, app)
    wait_recovered(client, app, 1)
    time.sleep(4)  # what is tested: the first death falls out of the window
    kill_am(client, app)
    wait_recovered(client, app, 2)
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded", status.job
    assert [a.attempt for a in status.job.am_attempts] == [2, 3]
    assert all(a.cause and "killed by signal 9" in a.cause for a in status.job.am_attempts), status.job.am_attempts
    deaths = (client.cluster("local").job(app).path / "am-deaths.jsonl").read_text().splitlines()
    assert [json.loads(d)["attempt"] for d in deaths] == [1, 2]


# --- the journal itself ---------------------------------------------------------------------------


def test_journal_replay_rebuilds_the_record_before_and_after_compaction(tmp_path):
    spec = JobSpec.model_validate(make_spec([{"name": "ps", "replicas": 1, "command": ["true"]},
                                             {"name": "worker", "replicas": 3, "command": ["true"]}]))

    async def steps() -> None:  # synchronous AM steps: the launches they spawn never run
        am = ApplicationMaster(spec, "app", SimulatedBackend(), status_path=tmp_path / "status.json")
        record, journal = am.record, am.journal
        assert journal is not None
        await am.backend.start(am)
        am.finish_reason = "why"
        for role in spec.roles:
            for index in range(role.replicas):
                am.new_incarnation(role.name, index, attempt=0)
        worker = record.executors["worker-1"]
        record.set_executor_state(worker, ExecutorState.STARTING, "launched")
        record.set_executor_state(worker, ExecutorState.FAILED, "exit 3", 3)
        record.roles["worker"].failures_by_index[1] = 1
        record.history.append(worker)
        am.new_incarnation("worker", 1, attempt=1)
        am.controls.scale("worker", 2)
        am.publisher.write_journals()

        def replayed() -> dict[str, Any]:
            fresh = JobRecord(app_id="app", name=spec.name)
            fresh.roles = {r.name: RoleState(r.name, r.replicas) for r in spec.roles}
            recovered = load(tmp_path / JOURNAL)
            assert recovered is not None
            assert restore(fresh, recovered) == "why"
            # Goodput's seconds grow with the clock: what is journaled are the seconds of periods over.
            return {**fresh.to_dict(), "data": None, "goodput": fresh.goodput.closed}

        expected = {**record.to_dict(), "goodput": record.goodput.closed}
        assert expected["goodput"]["pending_resources"] > 0  # worker-2's, scaled away before its launch
        assert replayed() == expected
        journal.compact()
        assert replayed() == expected
        with (tmp_path / JOURNAL).open("a") as f:
            f.write('{"k":"ex","incarn')  # torn by a crash mid-write: skipped
        assert replayed() == expected

    asyncio.run(steps())


def test_heartbeats_of_one_loop_turn_share_one_journal_write_and_answer_after_it(tmp_path):
    """Group commit: the heartbeats handled in one turn of the AM's loop are journaled by one write,
    and none of them is answered before the write that holds the tasks it hands out."""
    from primus_runtime.data.journal import recover
    from primus_runtime.models import HeartbeatRequest, RegisterRequest

    data = tmp_path / "in"
    data.mkdir()
    (data / "input.txt").write_bytes(b"x" * 63 + b"\n" + b"y" * 63 * 64)  # 64 tasks of 64 bytes
    spec = JobSpec.model_validate(make_spec(
        [{"name": "worker", "replicas": 8, "command": ["true"], "consumes_input": True}],
        am={"heartbeat_timeout": 600.0},
        input={"sources": [{"name": "in", "path": str(data), "success_marker": None}], "task_size": "64B",
               "max_tasks_per_executor": 2}))

    async def scenario() -> None:
        (tmp_path / "am").mkdir()
        am = ApplicationMaster(spec, "app", SimulatedBackend(), status_path=tmp_path / "am" / "status.json")
        await am.start("127.0.0.1:1")
        assert am.data is not None and am.data.journal is not None
        while not am.data.dispatcher.scan_complete:
            await asyncio.sleep(0.05)
        executors = list(am.fleet.live.values())
        for ex in executors:
            am.register(RegisterRequest(id=ex.id, role=ex.role, index=ex.index, incarnation=ex.incarnation,
                                        host="127.0.0.1", ports=[], pid=0))
        await asyncio.gather(*(am.heartbeat(HeartbeatRequest(
            id=ex.id, incarnation=ex.incarnation, state="registered", cluster_version=0, wait=True))
            for ex in executors))
        journal, writes = am.data.journal, []
        write = journal.write
        journal.write = lambda: (writes.append(1), write())[1]  # type: ignore[method-assign]

        async def beat(ex: Any) -> None:
            reply = await am.heartbeat(HeartbeatRequest(id=ex.id, incarnation=ex.incarnation, state="running",
                                                        cluster_version=10**6, need_tasks=2))
            handed = [task["task_id"] for task in reply["tasks"]]
            on_disk = recover(journal.dir)  # what a restarted AM would read at the moment of the answer
            assert len(handed) == 2 and all(on_disk[t]["holder"] == ex.incarnation for t in handed), on_disk

        await asyncio.gather(*(beat(ex) for ex in executors))
        assert len(writes) == 1  # eight heartbeats, one write
        await am.close()

    asyncio.run(scenario())


def test_a_group_commit_outlives_a_cancelled_waiter_and_hands_a_failed_write_to_every_waiter():
    from primus_runtime.am.group_commit import GroupCommit

    async def scenario() -> None:
        written: list[int] = []
        commit = GroupCommit(lambda: written.append(len(written)))
        gone = asyncio.ensure_future(commit.wait())
        stays = asyncio.ensure_future(commit.wait())
        await asyncio.sleep(0)  # both wait on the same commit
        gone.cancel()  # its client left: the other still gets its write
        await stays
        assert written == [0] and gone.cancelled()

        def full_disk() -> None:
            raise OSError(28, "No space left on device")

        failing = GroupCommit(full_disk)
        results = await asyncio.gather(failing.wait(), failing.wait(), return_exceptions=True)
        assert [str(r) for r in results] == ["[Errno 28] No space left on device"] * 2
        assert failing.commits == 1 and failing.waits == 2

    asyncio.run(scenario())


def test_a_job_submitted_with_defaults_survives_its_am_being_sigkilled(client):
    """Recovery is the default on the local backend: no am.max_attempts in the spec."""
    app = client.submit({"name": "defaults", "roles": [{"name": "worker", "replicas": 2, "command": "sleep 8"}]})
    assert client.spec(app).am_attempts == 3
    wait_for(lambda: client.status(app).job.state == "running", 30, "the job running")
    pids = {e.id: e.pid for e in client.status(app).executors}
    killed = kill_am(client, app)
    status = client.wait(app, timeout=90)
    assert status.job.state == "succeeded", status.job
    assert am_pid(client, app) != killed
    assert {e.id: e.pid for e in status.executors} == pids  # adopted, not started again
    attempt, = status.job.am_attempts
    assert attempt.attempt == 2 and attempt.adopted == 2 and attempt.gone == 0


def test_a_dead_supervisor_is_replaced_and_the_am_is_still_restarted_after_it(client):
    app = client.submit({"name": "supervised", "roles": [{"name": "worker", "replicas": 2, "command": "sleep 12"}]})
    job = client.cluster("local").job(app)
    wait_for(lambda: client.status(app).job.state == "running", 30, "the job running")
    pids = {e.id: e.pid for e in client.status(app).executors}
    supervisor = int(job.am_pid.read_text())
    assert supervisor != am_pid(client, app)  # the AM runs under its supervisor
    os.kill(supervisor, signal.SIGKILL)
    # The AM goes on: the job is running, not lost, and a new supervisor watches the AM.
    assert client.status(app).job.state == "running"
    replaced = wait_for(lambda: next((e for e in client.status(app).events if "supervisor" in e.reason), None),
                        10, "the new supervisor")
    assert f"supervisor (pid {supervisor}) died" in replaced.reason
    watcher = int(job.am_pid.read_text())
    assert watcher != supervisor and client.cluster("local").am_pid(app) == watcher

    killed = kill_am(client, app)  # the new supervisor starts the next attempt, which adopts
    status = client.wait(app, timeout=90)
    assert status.job.state == "succeeded", status.job
    assert am_pid(client, app) != killed
    assert {e.id: e.pid for e in status.executors} == pids
    attempt, = status.job.am_attempts
    assert attempt.attempt == 2 and attempt.adopted == 2
