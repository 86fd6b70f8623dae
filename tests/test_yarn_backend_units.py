"""The YARN backend's translations, without a cluster: container ends to failover events,
NodeManager log framing, application tags, container sizes, the Hadoop client configuration."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from primus_runtime.backends.base import LaunchRequest, launched_at_start
from primus_runtime.backends.yarn.cluster import (
    application_acls,
    application_tags,
    container_resources,
    log_contents,
    never_fits,
    parse_prelaunched,
)
from primus_runtime.backends.yarn.executors import YarnExecutorBackend, exited_from
from primus_runtime.backends.yarn.settings import YarnBackend
from primus_runtime.client import PrimusClient, local_paths_on_a_cluster
from primus_runtime.hadoop import HadoopConf, HadoopConfigError
from primus_runtime.spec import JobSpec, Resources, SpecError


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


def test_a_failed_container_takes_its_exit_status_and_diagnostics_from_its_nodemanager():
    skein_says = "Container failed during execution, see logs for more information."
    node_says = (137, "Sent signal FORCEFUL_SHUTDOWN (SIGKILL) to pid 9518 Container killed on request. "
                      "Exit code is 137 Killed by external signal")
    assert exited_from("FAILED", skein_says, node_says) == (137, f"container failed (exit 137): {node_says[1]}", False)
    # The NodeManager had forgotten the container: skein's word is all there is.
    assert exited_from("FAILED", skein_says, None) == (None, f"container failed: {skein_says}", False)


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


def test_the_application_acls_are_enforced_for_the_submitter_and_the_named_users(monkeypatch):
    monkeypatch.setenv("HADOOP_USER_NAME", "alice")
    plain = application_acls(YarnBackend(type="yarn"))
    assert (plain.enable, plain.view_users, plain.modify_users) == (True, ["alice"], ["alice"])
    acls = application_acls(YarnBackend(type="yarn", user="svc-train", view_acls=["bob", "alice", "*"],
                                        modify_acls=["oncall@EXAMPLE.COM"]))
    assert acls.enable is True
    assert acls.view_users == ["alice", "svc-train", "bob", "*"]
    assert acls.modify_users == ["alice", "svc-train", "oncall@EXAMPLE.COM"]


@pytest.mark.parametrize("field", ["view_acls", "modify_acls"])
def test_acl_user_names_that_would_widen_the_acl_are_refused_naming_the_entry(field):
    with pytest.raises(SpecError) as refused:
        JobSpec.from_dict({"name": "j", "roles": [{"name": "w", "command": "x"}],
                           "backend": {"type": "yarn", field: ["bob", "eve,mallory", "x group", ""]}})
    assert [line.split(":")[0] for line in refused.value.problems] == [
        f"backend.{field}[1]", f"backend.{field}[2]", f"backend.{field}[3]"]
    assert "must be a user name" in refused.value.problems[0] and "got 'eve,mallory'" in refused.value.problems[0]


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


def test_roles_launched_at_once_are_started_with_the_application():
    roles = [{"name": "ps", "replicas": 2, "command": "x"}, {"name": "worker", "replicas": 3, "command": "x"}]
    gang = JobSpec.from_dict({"name": "t", "roles": roles, "backend": {"type": "yarn"}})
    assert launched_at_start(gang) == {"ps": 2, "worker": 3}
    ordered = JobSpec.from_dict({"name": "t", "roles": roles, "backend": {"type": "yarn"},
                                 "scheduling": {"policy": "ordered", "order": ["worker", "ps"]}})
    assert launched_at_start(ordered) == {"worker": 3}  # ps waits for the workers: asked for later
    assert parse_prelaunched("ps=2,worker=3") == {"ps": 2, "worker": 3} and parse_prelaunched("") == {}


def test_a_prelaunched_executor_polls_for_the_address_its_am_publishes(tmp_path):
    import http.server
    import threading

    from primus_runtime.executor.main import wait_for_am_address

    published = threading.Event()

    class Store(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            if not published.is_set():
                self.send_error(404)  # the AM has not written am.json yet
                return
            body = b'{"address": "node7:4242", "started_at": 1}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Store)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/am.json"
    try:
        threading.Timer(0.5, published.set).start()
        assert wait_for_am_address(url, patience=10) == "node7:4242"
        published.clear()
        with pytest.raises(SystemExit, match="did not publish its address within 0.3s"):
            wait_for_am_address(url, patience=0.3)
    finally:
        server.shutdown()


def test_an_executor_waiting_for_its_container_says_so_until_it_runs():
    class App:
        def add_container(self, service, env):
            return SimpleNamespace(id=f"{service}_7")

    class Events:
        on_launched = on_exited = staticmethod(lambda event: None)

    backend = YarnExecutorBackend(App())
    backend._events = Events()
    request = LaunchRequest("worker", 3, "inc-3", 0, Resources(cpu=1.5, memory="2Gi", gpu=1), {})
    asyncio.run(backend.launch(request))
    assert backend.pending_reason("inc-3") == \
        "waits for YARN container worker_7 (2 vcores, 2048Mi, 1 GPUs): requested, not running yet"
    backend._update([SimpleNamespace(id="worker_7", state="RUNNING", yarn_node_http_address="node-1:8042",
                                     yarn_container_id="container_7", exit_message="")])
    assert backend.pending_reason("inc-3") is None and backend.pending_reason("unknown") is None


def test_a_container_first_seen_ended_is_launched_first_with_its_logs():
    """CI, 2026-12-08: an evaluator whose container ran between two polls of skein's containers
    ended with no logs in its status, and Airflow's task log lacked its last line."""
    class App:
        def add_container(self, service, env):
            return SimpleNamespace(id=f"{service}_7")

    seen = []

    class Events:
        on_launched = on_exited = staticmethod(seen.append)

    backend = YarnExecutorBackend(App())
    backend._events = Events()
    asyncio.run(backend.launch(LaunchRequest("evaluator", 0, "inc-0", 0, Resources(), {})))
    backend._update([SimpleNamespace(id="evaluator_7", state="SUCCEEDED", yarn_node_http_address="node-1:8042",
                                     yarn_container_id="container_7", exit_message="")])
    launched, exited = seen
    assert launched.incarnation == exited.incarnation == "inc-0" and exited.exit_code == 0
    assert launched.logs["stdout"] == "http://node-1:8042/ws/v1/node/containers/container_7/logs/stdout.log"
    backend._update([SimpleNamespace(id="evaluator_7", state="SUCCEEDED", yarn_node_http_address="node-1:8042",
                                     yarn_container_id="container_7", exit_message="")])
    assert len(seen) == 2  # once


def test_the_logs_of_an_executor_that_ended_before_its_launch_was_known_reach_its_status():
    """The AM side of the test above: the executor unregistered (or its end came) first."""
    from conftest import make_spec
    from primus_runtime.am.master import ApplicationMaster
    from primus_runtime.backends.base import Exited, Launched
    from primus_runtime.spec import JobSpec
    from simulated_backend import SimulatedBackend

    async def scenario() -> dict[str, str]:
        am = ApplicationMaster(JobSpec.from_dict(make_spec([{"name": "evaluator", "command": "x"}])), "app",
                               SimulatedBackend())
        await am.start("127.0.0.1:1")
        incarnation = am.record.executors["evaluator-0"].incarnation
        am.on_exited(Exited("evaluator", 0, incarnation, 0, "container exited 0", False))
        logs = {"stdout": "http://node-1:8042/ws/v1/node/containers/container_7/logs/stdout.log"}
        am.on_launched(Launched("evaluator", 0, incarnation, "node-1", [], logs))
        ended = am.record.find_incarnation(incarnation)
        await am.close()
        assert ended is not None and ended.state.value == "succeeded"
        return ended.logs

    assert asyncio.run(scenario()) == {
        "stdout": "http://node-1:8042/ws/v1/node/containers/container_7/logs/stdout.log"}


def _yarn_job(source: dict, **input_extra: str | bool) -> dict:
    return {"name": "t", "backend": {"type": "yarn"},
            "roles": [{"name": "worker", "command": "cat", "consumes_input": True}],
            "input": {"sources": [{"name": "rows", **source}], **input_extra}}


def test_local_input_paths_are_refused_on_yarn_before_the_cluster_is_asked(tmp_path, monkeypatch):
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)  # the check needs no cluster
    client = PrimusClient(tmp_path / "home")
    with pytest.raises(SpecError) as refused:
        client.submit(_yarn_job({"path": "/data/rows"}, work_preserve_dir="file:///progress",
                                restore_from="hdfs:///savepoints/1"))
    assert refused.value.problems == [
        "input.sources[0].path: a local path is read on every node of the yarn backend, not on this machine, "
        "got '/data/rows'; put the data on HDFS (`primus hdfs put LOCAL_DIR hdfs:///DIR`, see the README's "
        "\"On YARN\") and name it hdfs:///DIR/..., or set node_local: true if every node has this path",
        "input.work_preserve_dir: a local path is on the node that runs the AM of the yarn backend, not on this "
        "machine, got 'file:///progress'; use an hdfs:// directory, or set input.node_local_dirs: true if every "
        "node mounts it"]


@pytest.mark.parametrize("job", [
    _yarn_job({"path": "/mnt/shared/rows", "node_local": True}, work_preserve_dir="/mnt/shared/progress",
              node_local_dirs=True),
    _yarn_job({"path": "hdfs:///data/rows"}, work_preserve_dir="webhdfs://nn:9870/progress"),
    {**_yarn_job({"path": "/data/rows"}), "backend": {"type": "local"}},
])
def test_hdfs_node_local_and_local_backend_paths_pass(job):
    assert local_paths_on_a_cluster(JobSpec.model_validate(job)) == []


def test_application_attempt_is_read_from_the_container_id():
    from primus_runtime.backends.yarn.am import application_attempt

    assert application_attempt("container_1700000000000_0004_02_000001") == 2
    assert application_attempt("container_e17_1700000000000_0004_03_000001") == 3
    assert application_attempt("") == 1


def test_on_yarn_sigterm_stops_an_executor_and_is_no_preemption_notice():
    """The NodeManager sends SIGTERM for every kill (memory limits too) with SIGKILL 250 ms later: a
    drain there would be counted as a preemption, uncharged; the container's exit status tells instead."""
    import signal

    from primus_runtime import protocol
    from primus_runtime.backends.yarn.cluster import executor_script
    from primus_runtime.executor.preemption import PreemptionSettings, listen_for_notice_signals

    assert f"export {protocol.ENV_SIGTERM_IS_NOTICE}=0" in executor_script("python3")
    notices: list[str] = []
    before = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        listen_for_notice_signals(PreemptionSettings({protocol.ENV_SIGTERM_IS_NOTICE: "0"}, 10.0), notices.append)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        listen_for_notice_signals(PreemptionSettings({}, 10.0), notices.append)
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # elsewhere it is a notice
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_keytab_setting_is_checked_before_any_request_naming_the_field(tmp_path):
    from primus_runtime.backends.yarn.kerberos import KerberosError, login_from

    assert login_from(None, None) is None  # simple authentication
    fields = ("backend.principal", "backend.keytab")
    with pytest.raises(KerberosError, match=r"^backend.keytab is missing \(backend.principal 'etl@X' is set\)"):
        login_from("etl@X", None, fields)
    with pytest.raises(KerberosError, match=r"^backend.keytab: /no/such.keytab is not a readable file"):
        login_from("etl@X", "/no/such.keytab", fields)
    keytab = tmp_path / "etl.keytab"
    keytab.write_bytes(b"\x05\x02")
    with pytest.raises(KerberosError, match=r"^backend.principal is missing"):
        login_from(None, str(keytab), fields)


def test_an_executor_reads_webhdfs_with_the_delegation_token_when_it_has_one(monkeypatch):
    from primus_runtime.data.webhdfs import WebHDFSFile
    from primus_runtime.hadoop import ENV_WEBHDFS_DELEGATION

    f = WebHDFSFile("webhdfs://nn:9870/data/part-0", user="alice")
    assert f._url("OPEN", offset=0) == "/webhdfs/v1/data/part-0?op=OPEN&user.name=alice&offset=0"
    monkeypatch.setenv(ENV_WEBHDFS_DELEGATION, "TOKEN")
    assert f._url("OPEN", offset=0) == "/webhdfs/v1/data/part-0?op=OPEN&delegation=TOKEN&offset=0"


def _snapshot(app_id: str) -> dict:
    """The last status an AM mirrored to HDFS while its job ran: three workers running, data half read."""
    from primus_runtime.models import ExecutorView, JobSummary, RoleView, StatusDocument

    counts = {state: 0 for state in ("new", "starting", "registered", "running", "succeeded", "failed", "lost",
                                     "stopped")}
    executors = [ExecutorView(id=f"worker-{i}", role="worker", index=i, incarnation=f"i{i}", attempt=0,
                              state="running", host="n1", ports=[], pid=100 + i, gpus=[], exit_code=None, reason="",
                              logs={}, created_at=1.0, registered_at=2.0, running_at=3.0, finished_at=None,
                              ready=True, ready_at=3.0, stop_reason=None, restarts=0) for i in range(3)]
    role = RoleView(name="worker", replicas=3, released=True, ignored=False, failures=0, restarts=0,
                    states={**counts, "running": 3}, ready=3)
    return StatusDocument(job=JobSummary(app_id=app_id, name="j", state="running", reason="", created_at=1.0),
                          roles=[role], events=[], data=None, executors=executors).model_dump(mode="json")


def test_an_application_whose_am_died_is_lost_in_status_and_list_with_no_executor_running():
    """Issue 35: after the AM's container died (max_attempts used up), `primus status` said `failed` with
    `worker x3: 3 running` while `primus list` said `lost`."""
    from primus_runtime.backends.yarn.client import YarnClusterClient

    app_id = "application_1700000000000_0007"
    report = {"id": app_id, "name": "j", "state": "FAILED", "finalStatus": "FAILED", "finishedTime": 9_000,
              "startedTime": 1_000, "applicationTags": "primus",
              "diagnostics": "Application application_1700000000000_0007 failed 1 times due to AM Container\n"
                             "exited with  exitCode: 137"}
    snapshot = _snapshot(app_id)
    client = YarnClusterClient(conf_dir="/nonexistent")
    client.__dict__["rm"] = SimpleNamespace(app=lambda _: report, apps=lambda _: [report])
    client.__dict__["store"] = SimpleNamespace(
        read_json=lambda _, name: snapshot if name == "status.json" else {"name": "j", "tags": {}})
    status = client.final_status(app_id)
    assert status is not None
    assert status["job"]["state"] == "lost" and status["job"]["finished_at"] == 9.0
    assert status["job"]["reason"] == ("the AM exited without recording an outcome: Application "
                                       "application_1700000000000_0007 failed 1 times due to AM Container exited "
                                       "with exitCode: 137")
    assert [e["state"] for e in status["executors"]] == ["lost"] * 3
    assert "last seen running" in status["executors"][0]["reason"]
    assert status["roles"][0]["states"]["running"] == 0 and status["roles"][0]["states"]["lost"] == 3
    [entry] = client.list_jobs()
    assert (entry.state, entry.reason) == ("lost", status["job"]["reason"])


def test_the_executors_delegation_token_is_renewed_half_way_and_replaced_before_its_max_lifetime(monkeypatch):
    """A token lives a renew interval unless renewed, and never past its max lifetime: the AM renews it
    half-way to its expiry and gets a new one once a renewal no longer moves the expiry as far (issue 35:
    an executor reading HDFS for longer than a day failed, a job of more than 7 days lost HDFS)."""
    from primus_runtime.backends.yarn import kerberos

    now = [1000.0]
    issued: list[str] = []
    max_date: dict[str, float] = {}

    def fetch(webhdfs: str, login: object) -> str:
        issued.append(f"t{len(issued) + 1}")
        max_date[issued[-1]] = now[0] + 100  # max lifetime 100 s, renew interval 30 s
        return issued[-1]

    def renew(webhdfs: str, login: object, token: str) -> float:
        if now[0] >= max_date[token]:
            raise RuntimeError("HTTP 403: token has expired")
        return min(now[0] + 30, max_date[token])

    monkeypatch.setattr(kerberos, "webhdfs_delegation_token", fetch)
    monkeypatch.setattr(kerberos, "renew_webhdfs_delegation_token", renew)
    tokens = kerberos.DelegationTokens("http://nn:9870", object(), clock=lambda: now[0])  # type: ignore[arg-type]
    assert tokens.current() == "t1" and tokens.version == 1 and tokens.next_at == 1015
    seen = []
    for _ in range(60):  # 300 s, looked at every 5 s as the AM's watch loop does
        now[0] += 5
        if tokens.due():
            tokens.refresh()
        assert now[0] < tokens.expires_at, f"the token in use expired at {now[0]}"
        seen.append(tokens.token)
    assert issued == ["t1", "t2", "t3", "t4"] and tokens.version == 4  # a new one about every 80 s
    assert all(now_token is not None for now_token in seen)


def test_a_token_whose_renewal_fails_is_replaced_and_a_failed_fetch_is_retried(monkeypatch):
    from primus_runtime.backends.yarn import kerberos

    now = [0.0]
    monkeypatch.setattr(kerberos, "webhdfs_delegation_token", lambda webhdfs, login: "t")
    monkeypatch.setattr(kerberos, "renew_webhdfs_delegation_token", lambda webhdfs, login, token: now[0] + 60)
    tokens = kerberos.DelegationTokens("http://nn:9870", object(), clock=lambda: now[0])  # type: ignore[arg-type]
    tokens.current()

    def refused(*args: object) -> float:
        raise ConnectionError("the NameNode is unreachable")

    monkeypatch.setattr(kerberos, "renew_webhdfs_delegation_token", refused)
    monkeypatch.setattr(kerberos, "webhdfs_delegation_token", refused)
    now[0] = 30
    assert tokens.due() and not tokens.refresh() and tokens.version == 1
    assert tokens.next_at == 37.5  # retried soon: a quarter of what the token has left


def test_a_status_read_while_the_am_replaces_it_is_read_again_whole():
    """WebHDFS ends the response of a file replaced during the read without an error: the chaos suite on
    the minicluster read a status.json cut short (`{"job":{...`), which made the job look unknown."""
    from primus_runtime.backends.yarn.cluster import HdfsJobStore

    whole = b'{"job": {"state": "running"}}'
    reads = iter([whole[:12], whole])
    store = HdfsJobStore(SimpleNamespace(cat_file=lambda path: next(reads)), "/user/u/.primus")
    assert store.read_json("application_1_1", "status.json") == {"job": {"state": "running"}}
    cut = HdfsJobStore(SimpleNamespace(cat_file=lambda path: whole[:12]), "/user/u/.primus")
    assert cut.read_json("application_1_1", "status.json") is None  # never a half-read document
