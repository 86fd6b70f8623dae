"""The job spec rejects bad input with the path and value, and round-trips."""

from __future__ import annotations

import json
import re

import pytest

from primus_runtime.spec import JobSpec, SpecError, load_spec
from primus_runtime.spec_types import parse_duration, parse_memory

WORKER = {"name": "worker", "command": "python train.py"}


def spec_with(**changes):
    data = {"name": "job", "roles": [dict(WORKER)]}
    data.update(changes)
    return data


BAD_SPECS = [
    (spec_with(roles=[WORKER, {"name": "w2", "command": "x", "failover": {"max_failures_per_index": -2}}]),
     "roles[1].failover.max_failures_per_index: must be >= 0, got -2"),
    (spec_with(roles=[{**WORKER, "replicas": 0}]), "roles[0].replicas: must be >= 1, got 0"),
    (spec_with(roles=[{**WORKER, "replicas": 2, "min_replicas": 3}]),
     "roles[0].min_replicas: must be <= replicas (2), got 3"),
    (spec_with(roles=[{**WORKER, "colour": "red"}]), "roles[0].colour: unknown field, got 'red'"),
    (spec_with(roles=[{**WORKER, "resources": {"memory": "2Zi"}}]), "roles[0].resources.memory: must be a size"),
    (spec_with(roles=[{**WORKER, "resources": {"memory": 4096}}]),
     "roles[0].resources.memory: give a unit, e.g. '512Mi'"),
    (spec_with(roles=[{**WORKER, "resources": {"memory": "4096"}}]),
     "roles[0].resources.memory: give a unit, e.g. '512Mi', '4Gi', '64Mi', '1G' or '100k' (a bare number is "
     "refused: MiB or bytes?), got '4096'"),
    (spec_with(backend={"type": "yarn", "am_memory": 2048}), "backend.am_memory: give a unit"),
    (spec_with(backend={"type": "local", "memory": 1.5}), "backend.memory: give a unit"),
    (spec_with(roles=[{**WORKER, "resources": {"cpu": 0}}]), "roles[0].resources.cpu: must be > 0, got 0"),
    (spec_with(roles=[{**WORKER, "failover": {"restart": "sometimes"}}]),
     "roles[0].failover.restart: must be one of 'never', 'on_failure' or 'always', got 'sometimes'"),
    (spec_with(roles=[{**WORKER, "command": ""}]), "roles[0].command: must not be empty"),
    (spec_with(roles=[{**WORKER, "env": {"BAD NAME": "1"}}]), "'BAD NAME' is not a valid environment variable"),
    (spec_with(roles=[{**WORKER, "framework": "pytorch", "replicas": 2, "min_replicas": 1}]),
     "roles[0].min_replicas: pytorch roles start with all replicas"),
    (spec_with(roles=[WORKER, dict(WORKER)]), "roles: duplicate role names ['worker']"),
    (spec_with(roles=[]), "roles: must have at least 1 item"),
    (spec_with(name="Bad Name"), "name: must match"),
    (spec_with(roles=[{"name": "ps", "command": "x"}]), "at least one role needs success_percent > 0"),
    (spec_with(scheduling={"policy": "ordered", "order": ["worker", "ghost"]}), "scheduling.order: must list every role"),
    (spec_with(scheduling={"policy": "whenever"}), "scheduling.policy: must be one of"),
    (spec_with(roles=[{**WORKER, "ports": 0, "readiness": {"probe": "ports"}}]),
     "roles[0].readiness.probe: 'ports' needs the role to reserve ports, got ports: 0"),
    (spec_with(roles=[{**WORKER, "readiness": {"probe": "listening"}}]), "roles[0].readiness.probe: must be one of"),
    (spec_with(am={"heartbeat_interval": "5s", "heartbeat_timeout": "6s"}),
     "am.heartbeat_timeout: must be at least twice heartbeat_interval (5s), got 6s"),
    (spec_with(am={"heartbeat_timeout": "soon"}), "am.heartbeat_timeout: must be a duration"),
    (spec_with(am={"max_attempts": 2, "heartbeat_timeout": "30s", "recovery_grace": "20s"}),
     "am.recovery_grace: must be more than heartbeat_timeout (30s) when max_attempts > 1, got 20s"),
    (spec_with(am={"advertise": "proxy.example"}), "am.advertise: must be host:port with a port from 1 to 65535, "
     "got 'proxy.example'"),
    (spec_with(am={"advertise": "proxy:70000"}), "am.advertise: must be host:port"),
    (spec_with(backend={"type": "mesos"}), "backend: must be one of 'local', 'yarn', 'kubernetes', got 'mesos'"),
    (spec_with(backend={"type": "local", "cpus": -1}), "backend.cpus: must be > 0, got -1"),
    (spec_with(backend={"type": "local", "inherit_env": ["AWS-KEY"]}),
     "backend.inherit_env: 'AWS-KEY' is not a variable name, nor a prefix ending in '*'"),
    (spec_with(backend={"type": "local", "inherit_env": ["PRIMUS_HOME"]}),
     "backend.inherit_env: 'PRIMUS_HOME': PRIMUS_* variables are the runtime's own and never reach a trainer"),
    (spec_with(backend={"type": "kubernetes", "gang": "kueue"}), "backend.queue: gang: kueue needs the LocalQueue's name"),
    (spec_with(roles=[{**WORKER, "placement": {"anti_affinity": ["ghost"]}}]),
     "roles[0].placement.anti_affinity: unknown role 'ghost'"),
    (spec_with(roles=[{**WORKER, "failover": {"retryable_exit_codes": [1, 127]}}]),
     "roles[0].failover.retryable_exit_codes: exit codes [127] are also in permanent_exit_codes (default [126, 127])"),
    (spec_with(roles=[{**WORKER, "failover": {"permanent_exit_codes": [3], "preemption_exit_codes": [3, 143]}}]),
     "roles[0].failover.permanent_exit_codes: exit codes [3] are also in preemption_exit_codes, got [3]"),
    (spec_with(roles=[{**WORKER, "preemption": {"signal": "SIGNOTHING"}}]),
     "roles[0].preemption.signal: no signal 'SIGNOTHING' (e.g. SIGUSR1, SIGUSR2, SIGHUP)"),
    (spec_with(roles=[{**WORKER, "preemption": {"signal": "kill"}}]),
     "roles[0].preemption.signal: SIGKILL cannot be a preemption notice"),
    (spec_with(roles=[{**WORKER, "preemption": {"grace": 0}}]), "roles[0].preemption.grace: must be > 0, got 0"),
    (spec_with(roles=[{**WORKER, "preemption": {"notice_file": ""}}]), "roles[0].preemption.notice_file:"),
    (spec_with(roles=[{**WORKER, "preemption": {"notice": "/x"}}]), "roles[0].preemption.notice:"),
    (spec_with(roles=[{**WORKER, "failover": {"permanent_exit_codes": [0]}}]),
     "roles[0].failover.permanent_exit_codes: exit code 0 is success, never a failure, got [0]"),
    ({"roles": [WORKER]}, "name: is required"),
    (spec_with(roles=[{**WORKER, "replicas": "two"}]), "roles[0].replicas: must be an integer, got 'two'"),
    (spec_with(roles=[{**WORKER, "env": ["A=1"]}]), "roles[0].env: must be a mapping, got ['A=1']"),
    (spec_with(am="fast"), "am: must be a mapping, got 'fast'"),
    (spec_with(roles=[{"name": "worker"}]), "roles[0].command: is required"),
]


@pytest.mark.parametrize("data,expected", BAD_SPECS, ids=[e[:40] for _, e in BAD_SPECS])
def test_bad_spec_is_rejected_naming_the_path_and_value(data, expected):
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict(data)
    assert any(expected in line for line in info.value.problems), info.value.problems


def test_every_problem_is_reported_at_once():
    data = spec_with(roles=[{**WORKER, "replicas": -1, "ports": 99, "oops": 1}])
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict(data)
    assert len(info.value.problems) == 3


def test_ps_roles_default_to_fail_the_job_and_not_be_waited_on():
    spec = JobSpec.from_dict(spec_with(roles=[{"name": "ps", "command": "x"}, WORKER]))
    ps, worker = spec.roles
    assert ps.failover.restart == "never" and ps.failover.on_exhausted == "fail_job"
    assert ps.required_successes == 0
    assert worker.failover.restart == "on_failure" and worker.required_successes == 1


def test_success_percent_rounds_up():
    spec = JobSpec.from_dict(spec_with(roles=[{**WORKER, "replicas": 3, "success_percent": 50}]))
    assert spec.roles[0].required_successes == 2


def test_yaml_json_and_dict_load_the_same_spec(tmp_path):
    data = spec_with(roles=[{**WORKER, "env": {"STEPS": 10, "DEBUG": True}, "resources": {"memory": "512Mi"}}])
    (tmp_path / "job.json").write_text(json.dumps(data))
    import yaml

    (tmp_path / "job.yaml").write_text(yaml.safe_dump(data))
    from_json, from_yaml, from_dict = (load_spec(tmp_path / "job.json"), load_spec(tmp_path / "job.yaml"),
                                       load_spec(data))
    assert from_json == from_yaml == from_dict
    assert from_dict.roles[0].env == {"STEPS": "10", "DEBUG": "true"}
    assert from_dict.roles[0].resources.memory == 512 * 2**20
    # A dumped spec loads back to an equal spec (the AM reads what the client wrote).
    assert JobSpec.model_validate_json(from_dict.to_json()) == from_dict


def test_relative_files_resolve_against_the_spec_directory(tmp_path):
    (tmp_path / "train.py").write_text("")
    (tmp_path / "job.yaml").write_text("name: j\nroles: [{name: worker, command: x, files: [train.py]}]\n")
    assert load_spec(tmp_path / "job.yaml").roles[0].files == [str(tmp_path / "train.py")]


def test_unreadable_or_malformed_files_are_spec_errors(tmp_path):
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match="not valid yaml"):
        load_spec(tmp_path / "bad.yaml")
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "missing.yaml")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(SpecError, match="must hold a mapping"):
        load_spec(tmp_path / "list.json")


def test_json_schema_describes_the_fields():
    schema = JobSpec.json_schema()
    role = schema["$defs"]["Role"]["properties"]
    assert {"replicas", "min_replicas", "failover", "framework", "ports"} <= set(role)
    assert "additionalProperties" in schema["$defs"]["Role"] and not schema["$defs"]["Role"]["additionalProperties"]


@pytest.mark.parametrize("text,expected", [("2Gi", 2 * 2**30), ("512Mi", 512 * 2**20), ("1G", 10**9),
                                           ("1.5GiB", int(1.5 * 2**30)), ("100k", 100_000), ("100B", 100)])
def test_memory_units(text, expected):
    assert parse_memory(text) == expected


def test_the_schema_says_every_size_needs_a_unit():
    schema = JobSpec.json_schema()["$defs"]
    sizes = [schema["Resources"]["properties"]["memory"], schema["InputSpec"]["properties"]["task_size"],
             schema["YarnBackend"]["properties"]["am_memory"]]
    for size in sizes:
        assert size["type"] == "string" and "A bare number is refused" in size["description"]
        assert not re.match(size["pattern"], "4096") and re.match(size["pattern"], size["default"])


@pytest.mark.parametrize("text,expected", [(5, 5.0), ("500ms", 0.5), ("30s", 30.0), ("2m", 120.0), ("1h", 3600.0)])
def test_durations(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("policy,ps,expected", [
    ("ordered", {}, {"ps": "ports", "chief": "ports", "worker": "spawned"}),  # roles before the last are waited on
    ("ordered", {"ports": 0}, {"ps": "spawned", "chief": "ports", "worker": "spawned"}),  # nothing to probe
    ("ordered", {"readiness": {"probe": "file"}}, {"ps": "file", "chief": "ports", "worker": "spawned"}),
    ("gang", {}, {"ps": "spawned", "chief": "spawned", "worker": "spawned"}),  # nobody waits on a role
])
def test_auto_readiness_probes_the_ports_of_roles_an_ordered_start_waits_on(policy, ps, expected):
    roles = [{"name": "ps", "command": "x", **ps}, {"name": "chief", "command": "x"}, WORKER]
    spec = JobSpec.from_dict(spec_with(roles=roles, scheduling={"policy": policy, "start_timeout": "2m"}))
    assert {role.name: spec.readiness_probe(role.name) for role in spec.roles} == expected
    assert spec.readiness_timeout("ps") == 120.0


def test_preemption_signals_are_named_as_the_executor_reads_them():
    spec = JobSpec.from_dict(spec_with(roles=[{**WORKER, "preemption": {"signal": "usr1", "grace": "30s"}}]))
    assert spec.roles[0].preemption.signal == "SIGUSR1"
    assert spec.roles[0].preemption.grace == 30.0


def test_a_syntax_error_names_the_file_line_and_column(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: j\nroles:\n  - name: worker\n    command: [python\n    replicas: 2\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    [problem] = info.value.problems
    # Where yaml found it (line 5, column 13, 1-based: the colon after `replicas`), and the construct it was in.
    assert problem == (f"{path}:5:13: not valid yaml: expected ',' or ']', but got ':' "
                       f"(while parsing a flow sequence started at 4:14)")
    (tmp_path / "bell.yaml").write_text("name: j\x07\n")  # a reader error: no line, a position
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "bell.yaml")
    assert info.value.problems == [f"{tmp_path / 'bell.yaml'}: not valid yaml: unacceptable character #x0007: "
                                   f"special characters are not allowed in \"{tmp_path / 'bell.yaml'}\", position 7"]
    (tmp_path / "job.json").write_text('{"name": "j",\n "roles" []}')
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "job.json")
    assert info.value.problems == [f"{tmp_path / 'job.json'}:2:10: not valid json: Expecting ':' delimiter"]


UNKNOWN_FIELDS = [
    (spec_with(roles=[{**WORKER, "replica": 2}]), "roles[0].replica: unknown field, got 2; did you mean 'replicas'?"),
    (spec_with(roles=[{**WORKER, "resource": {"cpu": 2}}]),
     "roles[0].resource: unknown field; did you mean 'resources'?"),
    (spec_with(roles=[{**WORKER, "failover": {"max_failure_per_index": 1}}]),
     "roles[0].failover.max_failure_per_index: unknown field, got 1; did you mean 'max_failures_per_index'?"),
    (spec_with(am={"heartbeat_intervall": 1}),
     "am.heartbeat_intervall: unknown field, got 1; did you mean 'heartbeat_interval'?"),
    (spec_with(backend={"type": "local", "gpu": [0]}), "backend.gpu: unknown field; did you mean 'gpus'?"),
    (spec_with(roles=[{**WORKER, "consumes_input": True}],
               input={"sources": [{"name": "c", "path": "/d", "succes_marker": "_DONE"}]}),
     "input.sources[0].succes_marker: unknown field, got '_DONE'; did you mean 'success_marker'?"),
    (spec_with(nmae="job"), "nmae: unknown field, got 'job'; did you mean 'name'?"),
    # Nothing near it: no guess.
    (spec_with(roles=[{**WORKER, "colour": "red"}]), "roles[0].colour: unknown field, got 'red'"),
]


@pytest.mark.parametrize("data,expected", UNKNOWN_FIELDS, ids=[e.split(":")[0] for _, e in UNKNOWN_FIELDS])
def test_an_unknown_field_suggests_the_nearest_known_one(data, expected):
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict(data)
    assert expected in info.value.problems, info.value.problems
