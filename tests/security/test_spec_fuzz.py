"""Hypothesis mutates valid job specs (wrong types, negatives, huge numbers, unknown keys, empty
lists and strings, unicode, None, removed fields) and feeds them to the user-facing validator
(``JobSpec.from_dict``, behind ``primus submit`` and ``primus validate``): it either accepts the spec
or raises SpecError, and each line of the error starts with the path of the field it is about."""

from __future__ import annotations

import copy
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from primus_runtime.spec import JobSpec, SpecError

VALID = [
    {"name": "plain", "roles": [{"name": "worker", "command": "python train.py", "replicas": 2}]},
    {
        "name": "full",
        "am": {"heartbeat_interval": "1s", "heartbeat_timeout": "30s", "shutdown_grace": 5, "max_attempts": 2},
        "scheduling": {"policy": "ordered", "order": ["ps", "worker"], "start_timeout": "10m"},
        "roles": [
            {"name": "ps", "command": ["python", "ps.py"], "replicas": 1, "ports": 2,
             "resources": {"cpu": 2, "memory": "4Gi", "gpu": 0}, "env": {"MODE": "ps"},
             "failover": {"restart": "on_failure", "max_failures_per_index": 3}},
            {"name": "worker", "command": "python worker.py", "replicas": 4, "min_replicas": 2,
             "consumes_input": True, "success_percent": 50, "files": ["a.py"],
             "readiness": {"probe": "ports", "timeout": "1m"}, "framework": "tensorflow",
             "autoscale": {"min_replicas": 2, "max_replicas": 8, "target_queued": "1Gi", "cooldown": "2m"}},
        ],
        "input": {"sources": [{"name": "days", "path": "/data/{{YYYY}}{{MM}}{{DD}}/", "format": "text"}],
                  "time_range": {"start": "2024-01-01", "end": "2024-01-03"},
                  "task_size": "64MiB", "max_tasks_per_executor": 2},
        "tags": {"team": "ml"},
    },
]

for _spec in VALID:  # the seeds themselves are valid: each mutation starts from a spec that runs
    JobSpec.from_dict(_spec)

TOP_LEVEL = set(JobSpec.model_fields)
KEYS = st.text(st.characters(categories=["L", "N"], include_characters="_-"), min_size=1, max_size=12)
BAD_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.just(-1), st.just(0), st.just(2**64),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20), st.just(""), st.just("\u00e9\u4e2d\U0001f600"),
    st.just([]), st.just({}), st.lists(st.integers(), max_size=3), st.dictionaries(KEYS, st.integers(), max_size=2),
    st.just("-5s"), st.just("10xb"), st.just("1e400"), st.just("NaN"),
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON-like value (the root excluded)."""
    out = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        out.append((*prefix, key))
        out.extend(_paths(child, (*prefix, key)))
    return out


@st.composite
def mutated_specs(draw: st.DrawFn) -> dict[str, Any]:
    spec = copy.deepcopy(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(spec)
        if not paths:  # everything was deleted
            break
        path = draw(st.sampled_from(paths))
        parent = spec
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "replace", "replace", "delete", "unknown key"]))
        if action == "replace":
            parent[path[-1]] = draw(BAD_VALUES)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(KEYS)] = draw(BAD_VALUES)
    return spec


# A path: a top-level field, then `.name` or `[index]` steps; then ": " and what is wrong.
_LINE = re.compile(r"^(?P<path>(?P<top>[\w\-]+)(\.[\w\-]+|\[\d+\])*): (?P<what>\S.*)", re.DOTALL)


def _check_names_fields(problems: list[str]) -> None:
    assert problems
    for line in problems:
        match = _LINE.match(line)
        assert match, f"error line names no field path: {line!r}"
        # An unknown key is named by itself; any other path starts at a field of the spec.
        assert match["top"] in TOP_LEVEL or match["what"].startswith("unknown field"), line


@settings(max_examples=600, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(spec=mutated_specs())
def test_a_mutated_spec_is_accepted_or_refused_naming_each_field(spec: dict[str, Any]) -> None:
    try:
        JobSpec.from_dict(spec)
    except SpecError as exc:
        _check_names_fields(exc.problems)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(value=BAD_VALUES)
def test_a_spec_that_is_not_a_mapping_or_lacks_everything_is_refused_naming_the_field(value: Any) -> None:
    try:
        JobSpec.from_dict({"roles": value})
    except SpecError as exc:
        _check_names_fields(exc.problems)


def test_an_unknown_key_that_starts_like_a_type_name_is_named() -> None:
    """Keys such as `strategy` once vanished from the path (taken for pydantic's `str` union label)."""
    spec = copy.deepcopy(VALID[0])
    spec["strategy"] = "fast"
    spec["roles"][0]["stride"] = 2
    spec["roles"][0]["env"] = {"strict": ["1"]}
    try:
        JobSpec.from_dict(spec)
    except SpecError as exc:
        assert sorted(exc.problems) == ["roles[0].env.strict: must be a string, got ['1']",
                                        "roles[0].stride: unknown field, got 2", "strategy: unknown field, got 'fast'"]
    else:
        raise AssertionError("the spec was accepted")
