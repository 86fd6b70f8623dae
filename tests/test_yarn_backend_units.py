"""The YARN backend's translations, without a cluster: container ends to failover events,
NodeManager log framing, application tags, container sizes, the Hadoop client configuration."""

from __future__ import annotations

import pytest

from primus_runtime.backends.yarn import (
    application_tags,
    container_resources,
    exited_from,
    log_contents,
    never_fits,
)
from primus_runtime.hadoop import HadoopConf, HadoopConfigError
from primus_runtime.spec import JobSpec, Resources, SpecError, YarnBackend


@pytest.mark.parametrize(("state", "message", "expected"), [
    ("SUCCEEDED", "", (0, "container exited 0", False)),
    ("FAILED", "Exception from container-launch.\nContainer id: c_1\nExit code: 3\n", (3, None, False)),
    ("KILLED", "Container preempted by scheduler", (None, None, True)),
    ("FAILED", "Container released on a *lost* node", (None, None, False)),
    ("KILLED", "Killed by user request.", (None, "container killed: Killed by user request.", False)),
])
def test_container_ends_map_to_exit_code_reason_and_preemption(state, message, expected):
    code, reason, preempted = exited_from(state, message)
    assert (code, preempted) == (expected[0], expected[2])
    if expected[1] is not None:
        assert reason == expected[1]
    if "lost" in message:
        assert reason.startswith("container lost with its node")
    if "preempted" in message:
        assert reason.startswith("container preempted by YARN")


def test_log_contents_strips_the_nodemanager_framing_by_length():
    body = (b"Container: container_1_0001_01_000002 on localhost:4545\nLogAggregationType: LOCAL\n====\n"
            b"LogType:stdout.log\nLogLastModifiedTime:Wed Dec 02\nLogLength:12\nLogContents:\n"
            b"line1\nline2\n\nEnd of LogType:stdout.log.\n*****\n")
    assert log_contents(body) == b"line1\nline2\n"
    assert log_contents(b"plain") == b"plain"


def test_application_tags_are_lowercased_and_limits_are_checked_before_submitting():
    spec = JobSpec.from_dict({"name": "t", "roles": [{"name": "w", "command": "true"}],
                              "tags": {"dag_id": "Daily_Retrain", "try_number": "2"},
                              "backend": {"type": "yarn", "application_tags": {"team": "ML"}}})
    assert isinstance(spec.backend, YarnBackend)
    assert application_tags(spec, spec.backend) == ["primus", "team:ml", "dag_id:daily_retrain", "try_number:2"]
    spec.tags = {f"k{i}": "v" for i in range(12)}
    with pytest.raises(SpecError, match="YARN allows 10 application tags, this job has 14"):
        application_tags(spec, spec.backend)
    spec.tags = {"note": "a,b"}
    with pytest.raises(SpecError, match="refuses ','"):
        application_tags(spec, spec.backend)


def test_containers_are_rounded_up_and_checked_against_the_largest_node():
    res = Resources(cpu=1.5, memory="300Mi", gpu=0)
    assert container_resources(res) == {"memory": 300, "vcores": 2, "gpus": 0}
    nodes = [{"memory": 8192, "vcores": 16, "gpus": 0}]
    assert never_fits("worker", res, nodes) is None
    assert "needs memory 16384Mi but the largest YARN node has 8192Mi" in \
        never_fits("worker", Resources(memory="16Gi"), nodes)
    assert "no node offers yarn.io/gpu" in never_fits("worker", Resources(gpu=1), nodes)


def test_hadoop_conf_reads_addresses_and_names_what_is_missing(tmp_path, monkeypatch):
    (tmp_path / "core-site.xml").write_text(
        "<configuration><property><name>fs.defaultFS</name><value>hdfs://nn.example:8020</value></property>"
        "</configuration>")
    (tmp_path / "yarn-site.xml").write_text(
        "<configuration><property><name>yarn.resourcemanager.hostname</name><value>rm.example</value></property>"
        "<property><name>yarn.resourcemanager.webapp.address</name><value>${yarn.resourcemanager.hostname}:8088"
        "</value></property></configuration>")
    conf = HadoopConf(tmp_path)
    assert conf.default_fs() == "hdfs://nn.example:8020"
    assert conf.webhdfs() == "http://nn.example:9870"  # Hadoop 3's default NameNode web port
    assert conf.rm_web() == "http://rm.example:8088"
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    with pytest.raises(HadoopConfigError, match="HADOOP_CONF_DIR is not set"):
        HadoopConf()
    with pytest.raises(HadoopConfigError, match="no such directory"):
        HadoopConf(tmp_path / "nowhere")
