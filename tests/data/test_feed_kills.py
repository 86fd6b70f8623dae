"""A trainer that reads its stdin itself (no data.reader) killed while the Feeder feeds it: what the
executor reports at its death must lose nothing, and feed again at most what the trainer's own read
buffer held (8 KiB for ``sys.stdin``), not a pipe's worth. Real trainer processes, a real pipe."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from primus_runtime.data.records import write_records
from primus_runtime.executor import feed
from primus_runtime.executor.feed import Feeder

GOAL = 8 * 1024  # sys.stdin takes 8 KiB from the pipe at a time: what a kill may feed again
RECORD = 21  # bytes per record, newline (or 4-byte length) included

# Appends each record it is done with to OUT (one write per record: a kill never splits one), at a
# steady pace so that the feed is always ahead of it.
LINES_TRAINER = """
import os, sys, time
out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
pause = float(sys.argv[2])
for n, line in enumerate(sys.stdin):
    os.write(out, line.encode())
    if n % 20 == 0:
        time.sleep(pause)
"""
PREFIXED_TRAINER = """
import os, struct, sys, time
out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
pause = float(sys.argv[2])
stdin = sys.stdin.buffer
n = 0
while header := stdin.read(4):
    os.write(out, stdin.read(struct.unpack(">I", header)[0]) + b"\\n")
    n += 1
    if n % 20 == 0:
        time.sleep(pause)
"""


def numbered(count: int, width: int) -> list[bytes]:
    return [f"r{i:0{width - 1}d}".encode() for i in range(count)]


def write_input(path: Path, fmt: str, records: list[bytes]) -> dict[str, Any]:
    """The file and its one task (text: the spliced fast path; gzip text and length-delimited records
    come through read_framed as bytes)."""
    compression = "gzip" if path.suffix == ".gz" else "none"
    opener = gzip.open if compression == "gzip" else open
    with opener(path, "wb") as f:
        write_records(f, records, fmt)
    return {"task_id": "t0", "url": str(path), "format": fmt, "compression": compression, "start": 0,
            "end": path.stat().st_size, "skip": 0}


class Trainer:
    """A trainer process fed by a real Feeder; a small loop plays the AM (one task, then the input's end)."""

    def __init__(self, tmp_path: Path, code: str, pause: float):
        self.out = tmp_path / "processed"
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(self.out), str(pause)],
                                     stdin=subprocess.PIPE, start_new_session=True)
        assert self.proc.stdin is not None
        self.feeder = Feeder(self.proc.stdin, max_tasks=1, reader_group=self.proc.pid)
        self.done: list[str] = []
        self.positions: dict[str, int] = {}

    def heartbeat(self, task: dict[str, Any] | None = None) -> None:
        report = self.feeder.report()
        self.done += report["done"]
        self.positions.update({t: p["records"] for t, p in report["progress"].items()})
        reply: dict[str, Any] = {"tasks": [task]} if task else {"data_exhausted": not report["held"]}
        self.feeder.reported(report, reply)

    def processed(self) -> list[bytes]:
        return self.out.read_bytes().split(b"\n")[:-1] if self.out.exists() else []

    def run_until(self, predicate, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, "timed out"
            assert self.proc.poll() is None, "the trainer ended early"
            self.heartbeat()
            time.sleep(0.01)

    def kill(self) -> dict[str, Any]:
        """SIGKILL, then the executor's last report (taken at the trainer's death, as main.py does)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        report = self.feeder.report(final=True)
        self.done += report["done"]
        self.positions.update({t: p["records"] for t, p in report["progress"].items()})
        self.feeder.stop()
        self.feeder.close()
        return report

    def fed_again(self, task_id: str) -> int:
        """Where the AM resumes the task: nothing left once reported done, else the last position."""
        return sys.maxsize if task_id in self.done else self.positions.get(task_id, 0)


@pytest.mark.parametrize("fmt,suffix,code", [
    ("text", ".txt", LINES_TRAINER),  # ranges spliced from the file into the pipe
    ("text", ".txt.gz", LINES_TRAINER),  # decompressed blocks written from Python
    ("length_delimited", ".ld", PREFIXED_TRAINER),  # 4-byte length-prefixed records
])
def test_a_killed_stdin_trainer_is_fed_again_at_most_its_read_buffer(tmp_path, fmt, suffix, code):
    width = RECORD - (1 if fmt == "text" else 4)
    records = numbered(150_000, width)  # 3 MiB fed: more than the pipe (1 MiB) and the read-ahead hold
    task = write_input(tmp_path / f"input{suffix}", fmt, records)
    trainer = Trainer(tmp_path, code, pause=0.0005)
    try:
        trainer.heartbeat(task)
        trainer.run_until(lambda: len(trainer.processed()) >= 40_000)
        trainer.kill()
    finally:
        trainer.proc.kill()
    processed = trainer.processed()
    assert processed == records[:len(processed)]  # in order, each once
    resume = trainer.fed_again("t0")
    assert resume <= len(processed), "records the trainer never processed would not be fed again"
    again = (len(processed) - resume) * RECORD
    assert again <= GOAL + RECORD, f"{len(processed) - resume} records ({again} bytes) fed again after the kill"


def test_a_trainer_killed_after_eof_loses_none_of_its_last_pipe_full(tmp_path):
    """The end of the input: the trainer takes its last bytes long after they were written, and still
    processes them when its tasks are reported done and its stdin closed (EOF). The pipe having been
    empty for QUIET_SECONDS since the last *write* does not mean that it is done with them."""
    records = [line[:99] for line in numbered(650, 99)]  # 65 KB of 100-byte lines: written at once,
    task = write_input(tmp_path / "input.txt", "text", records)  # taken 8 KiB at a time, 0.8 s apart
    trainer = Trainer(tmp_path, LINES_TRAINER.replace("n % 20 == 0", "True"), pause=0.01)
    try:
        with mock.patch.object(feed, "QUIET_SECONDS", 3.0):
            trainer.heartbeat(task)
            # Until the task is reported done (the pipe is closed right after), then at once SIGKILL.
            trainer.run_until(lambda: trainer.done or trainer.feeder.closed_at is not None)
            trainer.kill()
    finally:
        trainer.proc.kill()
    processed = trainer.processed()
    assert processed == records[:len(processed)]
    assert trainer.fed_again("t0") <= len(processed) or len(processed) == len(records), \
        f"{len(records) - len(processed)} records never processed, and the task counts as done"


def test_the_read_end_kept_after_eof_still_says_what_is_unread_and_the_trainer_still_sees_eof(tmp_path):
    """Exactly-once closes stdin once everything held is written, unread or not: the executor keeps a
    read end (close-on-exec, never read) so the pipe can still be asked, and the trainer reads all of
    it, then EOF."""
    records = numbered(5_000, 20)
    task = write_input(tmp_path / "input.txt", "text", records)
    go = tmp_path / "go"
    code = ("import os, sys, time\n"
            f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
            "open(sys.argv[1], 'wb').write(sys.stdin.buffer.read())\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "out")], stdin=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdin is not None
    feeder = Feeder(proc.stdin, max_tasks=1, reader_group=proc.pid, commit_file=str(tmp_path / "commits"))
    try:
        feeder.reported(feeder.report(), {"tasks": [task]})
        deadline = time.monotonic() + 30
        while feeder.closed_at is None or feeder._read_end is None:
            assert time.monotonic() < deadline
            feeder.reported(feeder.report(), {"data_exhausted": True})
            time.sleep(0.01)
        size = task["end"]
        wait = time.monotonic() + 30
        while feeder._pipe_state() != (size, size):  # the writer closes the pipe right after its last write
            assert time.monotonic() < wait
            time.sleep(0.01)
        assert not os.get_inheritable(feeder._read_end)
        go.touch()
        assert proc.wait(30) == 0  # EOF came: the read end held here is no write end
        assert (tmp_path / "out").read_bytes() == b"".join(r + b"\n" for r in records)
        assert feeder._pipe_state() == (size, 0)
    finally:
        proc.kill()
        feeder.stop()
        feeder.close()
