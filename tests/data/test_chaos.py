"""The issue-10 chaos repro, small: trainers SIGKILLed at random while they read (bench/trainer_kills.py).

Before the fix each kill charged an attempt to every task the trainer held (5-6 of them), so a few
kills failed the job blaming a healthy file, and each kill fed ~6,000 records again (the 128 KiB
pipe allowance plus a heartbeat of progress). Plain stdin trainers (no data.reader) were fed ~6,000
records again per kill until the executor asked the pipe how much was unread at their death: now
at most their read buffer (8 KiB)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "trainer_kills.py"


def test_random_trainer_kills_lose_nothing_and_feed_again_only_what_the_trainer_held(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "RECORDS": "60000", "KILLS": "5", "INTERVAL": "1.5", "JSON": "1",
                               "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    baseline, at_least_once, plain_stdin, exactly_once = runs
    assert baseline["state"] == "succeeded" and baseline["lost"] == 0 and baseline["duplicates"] == 0
    for run in (at_least_once, plain_stdin, exactly_once):
        assert run["kills"] >= 3, run  # the trainers were really killed, while reading
        assert run["state"] == "succeeded", run  # no healthy task blamed for a killed trainer
        assert run["lost"] == 0, run
    # A reader.records() trainer is done with every record before the one in hand.
    assert at_least_once["duplicates"] <= at_least_once["kills"], at_least_once
    # A plain `for line in sys.stdin` trainer: at most its 8 KiB read buffer of 21-byte records per kill.
    assert plain_stdin["duplicates"] <= plain_stdin["kills"] * (8192 // 21 + 1), plain_stdin
    assert exactly_once["duplicates"] == 0, exactly_once
    for run in runs:
        assert run["records"] == 60000, run  # every record counted: nothing lost, the duplicates above
        assert run["restarts"] == run["kills"], run  # each kill restarted its trainer once; nothing else failed
    # The summary the bench prints (docs/performance.md's figure) says what the runs measured.
    per_kill = re.search(r"^plain stdin trainers: (\d+) records = ([\d.]+) KiB fed again per kill "
                         r"\(goal <= 8 KiB\)$", proc.stdout, re.MULTILINE)
    assert per_kill, proc.stdout
    assert int(per_kill[1]) == round(plain_stdin["duplicates_per_kill"]), (per_kill[0], plain_stdin)
    assert float(per_kill[2]) <= 8192 * 1.01 / 1024, per_kill[0]  # its 8 KiB read buffer (a record past it)
    ratio = re.search(r"plain stdin against the 8 KiB goal: ([\d.]+)x$", proc.stdout.strip().splitlines()[-1])
    assert ratio and abs(float(ratio[1]) - float(per_kill[2]) / 8) < 0.01, proc.stdout
