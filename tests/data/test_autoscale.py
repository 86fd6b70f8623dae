"""Role.autoscale end to end: a real AM sizes a consuming role on its file input's queued bytes."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from data.test_data_plane import all_lines, data_spec, write_day
from primus_runtime.models import StatusDocument


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "out"
    out.mkdir()
    return tmp_path / "data", out


def autoscale_events(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in status["events"] if e["subject"] == "role/worker" and e["actor"] == "autoscaler"]


# Per target: how it words the backlog for a change from {b} to {t} replicas (filled in).
LOAD = {
    "target_queued": (r"backlog [\d.]+ K?i?B queued > {b} x 96.0 KiB per replica",
                      r"backlog [\d.]+ K?i?B queued <= {t} x 96.0 KiB per replica"),
    "target_catchup": (r"backlog [\d.]+ K?i?B queued drains in [\d,]+s at {b} x [\d.]+ K?i?B/s > 4s",
                       r"backlog [\d.]+ K?i?B queued drains in [\d,]+s at {t} x [\d.]+ K?i?B/s <= 4s"),
}


def reason_pattern(target: str, before: int, to: int) -> str:
    up, down = LOAD[target]
    if to > before:
        return up.replace("{b}", str(before)) + rf": {before} -> {to}( \((wants \d+, )?max 3\))?"
    # Every partition is listed from the start: the backlog only falls, so no wait before going down.
    return (f"({down.replace('{t}', str(to))}|no backlog), the input finishing \\(every partition listed\\): "
            rf"{before} -> {to}( \(min 1\))?")


@pytest.mark.parametrize(("target", "value"), [("target_queued", "96Ki"), ("target_catchup", "4s")])
def test_a_slow_consumer_is_scaled_up_to_max_on_its_backlog_and_down_as_it_drains(client, dirs, target, value):
    data, out = dirs
    # About 390 KB in 16 KiB tasks; each trainer reads at most 2,000 lines (26 KB) a second: one trainer
    # would take 15 s, 4 x 96 KiB; 3 trainers are the most allowed.
    expected = [line for day in (1, 2) for line in write_day(data, day, files=3, lines=5000)]
    spec = data_spec(out, data, replicas=1, env={"SLEEP_EVERY": "200", "SLEEP": "0.1"}, task_size="16Ki",
                     time_range={"start": "2026-12-01", "end": "2026-12-02"})
    policy = {"min_replicas": 1, "max_replicas": 3, target: value, "cooldown": "2s", "interval": "0.5s"}
    spec["roles"][0]["autoscale"] = policy
    app = client.submit(spec)
    status = client.wait(app, timeout=90)
    assert status.job.state == "succeeded", status.job

    # Every record read, none lost to a scale-down; a stopped trainer may see the record it was on again.
    lines = all_lines(out)
    assert set(lines) == set(expected)
    status = client.cluster("local").final_status(app)  # every event, not only the API's latest
    stopped = [e for e in status["events"] if e["to_state"] == "stopped" and "scaled down" in e["reason"]]
    repeated = sum(n - 1 for n in Counter(lines).values())
    assert repeated <= len(stopped), f"{repeated} records read twice by {len(stopped)} stopped trainers"

    # Up to max while the backlog is large, then down as it drains, each change with its reason.
    events = autoscale_events(status)
    sizes = [(int(e["from_state"]), int(e["to_state"])) for e in events]
    assert sizes[0] == (1, 3) and any(to < before for before, to in sizes[1:]), sizes
    for event, (before, to) in zip(events, sizes, strict=True):
        assert re.fullmatch(reason_pattern(target, before, to), event["reason"]), event
    assert len(stopped) == sum(before - to for before, to in sizes if to < before)

    # The role's status shows the policy and the last change it made.
    role = status["roles"][0]
    shown = {"target_queued": "96Ki", "target_catchup": 4.0}[target]
    assert (role["autoscale"]["max_replicas"], role["autoscale"][target]) == (3, shown), role["autoscale"]
    last = role["autoscale"]["last_decision"]
    assert (last["from_replicas"], last["to_replicas"], last["reason"]) == (
        int(events[-1]["from_state"]), int(events[-1]["to_state"]), events[-1]["reason"])
    StatusDocument.model_validate(status)
