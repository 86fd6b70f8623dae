"""The data plane reading from the minicluster's HDFS: real AM, executors and trainers (local backend).

The AM scans ``hdfs://`` / ``webhdfs://`` partitions through WebHDFS and hands executors
``webhdfs://`` URLs, which they read with the standard library (``data/webhdfs.py``). The
trainer (tests/data/consumer.py) appends every record it reads to a file of its own, so a
test sees exactly what reached trainers, duplicates included.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import hdfs
import pytest

from conftest import make_spec, wait_for
from primus_runtime.data.journal import HdfsSnapshots
from primus_runtime.data.records import write_records
from primus_runtime.data.webhdfs import WebHDFSFile
from primus_runtime.hadoop import hadoop_user

from .conftest import Minicluster

CONSUMER = str(Path(__file__).resolve().parents[1] / "data" / "consumer.py")
HOURLY = "/{{YYYY}}{{MM}}{{DD}}/{{HH}}"
DAILY = "/{{YYYY}}{{MM}}{{DD}}"


@pytest.fixture
def fs(minicluster: Minicluster) -> hdfs.InsecureClient:
    return hdfs.InsecureClient(minicluster.webhdfs, user=hadoop_user())


@pytest.fixture
def root(fs: hdfs.InsecureClient) -> str:
    """A fresh HDFS directory for the test's input."""
    path = f"/primus-tests/{uuid.uuid4().hex[:12]}"
    fs.makedirs(path)
    yield path
    fs.delete(path, recursive=True)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    directory = tmp_path / "out"
    directory.mkdir()
    return directory


def write_partition(fs: hdfs.InsecureClient, directory: str, tag: str, files: int = 2, lines: int = 300,
                    marker: bool = True) -> list[str]:
    """Text files of numbered lines (plus a hidden file and a _temporary dir never read); the lines."""
    written = []
    for f in range(files):
        rows = [f"{tag}-f{f}-{i:05d}" for i in range(lines)]
        fs.write(f"{directory}/part-{f}.txt", data="\n".join(rows) + "\n", overwrite=True)
        written += rows
    fs.write(f"{directory}/.hidden", data="never read\n", overwrite=True)
    fs.makedirs(f"{directory}/_temporary")
    if marker:
        fs.write(f"{directory}/_SUCCESS", data=b"", overwrite=True)
    return written


def consumed(out: Path) -> dict[str, list[str]]:
    """File name -> the lines that trainer read."""
    return {f.name: f.read_text().splitlines() for f in sorted(out.iterdir())}


def all_lines(out: Path) -> list[str]:
    return [line for lines in consumed(out).values() for line in lines]


def hdfs_spec(out: Path, path: str, replicas: int = 2, env: dict[str, str] | None = None,
              **input_section: Any) -> dict[str, Any]:
    section: dict[str, Any] = {"sources": [{"name": "clicks", "path": path}], "task_size": "2000B",
                               "poll_interval": 0.2}
    section.update(input_section)
    return make_spec([{"name": "worker", "replicas": replicas, "consumes_input": True,
                       "command": [sys.executable, CONSUMER], "env": {"OUT_DIR": str(out), **(env or {})}}],
                     input=section)


def test_hourly_partitions_landing_during_the_run_are_read_once_in_time_order(client, fs, root, out):
    first = write_partition(fs, f"{root}/20261201/22", "h22")
    second = write_partition(fs, f"{root}/20261201/23", "h23")
    third = write_partition(fs, f"{root}/20261202/00", "h24", marker=False)  # files there, no marker yet
    spec = hdfs_spec(out, "hdfs://" + root + HOURLY,
                     time_range={"start": "2026-12-01T22", "end": "2026-12-02T01"})
    app = client.submit(spec)
    info = wait_for(lambda: (d := client.data(app)) and d.watermark == "2026-12-01T23" and d, 60,
                    "the first two hours consumed")
    assert f"{root}/20261202/00/_SUCCESS" in (info.waiting_for or ""), info
    assert sorted(all_lines(out)) == sorted(first + second)  # nothing of the hour without its marker
    fs.write(f"{root}/20261202/00/_SUCCESS", data=b"")
    wait_for(lambda: (d := client.data(app)) is not None and d.watermark == "2026-12-02T00", 60, "hour 00 consumed")
    fourth = write_partition(fs, f"{root}/20261202/01", "h25")  # written after the job started
    status = client.wait(app, timeout=90)
    assert status.job.state == "succeeded", status.job
    lines = all_lines(out)
    assert sorted(lines) == sorted(first + second + third + fourth)  # each record exactly once
    for name, read in consumed(out).items():
        assert read == sorted(read), f"{name} read out of time order"
    data = status.data
    assert data.watermark == "2026-12-02T01" and data.records_done == len(lines)
    assert data.tasks["done"] == data.tasks["total"] > 8


def test_a_trainer_killed_mid_task_resumes_its_hdfs_task_at_the_reported_position(client, fs, root, out):
    big = [f"b{i:07d}" for i in range(80000)]  # 720 KB, one task
    fs.write(f"{root}/20261201/part-0.txt", data="\n".join(big) + "\n")
    fs.write(f"{root}/20261201/_SUCCESS", data=b"")
    # The first trainer dies after 50000 records; from ~20000 on, heartbeats in its pauses report positions.
    spec = hdfs_spec(out, "hdfs://" + root + DAILY, replicas=1, task_size="4Mi", max_task_attempts=5,
                     env={"DIE_AFTER": "50000", "DIE_ON_ATTEMPTS": "0", "SLEEP_EVERY": "5000", "SLEEP": "0.3"},
                     time_range={"start": "2026-12-01", "end": "2026-12-01"})
    spec["roles"][0]["failover"] = {"max_failures_per_index": 3}
    status = client.wait(client.submit(spec), timeout=90)
    assert status.job.state == "succeeded", status.job
    runs = {name.split("-")[2]: lines for name, lines in consumed(out).items()}  # attempt -> lines read
    assert runs["0"] == big[:50000]
    resumed_at = big.index(runs["1"][0])
    assert 0 < resumed_at <= 50000, "the retry did not resume from the reported position"
    assert runs["1"] == big[resumed_at:]  # at-least-once: nothing lost, from there on in order
    assert status.data.tasks["done"] == status.data.tasks["total"] == 1


@pytest.mark.parametrize("kind", ["tfrecord", "gzip text"])
def test_tfrecord_and_gzip_text_files_on_hdfs_reach_the_trainer_record_by_record(client, fs, root, out, minicluster,
                                                                                  kind):
    expected = []
    for day in (1, 2):
        directory = f"{root}/202612{day:02d}"
        for f in range(2):
            rows = [f'{{"id": "{day}-{f}-{i:04d}"}}'.encode() for i in range(500)]
            buffer = io.BytesIO()
            if kind == "tfrecord":
                write_records(buffer, rows, "tfrecord")
                fs.write(f"{directory}/part-{f}.tfrecord", data=buffer.getvalue())
            else:
                fs.write(f"{directory}/part-{f}.jsonl.gz", data=gzip.compress(b"\n".join(rows) + b"\n"))
            expected += [r.decode() for r in rows]
        fs.write(f"{directory}/_SUCCESS", data=b"")
    # This one names the NameNode's HTTP address itself: webhdfs://host:port/path.
    path = "webhdfs://" + minicluster.webhdfs.split("://", 1)[1] + root + DAILY
    spec = hdfs_spec(out, path, time_range={"start": "2026-12-01", "end": "2026-12-02"}, task_size="4Ki")
    spec["input"]["sources"][0]["format"] = "tfrecord" if kind == "tfrecord" else "jsonl"
    status = client.wait(client.submit(spec), timeout=90)
    assert status.job.state == "succeeded", status.job
    assert sorted(all_lines(out)) == sorted(expected)  # every record once, none cut at a split boundary
    assert status.data.tasks["total"] > (4 if kind == "tfrecord" else 3)


def test_a_job_killed_with_its_am_resumes_from_a_work_preserve_dir_on_hdfs(client, fs, root, out):
    small = write_partition(fs, f"{root}/20261201", "a", files=1, lines=100)  # part-0.txt: done in the first run
    big = [f"b{i:06d}" for i in range(80000)]  # part-1.txt: 640 KB, one task, read for 24 s the first time
    fs.write(f"{root}/20261201/part-1.txt", data="\n".join(big) + "\n", overwrite=True)
    preserve = f"hdfs://{root}/progress"
    spec = hdfs_spec(out, "hdfs://" + root + DAILY, replicas=1, env={"SLEEP_EVERY": "1000", "SLEEP": "0.3"},
                     time_range={"start": "2026-12-01", "end": "2026-12-01"}, task_size="1Mi",
                     work_preserve_dir=preserve)
    app = client.submit(spec)
    big_task = "clicks/2026-12-01/part-1.txt:0"
    saved = wait_for(lambda: (s := HdfsSnapshots(preserve).recover()[0]).get(big_task, {}).get("records", 0) > 2000
                     and s, 60, "a position in the big file saved on HDFS")
    assert saved["clicks/2026-12-01/part-0.txt:0"]["state"] == "done"
    client.cluster("local").force_kill(app)  # SIGKILL to the AM and everything else: no goodbye upload
    before = set(all_lines(out))
    for f in out.iterdir():
        f.rename(f.with_name("first-" + f.name))

    spec["roles"][0]["env"] = {"OUT_DIR": str(out)}  # full speed this time
    status = client.wait(client.submit(spec), timeout=60)
    assert status.job.state == "succeeded", status.job
    second = [line for name, lines in consumed(out).items() if not name.startswith("first-") for line in lines]
    assert not set(small) & set(second), "a task done in the first run was read again"
    assert second[0] != big[0] and second[0] in big, "the big file did not resume mid-file"
    assert before | set(second) == set(small) | set(big)
    final, _ = HdfsSnapshots(preserve).recover()
    assert {t["state"] for t in final.values()} == {"done"} and len(final) == 2
    kept = fs.list(f"{root}/progress")
    assert len(kept) == 1 and kept[0].startswith("tasks.snapshot."), kept  # older snapshots and temporaries gone


def test_a_missing_hdfs_path_fails_the_job_naming_it(client, root, out):
    spec = hdfs_spec(out, f"hdfs://{root}/nowhere", replicas=1)
    status = client.wait(client.submit(spec), timeout=60)
    assert status.job.state == "failed"
    assert f"input path hdfs://{root}/nowhere does not exist" in status.job.reason, status.job


def test_an_unreachable_namenode_fails_the_job_with_the_reason(client, out, minicluster):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    spec = hdfs_spec(out, f"webhdfs://127.0.0.1:{port}/data/clicks", replicas=1)
    status = client.wait(client.submit(spec), timeout=60)
    assert status.job.state == "failed"
    reason = status.job.reason
    assert f"source clicks: cannot read webhdfs://127.0.0.1:{port}/data/clicks: ConnectionError" in reason, reason


def test_a_work_preserve_dir_on_an_unreachable_namenode_fails_the_job_at_once(client, fs, root, out):
    write_partition(fs, f"{root}/20261201", "a", files=1, lines=10)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    spec = hdfs_spec(out, "hdfs://" + root + DAILY, replicas=1, time_range={"start": "2026-12-01", "end": "2026-12-01"},
                     work_preserve_dir=f"webhdfs://127.0.0.1:{port}/progress")
    status = client.wait(client.submit(spec), timeout=60)
    assert status.job.state == "failed"
    assert "work_preserve_dir: cannot read the saved task positions: ConnectionError" in status.job.reason, \
        status.job


def test_the_executor_reader_seeks_and_names_a_missing_file(fs, root, minicluster):
    data = os.urandom(3 * 1024 * 1024 + 17)
    fs.write(f"{root}/blob", data=data)
    base = "webhdfs://" + minicluster.webhdfs.split("://", 1)[1]
    with WebHDFSFile(base + f"{root}/blob") as f:
        assert f.size() == len(data) and f.seek(0, io.SEEK_END) == len(data) and f.read(10) == b""
        f.seek(len(data) - 5)
        assert f.read() == data[-5:]
        f.seek(1000)
        assert f.read(100) == data[1000:1100] and f.tell() == 1100
        f.seek(200_000)  # forward, within READ_PAST: read past on the same response
        assert f.read(10) == data[200_000:200_010]
        f.seek(10)  # backwards: a new OPEN at the offset
        buffer = bytearray(2 * 1024 * 1024)
        assert f.readinto(buffer) == len(buffer) and bytes(buffer) == data[10:10 + len(buffer)]
    with pytest.raises(FileNotFoundError, match=f"{root}/missing"), WebHDFSFile(base + f"{root}/missing") as f:
        f.read(1)


def test_a_file_gone_from_hdfs_before_it_is_read_fails_its_task_naming_the_url(client, fs, root, out):
    first = [f"a{i:06d}" for i in range(1_000_000)]  # 8 MB, read for seconds: more than pipe and read-ahead
    fs.write(f"{root}/20261201/part-0.txt", data="\n".join(first) + "\n")
    fs.write(f"{root}/20261201/part-1.txt", data="gone before it is read\n")
    fs.write(f"{root}/20261201/_SUCCESS", data=b"")
    spec = hdfs_spec(out, "hdfs://" + root + DAILY, replicas=1, env={"SLEEP_EVERY": "20000", "SLEEP": "0.2"},
                     time_range={"start": "2026-12-01", "end": "2026-12-01"}, task_size="16Mi",
                     max_tasks_per_executor=1, prefetch=0, max_task_attempts=1)
    app = client.submit(spec)
    wait_for(lambda: (d := client.data(app)) and d.scan_complete and d.tasks["running"] == 1, 60,
             "the scan done, part-0 being read")
    fs.delete(f"{root}/20261201/part-1.txt")
    status = client.wait(app, timeout=60)
    assert status.job.state == "failed"
    reason = status.job.reason
    assert f"task clicks/2026-12-01/part-1.txt:0 (hdfs://{root}/20261201/part-1.txt) failed 1 time(s)" in reason, \
        reason
    assert "FileNotFoundError: HTTP 404" in reason and f"{root}/20261201/part-1.txt" in reason, reason


def test_the_hdfs_feed_benchmark_prints_its_ratio_last(minicluster, tmp_path):
    bench = Path(__file__).resolve().parents[2] / "bench" / "feed_hdfs.py"
    proc = subprocess.run([sys.executable, str(bench)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SIZE_MB": "4", "TASK_MB": "1", "RUNS": "1",
                               "BENCH_FEED_DIR": str(tmp_path), "PRIMUS_MINICLUSTER_DIR": str(minicluster.dir)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(r"median of 1 paired runs: [\d.]+x$", proc.stdout.strip().splitlines()[-1]), proc.stdout


def test_a_savepoint_on_hdfs_is_a_restore_from_for_the_next_job(client, fs, root, out):
    small = write_partition(fs, f"{root}/20261201", "a", files=1, lines=100)
    big = [f"b{i:06d}" for i in range(80000)]  # read for 24 s the first time
    fs.write(f"{root}/20261201/part-1.txt", data="\n".join(big) + "\n", overwrite=True)
    spec = hdfs_spec(out, "hdfs://" + root + DAILY, replicas=1, env={"SLEEP_EVERY": "1000", "SLEEP": "0.3"},
                     time_range={"start": "2026-12-01", "end": "2026-12-01"}, task_size="1Mi")
    app = client.submit(spec)
    wait_for(lambda: (d := client.data(app)) is not None and d.records_done > len(small) + 2000, 60,
             "part of the big file")
    savepoint = f"hdfs://{root}/savepoint"
    saved = client.data_savepoint(app, savepoint)  # an hdfs:// URL goes as it is
    assert saved.dir == savepoint and saved.done == 1
    client.kill(app)
    positions, _ = HdfsSnapshots(savepoint).recover()
    at = positions["clicks/2026-12-01/part-1.txt:0"]["records"]
    assert 2000 < at < len(big) and positions["clicks/2026-12-01/part-0.txt:0"]["state"] == "done"
    for f in out.iterdir():
        f.rename(f.with_name("first-" + f.name))

    spec["roles"][0]["env"] = {"OUT_DIR": str(out)}
    spec["input"]["restore_from"] = savepoint
    status = client.wait(client.submit(spec), timeout=60)
    assert status.job.state == "succeeded", status.job
    second = [line for name, lines in consumed(out).items() if not name.startswith("first-") for line in lines]
    assert second == big[at:]  # exactly from the saved position on


def test_hdfs_snapshots_recover_the_newest_whole_one_and_saves_clean_up(fs, root):
    progress = f"hdfs://{root}/progress"
    assert HdfsSnapshots(progress).recover() == ({}, {})  # no directory yet: nothing saved
    fs.write(f"{root}/progress/tasks.snapshot.3.json",
             data='{"version": 1, "tasks": {"t": {"state": "done", "records": 5}}, "checkpoints": {"0": "c1"}}')
    fs.write(f"{root}/progress/tasks.snapshot.4.json", data='{"version": 1, "tas')  # not ours: never renamed so
    fs.write(f"{root}/progress/_tasks.snapshot.5.tmp", data='{"version": 1, "tasks": {}}')  # a crash mid-save
    store = HdfsSnapshots(progress)
    assert store.recover() == ({"t": {"state": "done", "records": 5}}, {"0": "c1"})
    state = {"t": {"state": "done", "records": 5}, "u": {"state": "queued", "records": 7}}
    assert store.save(state, {"0": "c2"}, taken=2.0)
    assert fs.list(f"{root}/progress") == ["tasks.snapshot.5.json"]  # older ones and the leftover gone
    assert not store.save(state, {"0": "c2"}, taken=3.0)  # unchanged: not uploaded again
    assert not store.save({}, {}, taken=1.0)  # read before the last save: never follows it
    assert HdfsSnapshots(progress).recover() == (state, {"0": "c2"})


def test_a_yarn_job_reads_its_input_from_hdfs(minicluster, fs, root, out, tmp_path):
    pytest.importorskip("skein")
    from primus_runtime.client import PrimusClient

    expected = write_partition(fs, f"{root}/20261201", "y", files=2, lines=500)
    spec = hdfs_spec(out, "hdfs://" + root + DAILY, replicas=1, time_range={"start": "2026-12-01", "end": "2026-12-01"})
    spec["roles"][0]["resources"] = {"cpu": 1, "memory": "256Mi"}
    spec["backend"] = {"type": "yarn", "am_memory": "512Mi"}
    client = PrimusClient(tmp_path / "home")
    app_id = client.submit(spec)
    try:
        status = client.wait(app_id, timeout=240)
    finally:
        if client.cluster("yarn").am_alive(app_id):
            client.cluster("yarn").force_kill(app_id)
    assert status.job.state == "succeeded", status.job
    assert sorted(all_lines(out)) == sorted(expected)
