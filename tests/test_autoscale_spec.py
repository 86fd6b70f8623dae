"""Role.autoscale: what the spec refuses, with the field and the value, and what it keeps."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from primus_runtime.spec import JobSpec, SpecError

POLICY = {"min_replicas": 1, "max_replicas": 4, "target_queued": "64Mi"}
FILES = {"sources": [{"name": "clicks", "path": "/data/clicks/"}]}


def spec_with(policy: dict[str, Any] | None = None, input_section: dict[str, Any] | None = None,
              **role: Any) -> dict[str, Any]:
    worker = {"name": "worker", "command": "python train.py", "replicas": 2, "consumes_input": True,
              "autoscale": {**POLICY, **(policy or {})}, **role}
    return {"name": "job", "roles": [worker], "input": copy.deepcopy(input_section or FILES)}


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as caught:
        JobSpec.from_dict(data)
    return caught.value.problems


def test_a_policy_is_kept_with_its_defaults_and_dumps_back():
    spec = JobSpec.from_dict(spec_with())
    policy = spec.roles[0].autoscale
    assert policy is not None and policy.target == "target_queued" and policy.target_queued == 64 * 2**20
    assert (policy.cooldown, policy.interval) == (60.0, 5.0)
    dumped = spec.to_dict()["roles"][0]["autoscale"]
    assert dumped["target_queued"] == "64Mi" and JobSpec.from_dict(spec.to_dict()) == spec


def test_every_start_policy_may_autoscale():
    # Executors added after the start barrier start as they register, gang included.
    for policy in ("gang", "ordered", "dynamic"):
        JobSpec.from_dict({**spec_with(), "scheduling": {"policy": policy}})


BAD = [
    (spec_with({"target_catchup": "30s"}), "roles[0].autoscale: give exactly one of target_lag (Kafka), "
     "target_queued (files) or target_catchup, got target_queued: '64Mi', target_catchup: 30.0"),
    (spec_with({"target_queued": None}), "roles[0].autoscale: give exactly one of target_lag (Kafka), "
     "target_queued (files) or target_catchup, got none"),
    (spec_with({"min_replicas": 0}), "roles[0].autoscale.min_replicas: must be >= 1, got 0"),
    (spec_with({"min_replicas": 3, "max_replicas": 2}, replicas=2),
     "roles[0].autoscale.max_replicas: must be >= min_replicas (3), got 2"),
    (spec_with(replicas=5), "roles[0].replicas: must be within autoscale's bounds 1..4, got 5"),
    (spec_with({"min_replicas": 3}, replicas=2), "roles[0].replicas: must be within autoscale's bounds 3..4, got 2"),
    (spec_with({"target_lag": 0, "target_queued": None}), "roles[0].autoscale.target_lag: must be > 0, got 0"),
    (spec_with({"target_queued": 1000}), "roles[0].autoscale.target_queued: give a unit"),
    (spec_with({"cooldown": "soon"}), "roles[0].autoscale.cooldown: must be a duration"),
    (spec_with({"interval": 0}), "roles[0].autoscale.interval: must be > 0, got 0"),
    (spec_with({"scale_to_zero": True}), "roles[0].autoscale.scale_to_zero: unknown field, got True"),
    (spec_with(framework="pytorch"),
     "roles[0].autoscale: a pytorch role cannot be scaled (WORLD_SIZE is fixed at start), got framework: pytorch"),
    (spec_with({"target_lag": 10_000, "target_queued": None}),
     "roles[0].autoscale.target_lag: is Kafka consumer lag and the input has no kafka source (files: "
     "target_queued or target_catchup), got 10000"),
]


@pytest.mark.parametrize(("data", "expected"), BAD, ids=[e[:60] for _, e in BAD])
def test_a_bad_policy_is_refused_naming_the_field_and_value(data, expected):
    assert any(p.startswith(expected) for p in problems(data)), problems(data)


def test_a_role_that_does_not_consume_the_input_cannot_autoscale():
    data = spec_with(consumes_input=False)
    data["roles"].append({"name": "reader", "command": "x", "consumes_input": True})
    assert problems(data) == ["roles[0].autoscale: sizes the role on the input's backlog, so the role needs "
                              "consumes_input: true, got false"]


def test_two_consuming_roles_share_one_backlog_so_neither_autoscales():
    data = spec_with()
    data["roles"].append({"name": "other", "command": "x", "consumes_input": True})
    assert problems(data) == ["roles[0].autoscale: the backlog and its rate are the whole input's, shared by the "
                              "roles that consume it, so autoscaling needs a single consuming role, got "
                              "['worker', 'other']"]


def test_catch_up_time_fits_a_file_input():
    policy = JobSpec.from_dict(spec_with({"target_queued": None, "target_catchup": "2m"})).roles[0].autoscale
    assert policy is not None and policy.target == "target_catchup" and policy.target_catchup == 120.0


def test_kafka_input_takes_lag_or_catch_up_but_not_queued_bytes():
    kafka = {"kafka": {"bootstrap_servers": "broker:9092", "topics": ["clicks"]}}
    for target in ({"target_lag": 10_000}, {"target_catchup": "1m"}):
        JobSpec.from_dict(spec_with({"target_queued": None, **target}, input_section=kafka))
    assert problems(spec_with(input_section=kafka)) == [
        "roles[0].autoscale.target_queued: is bytes of file tasks and the input has no file sources (Kafka: "
        "target_lag or target_catchup), got '64Mi'"]
