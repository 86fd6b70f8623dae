"""The shipped example jobs run end to end on the local backend."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from conftest import read_log
from primus_runtime.spec import load_spec

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TF_PYTHON = Path(__file__).resolve().parents[1] / ".venv-tf" / "bin" / "python"


def test_ps_worker_example_trains_through_the_ps(client):
    app = client.submit(EXAMPLES / "ps_worker" / "job.yaml")
    status = client.wait(app, timeout=120)
    assert status.job.state == "succeeded", status.job
    for index in range(2):
        log = read_log(client, app, "worker", index)
        final, untrained = map(float, re.search(r"final loss ([\d.]+) \(untrained model: ([\d.]+)\)", log).groups())
        assert final < untrained / 10
    # The ps served the workers' pushes on the ports Primus reserved, then stopped on SIGTERM.
    port = next(e for e in status.executors if e.id == "ps-0").ports[0]
    ps_log = read_log(client, app, "ps", 0)
    assert f"serving shard 0 of 2 on port {port}" in ps_log
    pushes = int(re.search(r"SIGTERM: stopping after (\d+) pushes", ps_log).group(1))
    assert pushes >= 2 * 200  # every step of both workers


def test_data_wordcount_example_reads_every_line_once(client):
    data = EXAMPLES / "data_wordcount" / "data"
    expected = sorted(line.split()[0] for f in sorted(data.glob("*/part-*.txt")) for line in f.read_text().splitlines())
    app = client.submit(EXAMPLES / "data_wordcount" / "job.yaml")
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded", status.job
    summaries = [json.loads(read_log(client, app, "worker", index).strip().splitlines()[-1]) for index in range(2)]
    assert sorted(i for s in summaries for i in s["ids"]) == expected
    assert status.data.watermark == "2026-12-03" and status.data.progress == 1.0


@pytest.mark.framework
def test_tensorflow_multiworker_example(client, monkeypatch):
    if not TF_PYTHON.exists():
        if os.environ.get("CI"):
            pytest.fail("CI must install TensorFlow: scripts/install-framework.sh did not create .venv-tf")
        pytest.skip("TensorFlow is not installed: run scripts/install-framework.sh (creates .venv-tf)")
    monkeypatch.setenv("TF_PYTHON", str(TF_PYTHON))
    spec = load_spec(EXAMPLES / "tensorflow" / "job.yaml")
    app = client.submit(spec)
    status = client.wait(app, timeout=240)
    logs = read_log(client, app, "worker", 0) + read_log(client, app, "worker", 0, "stderr")
    assert status.job.state == "succeeded", (status.job, logs[-2000:])
    assert "final loss" in logs
