"""The AM saves the job's outcome where clients read it once it is gone, through an outage of its
store: the chaos suite's datanode_down on YARN (2026-12-07) ended a job while HDFS's only DataNode
was down, its one try to save the final status failed, and the job said ``lost`` for ever."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

from primus_runtime.am import main


class FlakyStore:
    """A job store whose status writes fail ``failures`` times (HDFS down), then succeed."""

    def __init__(self, failures: int):
        self.failures, self.saved = failures, []

    def save_status(self, document: bytes, final: bool) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError("WebHDFS: could not write status.json: connection refused")
        self.saved.append((document, final))

    def save_history(self, files) -> None:
        pass


def outcome_saved(tmp_path, monkeypatch, failures: int, within: float) -> FlakyStore:
    status = tmp_path / "status.json"
    status.write_bytes(b'{"job": {"state": "succeeded"}}')
    store = FlakyStore(failures)
    slept = []

    async def no_wait(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(main.asyncio, "sleep", no_wait)
    monkeypatch.setattr(main, "_save_history", lambda am, store: None)
    asyncio.run(main._save_outcome(SimpleNamespace(status_path=status), store, within=within))
    store.slept = slept
    return store


def test_the_outcome_is_saved_once_the_store_is_back(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, "primus.am")
    store = outcome_saved(tmp_path, monkeypatch, failures=3, within=60)
    assert store.saved == [(b'{"job": {"state": "succeeded"}}', True)]
    assert store.slept == [1.0, 2.0, 4.0]
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == ("saving the outcome failed (WebHDFS: could not write status.json: connection refused): "
                       "trying again for up to 60 s")
    assert said[-1].startswith("the outcome is saved, ")


def test_an_outage_longer_than_the_limit_ends_without_the_outcome_saying_so(tmp_path, monkeypatch, caplog):
    store = outcome_saved(tmp_path, monkeypatch, failures=100, within=0.5)
    assert store.saved == []
    assert "saving the outcome failed for 0 s: clients read the cluster's outcome only" in caplog.text
