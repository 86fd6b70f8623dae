"""The executor's Feeder on its own: what reaches the pipe, and the positions it reports."""

from __future__ import annotations

import io
import os
import random
import threading
import time
from pathlib import Path
from unittest import mock

import pytest

from primus_runtime.data.formats import Split
from primus_runtime.data.records import plan_splits, read_framed
from primus_runtime.executor import feed
from primus_runtime.executor.feed import Feeder


def _text(path: Path) -> bytes:
    rng = random.Random(7)
    lines = [b"x" * rng.randint(0, 300) for _ in range(3000)]
    lines[5] = b"crlf\r"  # fed as "crlf\n"
    lines[6] = b"y" * 200_000  # longer than a range
    data = b"\n".join(lines) + b"\nlast line without newline"
    path.write_bytes(data)
    return data


def _feed(path: Path, fmt: str, splits: list[Split], skips: list[int]) -> tuple[bytes, dict]:
    """Everything the Feeder writes for these tasks, and its last report."""
    read_fd, write_fd = os.pipe()
    got: list[bytes] = []
    drain = threading.Thread(target=lambda: got.extend(iter(lambda: os.read(read_fd, 1 << 16), b"")))
    drain.start()
    feeder = Feeder(open(write_fd, "wb", buffering=0), max_tasks=len(splits))
    tasks = [{"task_id": f"t{i}", "url": path.as_uri(), "format": fmt, "compression": "none",
              "start": s.start, "end": s.end, "skip": skip} for i, (s, skip) in enumerate(zip(splits, skips, strict=True))]
    report = feeder.report()
    feeder.reported(report, {"tasks": tasks})
    deadline = time.monotonic() + 30
    last: dict = {}
    while not feeder.closed:
        assert time.monotonic() < deadline
        with mock.patch.object(feed, "QUIET_SECONDS", 0.05):
            report = feeder.report()
        assert not report["failed"], report["failed"]
        last.update(report["progress"])
        feeder.reported(report, {"data_exhausted": True})
        time.sleep(0.01)
    drain.join(10)
    os.close(read_fd)
    return b"".join(got), last


@pytest.mark.parametrize("splice", [True, False])
@pytest.mark.parametrize("fmt", ["text", "raw"])
def test_fed_bytes_and_positions_match_read_framed(tmp_path, fmt, splice):
    path = tmp_path / "input"
    data = _text(path)
    splits = plan_splits(lambda: open(path, "rb"), len(data), fmt, "none", 100_000)
    assert len(splits) > 3
    skips = [0, 17, 0] + [1] * (len(splits) - 3)
    expected = [list(read_framed(io.BytesIO(data), fmt, "none", s.start, s.end, skip))
                for s, skip in zip(splits, skips, strict=True)]
    with mock.patch.object(Feeder, "__init__", _no_splice(Feeder.__init__) if not splice else Feeder.__init__):
        fed, progress = _feed(path, fmt, splits, skips)
    assert fed == b"".join(block for blocks in expected for block, _ in blocks)
    for i, blocks in enumerate(expected):
        assert progress[f"t{i}"]["records"] == (blocks[-1][1] if blocks else skips[i])
        assert progress[f"t{i}"]["bytes"] == sum(len(block) for block, _ in blocks)


def _no_splice(init):
    def patched(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._splice = False
    return patched
