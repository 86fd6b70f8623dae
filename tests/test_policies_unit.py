"""The scheduler and the failover engine alone, on hand-made job records."""

from __future__ import annotations

import pytest

from primus_runtime.am.failover import Action, FailoverEngine
from primus_runtime.am.scheduler import RoleScheduler
from primus_runtime.am.state import (
    Executor,
    ExecutorState,
    InvalidTransition,
    JobRecord,
    JobState,
    RoleState,
)
from primus_runtime.spec import JobSpec


def build(roles, policy="gang", **scheduling):
    spec = JobSpec.from_dict({"name": "j", "roles": roles, "scheduling": {"policy": policy, **scheduling}})
    record = JobRecord(app_id="a", name="j")
    for role in spec.roles:
        record.roles[role.name] = RoleState(role.name, role.replicas)
        for i in range(role.replicas):
            ex = Executor(role=role.name, index=i, incarnation=f"{role.name}{i}", attempt=0)
            record.put_executor(ex)
    return spec, record, RoleScheduler(spec, record)


def advance(record, ex_id, *states):
    for state in states:
        record.set_executor_state(record.executors[ex_id], state)


S = ExecutorState
PS_WORKER = [{"name": "ps", "replicas": 1, "command": "x"}, {"name": "worker", "replicas": 2, "command": "x"}]


def test_ordered_launches_the_next_role_only_when_the_previous_is_ready():
    spec, record, sched = build(PS_WORKER, "ordered")
    assert sched.roles_to_launch() == ["ps"]
    record.roles["ps"].launched = True
    assert sched.roles_to_launch() == []
    advance(record, "ps-0", S.STARTING, S.REGISTERED, S.RUNNING)
    assert sched.roles_to_launch() == [], "a running ps is not a ready one"
    record.mark_ready(record.executors["ps-0"], "ready")
    assert sched.roles_to_launch() == ["worker"]


def test_a_replaced_executor_is_no_longer_ready():
    spec, record, sched = build(PS_WORKER, "ordered")
    record.roles["ps"].launched = True
    advance(record, "ps-0", S.STARTING, S.REGISTERED, S.RUNNING)
    record.mark_ready(record.executors["ps-0"], None)
    record.set_executor_state(record.executors["ps-0"], S.FAILED, "boom", 1)
    record.put_executor(Executor("ps", 0, "ps0-again", 1))
    assert record.count_ready("ps") == 0 and sched.roles_to_launch() == []


def test_the_job_runs_once_every_trainer_is_ready():
    spec, record, sched = build(PS_WORKER, "gang")
    for ex_id in record.executors:
        advance(record, ex_id, S.STARTING, S.REGISTERED, S.RUNNING)
    for ex_id in ("worker-0", "worker-1"):
        record.mark_ready(record.executors[ex_id], None)
    assert not sched.job_running()
    record.mark_ready(record.executors["ps-0"], "ready: port 9 accepts connections")
    assert sched.job_running()
    assert [(e.subject, e.to_state, e.reason) for e in record.events[-1:]] == \
        [("ps-0", "running", "ready: port 9 accepts connections")]


@pytest.mark.parametrize("readiness,ports,unmet", [
    ({}, [4000], "port 4000 never accepted a connection"),
    ({}, [4000, 4001], "ports 4000, 4001 did not all accept connections"),
    ({"probe": "file"}, [4000], "the trainer never created its ready file ($PRIMUS_READY_FILE, "
                                "trainer_api.ready())"),
])
def test_a_trainer_not_ready_in_time_fails_the_job_naming_what_it_waited_for(readiness, ports, unmet):
    roles = [{**PS_WORKER[0], "readiness": {"timeout": 60, **readiness}}, PS_WORKER[1]]
    spec, record, sched = build(roles, "ordered", start_timeout=300)
    ps = record.executors["ps-0"]
    advance(record, "ps-0", S.STARTING, S.REGISTERED, S.RUNNING)
    ps.ports = ports
    assert sched.not_ready(ps.running_clock + 59) is None
    assert sched.not_ready(ps.running_clock + 61) == f"ps-0 not ready after 60s: {unmet}"
    record.mark_ready(ps, None)
    assert sched.not_ready(ps.running_clock + 61) is None


def test_readiness_timeout_defaults_to_the_start_timeout_and_covers_a_trainer_that_ended_unready():
    spec, record, sched = build(PS_WORKER, "ordered", start_timeout=30)
    ps = record.executors["ps-0"]
    ps.ports = [4000]
    advance(record, "ps-0", S.STARTING, S.REGISTERED, S.RUNNING, S.SUCCEEDED)
    assert sched.not_ready(ps.running_clock + 31) == \
        "ps-0 not ready after 30s: port 4000 never accepted a connection (it has ended: succeeded)"
    record.roles["worker"].launched = True  # nobody waits for the ps any more
    assert sched.not_ready(ps.running_clock + 31) is None


def test_a_start_timeout_names_the_short_role_and_why_its_executors_wait():
    spec, record, sched = build(PS_WORKER, "gang")
    for role in record.roles.values():
        role.launched, role.launched_at = True, 0.0
    advance(record, "ps-0", S.STARTING, S.REGISTERED)
    advance(record, "worker-0", S.STARTING)
    record.executors["worker-0"].host = "node-7"
    pending = {"worker1": "waits for memory: needs 8192Mi, 2048Mi free of 16384Mi"}
    assert sched.waiting_too_long(100.0, 60, pending.get) == (
        "start barrier of role worker timed out after 60s (gang scheduling): 0 of 2 executors registered; "
        "worker-0 was launched on node-7 but never registered (see its executor log); "
        "worker-1 waits for memory: needs 8192Mi, 2048Mi free of 16384Mi")
    assert sched.waiting_too_long(59.0, 60, pending.get) is None


def test_gang_releases_nobody_until_everyone_registered():
    spec, record, sched = build(PS_WORKER, "gang")
    assert sched.roles_to_launch() == ["ps", "worker"]
    advance(record, "ps-0", S.STARTING, S.REGISTERED)
    advance(record, "worker-0", S.STARTING, S.REGISTERED)
    assert sched.release_roles() == []
    advance(record, "worker-1", S.STARTING, S.REGISTERED)
    assert sched.release_roles() == ["ps", "worker"]
    assert sched.may_start(record.executors["worker-1"])


def test_dynamic_releases_each_role_at_its_min_replicas():
    spec, record, sched = build([{"name": "worker", "replicas": 3, "min_replicas": 2, "command": "x"}], "dynamic")
    advance(record, "worker-0", S.STARTING, S.REGISTERED)
    assert sched.release_roles() == []
    advance(record, "worker-2", S.STARTING, S.REGISTERED)
    assert sched.release_roles() == ["worker"]


def test_verdict_success_failure_and_undecided():
    spec, record, sched = build(PS_WORKER)
    assert sched.verdict() is None
    advance(record, "worker-0", S.STARTING, S.REGISTERED, S.RUNNING, S.SUCCEEDED)
    assert sched.verdict() is None
    record.set_executor_state(record.executors["worker-1"], S.FAILED, "boom", 1)
    verdict = sched.verdict()
    assert verdict.state is JobState.FAILED
    assert "role worker: 1 of 2 executors succeeded, 2 required" in verdict.reason
    assert "worker-1 failed (exit 1)" in verdict.reason


def test_transitions_outside_the_table_are_refused():
    spec, record, sched = build(PS_WORKER)
    with pytest.raises(InvalidTransition):
        record.set_executor_state(record.executors["ps-0"], S.RUNNING)
    record.set_job_state(JobState.STARTING)
    record.set_job_state(JobState.KILLED, "k")
    with pytest.raises(InvalidTransition):
        record.set_job_state(JobState.RUNNING)
    assert [e.to_state for e in record.events] == ["starting", "killed"]


def ended(record, ex_id, state, code=None):
    ex = record.executors[ex_id]
    record.set_executor_state(ex, S.STARTING)
    record.set_executor_state(ex, state, "r", code)
    return ex


@pytest.mark.parametrize("failover,outcomes", [
    ({"max_failures_per_index": 2}, [Action.RESTART, Action.RESTART, Action.FAIL_JOB]),
    ({"max_failures_per_index": 0}, [Action.FAIL_JOB]),
    ({"restart": "never"}, [Action.FAIL_JOB]),
    ({"max_failures_per_index": 0, "on_exhausted": "ignore_role"}, [Action.IGNORE_ROLE]),
])
def test_failure_budgets(failover, outcomes):
    spec, record, _ = build([{"name": "worker", "command": "x", "failover": failover}])
    engine = FailoverEngine(spec)
    for expected in outcomes:
        ex = record.executors["worker-0"]
        record.set_executor_state(ex, S.FAILED, "r", 1)
        assert engine.decide(record.roles["worker"], ex).action is expected
        record.put_executor(Executor("worker", 0, f"x{len(record.events)}", ex.attempt + 1))


def test_lost_counts_as_a_charged_failure_and_preemption_does_not():
    spec, record, _ = build([{"name": "worker", "command": "x",
                              "failover": {"max_failures_per_index": 1, "preemption_exit_codes": [143]}}])
    engine, role = FailoverEngine(spec), record.roles["worker"]
    preempted = engine.decide(role, ended(record, "worker-0", S.FAILED, 143))
    assert preempted.action is Action.RESTART and not preempted.charged
    record.put_executor(Executor("worker", 0, "b", 1))
    flagged = engine.decide(role, ended(record, "worker-0", S.FAILED, 1), preempted=True)
    assert flagged.action is Action.RESTART and not flagged.charged  # the backend said so
    record.put_executor(Executor("worker", 0, "c", 2))
    lost = engine.decide(role, ended(record, "worker-0", S.LOST))
    assert lost.action is Action.RESTART and lost.charged and role.failures == 1


@pytest.mark.parametrize("failover,state,code,expected", [
    ({}, S.FAILED, 127, Action.FAIL_JOB),
    ({}, S.FAILED, 126, Action.FAIL_JOB),
    ({"on_exhausted": "ignore_role"}, S.FAILED, 127, Action.IGNORE_ROLE),
    ({}, S.FAILED, 1, Action.RESTART),
    ({"permanent_exit_codes": []}, S.FAILED, 127, Action.RESTART),
    ({"retryable_exit_codes": [1]}, S.FAILED, 1, Action.RESTART),
    ({"retryable_exit_codes": [1]}, S.FAILED, 2, Action.FAIL_JOB),
    ({"retryable_exit_codes": [1], "preemption_exit_codes": [143]}, S.FAILED, 143, Action.RESTART),
    ({"retryable_exit_codes": [1]}, S.LOST, None, Action.RESTART),
])
def test_permanent_exit_codes_exhaust_the_budget_at_once(failover, state, code, expected):
    spec, record, _ = build([{"name": "worker", "command": "x",
                              "failover": {"max_failures_per_index": 5, **failover}}])
    decision = FailoverEngine(spec).decide(record.roles["worker"], ended(record, "worker-0", state, code))
    assert decision.action is expected
    if expected is not Action.RESTART:
        assert f"exit {code}" in decision.reason and "is not restarted" in decision.reason


def test_stopped_and_succeeded_executors_are_left_alone():
    spec, record, _ = build([{"name": "worker", "command": "x"}])
    engine = FailoverEngine(spec)
    assert engine.decide(record.roles["worker"], ended(record, "worker-0", S.STOPPED)).action is Action.NOTHING
    spec, record, _ = build([{"name": "worker", "command": "x"}])
    assert engine.decide(record.roles["worker"], ended(record, "worker-0", S.SUCCEEDED, 0)).action is Action.NOTHING


@pytest.mark.parametrize("ports,reason", [
    ([4000], "ready: port 4000 accepts connections"),  # was "port 4000 accept connections"
    ([4000, 4001], "ready: ports 4000, 4001 accept connections"),
])
def test_the_ready_event_names_its_ports_in_good_grammar(ports, reason):
    spec, record, sched = build([{**PS_WORKER[0], "readiness": {"probe": "ports"}}, PS_WORKER[1]], "gang")
    ps = record.executors["ps-0"]
    ps.ports = ports
    assert sched.ready_reason(ps) == reason
