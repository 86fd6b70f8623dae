"""The work-preserve journal: recovery after a crash at any byte, compaction round trip."""

from __future__ import annotations

import errno
import json
import os
import threading

import pytest

from primus_runtime.data import journal as journal_module
from primus_runtime.data.dispatcher import Task, TaskState
from primus_runtime.data.journal import JOURNAL, SNAPSHOT, TaskJournal


def task(n: int, **changes) -> Task:
    t = Task(id=f"clicks/2026-12-01/part-{n}.txt:0", partition="2026-12-01", source="clicks",
             url=f"/data/part-{n}.txt", format="text", compression="none", start=0, end=100, size=100)
    for key, value in changes.items():
        setattr(t, key, value)
    return t


def test_recovers_progress_and_states(tmp_path):
    j = TaskJournal(tmp_path)
    a, b = task(1), task(2)
    j.added(a)
    j.added(b)
    a.state, a.records, a.bytes_done = TaskState.DONE, 10, 100
    b.state, b.records, b.bytes_done, b.attempts = TaskState.RUNNING, 4, 40, 1
    j.changed(a)
    j.changed(b)
    j.close()
    state = TaskJournal(tmp_path).recover()
    assert state[a.id]["state"] == "done" and state[a.id]["records"] == 10
    assert state[b.id] == {"state": "running", "records": 4, "bytes": 40, "attempts": 1, "error": ""}


def test_a_torn_last_line_is_ignored_and_cut_before_new_lines(tmp_path):
    j = TaskJournal(tmp_path)
    a = task(1)
    j.added(a)
    a.records = 7
    j.changed(a)
    j.close()
    with open(tmp_path / JOURNAL, "a") as f:
        f.write('{"op": "set", "id": "' + a.id + '", "state": "do')  # the crash hit mid-line
    reopened = TaskJournal(tmp_path)
    assert reopened.state[a.id]["records"] == 7
    a.records = 9
    reopened.changed(a)
    reopened.close()
    lines = (tmp_path / JOURNAL).read_text().splitlines()
    assert all(json.loads(line) for line in lines)  # the torn line is gone, nothing glued to it
    assert TaskJournal(tmp_path).state[a.id]["records"] == 9


def test_compaction_round_trip(tmp_path, monkeypatch):
    monkeypatch.setattr(journal_module, "COMPACT_LINES", 5)
    j = TaskJournal(tmp_path)
    tasks = [task(n) for n in range(4)]
    for n, t in enumerate(tasks):
        j.added(t)
        t.records = n + 1
        t.state = TaskState.DONE if n % 2 else TaskState.QUEUED
        j.changed(t)
    j.flush()  # 8 lines >= 5: a snapshot and an empty journal
    assert (tmp_path / SNAPSHOT).exists() and (tmp_path / JOURNAL).read_text() == ""
    tasks[0].records = 50
    j.changed(tasks[0])
    j.close()
    state = TaskJournal(tmp_path).state
    assert {k: v["records"] for k, v in state.items()} == {tasks[0].id: 50, tasks[1].id: 2, tasks[2].id: 3,
                                                          tasks[3].id: 4}
    assert [state[t.id]["state"] for t in tasks] == ["queued", "done", "queued", "done"]


def test_a_crash_between_snapshot_and_new_journal_replays_harmlessly(tmp_path):
    j = TaskJournal(tmp_path)
    a = task(1)
    j.added(a)
    a.records = 3
    j.changed(a)
    j.flush()
    old_journal = (tmp_path / JOURNAL).read_text()
    j.compact()
    j.close()
    (tmp_path / JOURNAL).write_text(old_journal)  # as if the journal was never emptied
    assert TaskJournal(tmp_path).state[a.id]["records"] == 3


def test_committed_checkpoints_survive_in_journal_and_snapshot(tmp_path):
    from primus_runtime.data.journal import read_checkpoints

    j = TaskJournal(tmp_path)
    j.checkpoint("worker-0", "ckpt-1")
    j.checkpoint("worker-0", "ckpt-2")
    j.checkpoint("worker-1", "ckpt-9")
    j.flush()
    assert read_checkpoints(tmp_path) == {"worker-0": "ckpt-2", "worker-1": "ckpt-9"}
    j.compact()
    j.close()
    assert (tmp_path / JOURNAL).read_text() == ""
    assert TaskJournal(tmp_path).checkpoints == {"worker-0": "ckpt-2", "worker-1": "ckpt-9"}


def test_each_write_reaches_the_file_with_the_reader_of_a_running_task(tmp_path):
    """What a restarted AM of the same job needs: every change on disk when write() returns (no fsync
    wait, no buffer a killed process would lose), a running task's holder, a quoted id as JSON says."""
    j = TaskJournal(tmp_path, keep_listing=False)
    a, b = task(1), task(2, id='odd "id"\\')
    j.added(a)  # not kept: the restarted AM's scan lists it again
    a.state, a.holder, a.records = TaskState.RUNNING, "inc-1", 5
    b.state, b.records, b.bytes_done = TaskState.DONE, 10, 100
    j.changed(a)
    j.changed(b)
    j.write()
    lines = [json.loads(line) for line in (tmp_path / JOURNAL).read_text().splitlines()]
    assert [line["op"] for line in lines] == ["set", "set"]
    state = journal_module.recover(tmp_path)
    assert state[a.id] == {"state": "running", "records": 5, "bytes": 0, "attempts": 0, "error": "", "holder": "inc-1"}
    assert state['odd "id"\\']["state"] == "done"
    j.write()  # nothing changed: nothing written
    assert len((tmp_path / JOURNAL).read_text().splitlines()) == 2
    j.compact()
    assert journal_module.recover(tmp_path)[a.id]["holder"] == "inc-1"


def test_compactions_keep_recovered_tasks_and_the_latest_of_changed_ones(tmp_path):
    """Snapshots are joined from the entries as last journaled: tasks known only from what was
    recovered keep their values, changed ones take their latest, odd text stays valid JSON."""
    j = TaskJournal(tmp_path)
    a, b = task(1), task(2, id='odd "id"\\\n')
    for t in (a, b):
        j.added(t)
    a.state, a.records, a.bytes_done, a.error = TaskState.DONE, 10, 100, 'bad "row"\n'
    b.state, b.holder, b.records, b.offset, b.event_time = TaskState.RUNNING, "inc-1", 3, 7, 123
    j.changed(a)
    j.changed(b)
    j.compact()
    j.close()
    reopened = TaskJournal(tmp_path)  # a (done) and b only recovered from here on
    c = task(3)
    reopened.added(c)
    b.records = 5
    reopened.changed(b)
    for _ in range(2):  # the recovered entries are rendered once and kept for the next snapshot
        reopened.compact()
        snapshot = json.loads((tmp_path / SNAPSHOT).read_text())
        assert snapshot["tasks"][a.id] == {"state": "done", "records": 10, "bytes": 100, "attempts": 0,
                                           "error": 'bad "row"\n'}
        assert snapshot["tasks"][b.id] == {"state": "running", "records": 5, "bytes": 0, "attempts": 0, "error": "",
                                           "holder": "inc-1", "offset": 7, "time": 123}
        assert snapshot["tasks"][c.id]["state"] == "queued"
    reopened.close()
    assert journal_module.recover(tmp_path) == snapshot["tasks"]


def test_what_is_journaled_while_a_snapshot_is_written_stays_in_the_journal(tmp_path, monkeypatch):
    """A thread writes snapshots while the AM goes on journaling: at every moment the files recover
    every task's latest values, and once the snapshot is in place the journal keeps exactly the lines
    written since it was taken."""
    monkeypatch.setattr(journal_module, "COMPACT_LINES", 4)
    release = threading.Event()
    write_snapshot_text = journal_module._write_snapshot_text

    def held_back(directory, text):
        release.wait(10)
        write_snapshot_text(directory, text)

    monkeypatch.setattr(journal_module, "_write_snapshot_text", held_back)
    j = TaskJournal(tmp_path, keep_listing=False)
    tasks = [task(n, state=TaskState.RUNNING, holder="inc-1", records=n) for n in range(4)]
    for t in tasks:
        j.changed(t)
    j.write()  # 4 lines: a snapshot of them is being written
    tasks[0].state, tasks[0].holder, tasks[0].records = TaskState.DONE, None, 10
    j.changed(tasks[0])
    j.write()
    expected = {t.id: (t.state.value, t.records) for t in tasks}

    def recovered():
        return {k: (v["state"], v["records"]) for k, v in journal_module.recover(tmp_path).items()}

    assert not (tmp_path / SNAPSHOT).exists() and recovered() == expected
    release.set()
    j.flush()  # waits for the snapshot, then cuts the journal
    snapshot = json.loads((tmp_path / SNAPSHOT).read_text())["tasks"]
    assert snapshot[tasks[0].id]["state"] == "running"  # as it was when the snapshot was taken
    lines = [json.loads(line) for line in (tmp_path / JOURNAL).read_text().splitlines()]
    assert [(line["id"], line["state"]) for line in lines] == [(tasks[0].id, "done")]
    assert recovered() == expected
    j.close()
    assert {k: (v["state"], v["records"]) for k, v in TaskJournal(tmp_path).state.items()} == expected


def test_a_snapshot_that_cannot_be_written_leaves_the_journal_whole(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(journal_module, "COMPACT_LINES", 2)

    def disk_full(directory, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(journal_module, "_write_snapshot_text", disk_full)
    j = TaskJournal(tmp_path, keep_listing=False)
    tasks = [task(n, records=n + 1) for n in range(3)]
    for t in tasks:
        j.changed(t)
    j.flush()
    assert "cannot compact the task journal" in caplog.text
    assert not (tmp_path / SNAPSHOT).exists()
    assert len((tmp_path / JOURNAL).read_text().splitlines()) == 3
    assert {k: v["records"] for k, v in journal_module.recover(tmp_path).items()} == {t.id: t.records for t in tasks}


def test_a_failed_background_fsync_is_raised_by_the_next_flush(tmp_path, monkeypatch):
    """The periodic fsync runs in a thread; its failure reaches the AM at the next round (which reports
    the positions unsaved) and the lines are synced again."""
    def failing(fd):
        os.close(fd)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(journal_module, "_fsync_and_close", failing)
    j = TaskJournal(tmp_path)
    a = task(1, records=3)
    j.changed(a)
    j.maybe_flush()  # the fsync is under way
    j._syncing.wait()
    j._flushed_at = 0.0  # the next round
    with pytest.raises(OSError, match="Input/output error"):
        j.maybe_flush()
    monkeypatch.setattr(journal_module, "_fsync_and_close", lambda fd: os.close(fd))
    j._flushed_at = 0.0
    j.maybe_flush()  # synced again
    j.close()
    assert TaskJournal(tmp_path).state[a.id]["records"] == 3
