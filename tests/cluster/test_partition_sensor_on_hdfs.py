"""PrimusPartitionSensor against the minicluster's NameNode, through the hdfs provider's WebHDFSHook."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from urllib.parse import urlparse

import hdfs
import pytest

from .conftest import Minicluster

# Airflow reads its home once, at import: a private one when this file runs alone (the provider
# tests' conftest sets it first in a whole-suite run).
if "AIRFLOW_HOME" not in os.environ:
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="primus-airflow-home-")

DAY = "/data/clicks/20261202"


@pytest.fixture
def webhdfs_conn(minicluster: Minicluster, monkeypatch: pytest.MonkeyPatch) -> hdfs.InsecureClient:
    url = urlparse(minicluster.webhdfs)
    monkeypatch.setenv("AIRFLOW_CONN_WEBHDFS_MINI", json.dumps(
        {"conn_type": "webhdfs", "host": url.hostname, "port": url.port, "login": "primus"}))
    client = hdfs.InsecureClient(minicluster.webhdfs, user="primus")
    client.delete("/data/clicks", recursive=True)
    return client


def sensor(**kwargs):
    from airflow_provider_primus.sensors.primus import PrimusPartitionSensor

    return PrimusPartitionSensor(task_id="wait_for_partition", path="hdfs:///data/clicks/{{YYYY}}{{MM}}{{DD}}",
                                 partition="2026-12-02", webhdfs_conn_id="webhdfs_mini", **kwargs)


def test_poke_sees_the_partition_only_once_its_marker_is_on_hdfs(webhdfs_conn):
    assert sensor().poke({}) is False  # nothing yet
    webhdfs_conn.write(f"{DAY}/part-0.txt", data=b"a\nb\n")
    assert sensor().poke({}) is False  # the data without its marker is not a partition
    webhdfs_conn.write(f"{DAY}/_SUCCESS", data=b"")
    assert sensor().poke({}) is True


def test_deferred_sensor_fires_when_the_marker_appears(webhdfs_conn):
    from airflow.sdk.exceptions import TaskDeferred

    with pytest.raises(TaskDeferred) as info:
        sensor(deferrable=True, poke_interval=0.5).execute({})
    trigger = info.value.trigger
    assert (trigger.path, trigger.webhdfs_conn_id) == (f"{DAY}/_SUCCESS", "webhdfs_mini")

    async def scenario() -> dict:
        waiting = asyncio.ensure_future(trigger.run().__anext__())
        await asyncio.sleep(2)
        assert not waiting.done()
        await asyncio.to_thread(webhdfs_conn.write, f"{DAY}/_SUCCESS", data=b"")
        return (await asyncio.wait_for(waiting, 60)).payload

    assert asyncio.run(scenario())["status"] == "success"
