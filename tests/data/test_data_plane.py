"""The data plane end to end: real AM, executors and trainers on the local backend.

The trainer (tests/data/consumer.py) appends every line it reads to a file of its own,
so a test sees exactly what reached trainers, duplicates included.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import make_spec

CONSUMER = str(Path(__file__).with_name("consumer.py"))
DAILY = "/{{YYYY}}{{MM}}{{DD}}/"


def write_day(data: Path, day: int, files: int = 2, lines: int = 300, marker: bool = True,
              prefix: str = "") -> list[str]:
    """Day ``day`` of December 2026: ``files`` text files of ``lines`` numbered lines; the lines."""
    directory = data / f"202612{day:02d}"
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for f in range(files):
        rows = [f"{prefix}d{day:02d}-f{f}-{i:05d}" for i in range(lines)]
        (directory / f"part-{f}.txt").write_text("\n".join(rows) + "\n")
        written += rows
    (directory / ".hidden").write_text("never read\n")
    (directory / "_temporary").mkdir(exist_ok=True)
    if marker:
        (directory / "_SUCCESS").write_text("")
    return written


def consumed(out: Path) -> dict[str, list[str]]:
    """File name -> the lines that trainer read."""
    return {f.name: f.read_text().split() for f in sorted(out.iterdir())}


def all_lines(out: Path) -> list[str]:
    return [line for lines in consumed(out).values() for line in lines]


def data_spec(out: Path, data: Path, replicas: int = 2, env: dict[str, str] | None = None,
              **input_section: Any) -> dict[str, Any]:
    section: dict[str, Any] = {"sources": [{"name": "clicks", "path": str(data) + DAILY}],
                               "time_range": {"start": "2026-12-01", "end": "2026-12-03"},
                               "task_size": 2000, "poll_interval": 0.2}
    section.update(input_section)
    return make_spec([{"name": "worker", "replicas": replicas, "consumes_input": True,
                       "command": [sys.executable, CONSUMER], "env": {"OUT_DIR": str(out), **(env or {})}}],
                     input=section)


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "out"
    out.mkdir()
    return tmp_path / "data", out


def test_every_line_is_consumed_once_in_partition_order(client, dirs):
    data, out = dirs
    expected = [line for day in (1, 2, 3) for line in write_day(data, day)]
    app = client.submit(data_spec(out, data))
    status = client.wait(app, timeout=60)
    assert status["job"]["state"] == "succeeded", status["job"]
    assert sorted(all_lines(out)) == sorted(expected)  # each line exactly once
    for name, lines in consumed(out).items():
        assert lines == sorted(lines), f"{name} read out of partition order"
    info = status["data"]
    assert info["state"] == "succeeded" and info["progress"] == 1.0 and info["watermark"] == "2026-12-03"
    assert info["tasks"]["done"] == info["tasks"]["total"] > 3 and info["records_done"] == len(expected)
    assert info["bytes"]["done"] == info["bytes"]["total"] and info["scan_complete"]
