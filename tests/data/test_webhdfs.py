"""data/webhdfs.py against a small fake NameNode + DataNode (http.server): the redirect, ranges and
seeks, and every way a read can fail (each an OSError that says what happened, never a hang or a
short file)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from primus_runtime.data import streaming
from primus_runtime.data.webhdfs import WebHDFSFile

DATA = bytes(range(256)) * 16384  # 4 MiB: more than READ_PAST


class FakeHDFS:
    """``/webhdfs/v1/<name>`` on the "NameNode" redirects OPEN to the "DataNode" (same server, path
    ``/dn/<name>``). ``mode`` breaks the DataNode's answer: ``short`` (the connection ends before
    Content-Length), ``silent`` (never answers), ``down`` (503 ``down_for`` times), ``forbidden`` (403)."""

    def __init__(self) -> None:
        self.files = {"/data/f": DATA}
        self.mode = ""
        self.down_for = 0  # "down": answers this many more requests with a 503
        self.requests: list[tuple[str, dict[str, str]]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                fake.requests.append((url.path, query))
                if url.path.startswith("/dn/"):
                    return self.datanode(url.path[3:], query)
                name = url.path[len("/webhdfs/v1"):]
                if name not in fake.files:
                    return self.reply(404, json.dumps({"RemoteException": {
                        "exception": "FileNotFoundException", "message": f"File {name} not found."}}).encode())
                if query["op"] == "GETFILESTATUS":
                    return self.reply(200, json.dumps({"FileStatus": {"type": "FILE",
                                                                      "length": len(fake.files[name])}}).encode())
                self.send_response(307)
                self.send_header("Location", f"http://127.0.0.1:{fake.port}/dn{name}?{url.query}")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def datanode(self, name: str, query: dict[str, str]) -> None:
                if fake.mode == "down" and fake.down_for > 0:  # a DataNode restarting (or its proxy's 503)
                    fake.down_for -= 1
                    return self.reply(503, b"Service Unavailable")
                if fake.mode == "forbidden":
                    return self.reply(403, json.dumps({"RemoteException": {
                        "exception": "AccessControlException", "message": "Permission denied: user=u"}}).encode())
                if fake.mode == "silent":
                    time.sleep(3)
                    return
                body = fake.files[name][int(query.get("offset", 0)):]
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[:len(body) // 2] if fake.mode == "short" else body)

            def reply(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"webhdfs://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def opens(self) -> list[dict[str, str]]:
        return [q for path, q in self.requests if q.get("op") == "OPEN" and not path.startswith("/dn/")]


@pytest.fixture
def fake() -> Iterator[FakeHDFS]:
    server = FakeHDFS()
    yield server
    server.server.shutdown()
    server.server.server_close()


def test_reads_follow_the_redirect_as_the_given_user_in_one_stream(fake):
    with WebHDFSFile(fake.url + "/data/f", user="alice") as f:
        got = b"".join(iter(lambda: f.read(64 * 1024), b""))
    assert got == DATA
    assert [q["offset"] for q in fake.opens()] == ["0"]  # one OPEN for the whole sequential read
    assert {q["user.name"] for _, q in fake.requests} == {"alice"}
    assert any(path == "/dn/data/f" for path, _ in fake.requests)


def test_seeks_reopen_at_the_offset_only_when_reading_past_will_not_do(fake):
    with WebHDFSFile(fake.url + "/data/f", user="u") as f:
        assert f.read(10) == DATA[:10]
        f.seek(5000)  # a short forward seek: read past on the open response
        assert f.read(10) == DATA[5000:5010]
        f.seek(100)  # backwards: a new OPEN there
        assert f.read(10) == DATA[100:110] and f.tell() == 110
        assert f.seek(-3, 2) == len(DATA) - 3 and f.read() == DATA[-3:] and f.read(5) == b""  # far: a new OPEN
    assert [q["offset"] for q in fake.opens()] == ["0", "100", str(len(DATA) - 3)]


@pytest.mark.parametrize("ahead", [False, True])
def test_text_splits_over_webhdfs_match_the_local_reader(fake, ahead):
    lines = b"".join(b"line %06d\n" % i for i in range(20000))
    fake.files["/data/lines"] = lines
    size = len(lines)
    pieces = []
    for start, end in ((0, size // 3), (size // 3, 2 * size // 3), (2 * size // 3, size)):
        with WebHDFSFile(fake.url + "/data/lines", user="u") as f:
            # As the executor reads it: ahead, on a connection of its own, from the task's assignment on.
            blocks = streaming.ReadAhead(lambda: WebHDFSFile(fake.url + "/data/lines", user="u"), start,
                                       64 * 1024) if ahead else None
            pieces.append(b"".join(bytes(block) for block, _ in streaming.streamed_lines(f, start, end, 0, 64 * 1024,
                                                                                       blocks=blocks)))
    assert b"".join(pieces) == lines  # every line once, none cut at a split boundary
    # The length comes with each OPEN's response: no GETFILESTATUS before reading.
    assert not [q for _, q in fake.requests if q.get("op") == "GETFILESTATUS"]


def test_a_missing_file_is_a_file_not_found_error_naming_it(fake):
    with pytest.raises(FileNotFoundError, match="HTTP 404 .*FileNotFoundException: File /data/nope not found"):
        WebHDFSFile(fake.url + "/data/nope", user="u").read(1)


def test_a_response_that_ends_early_is_an_error_not_a_short_file(fake):
    fake.mode = "short"
    f = WebHDFSFile(fake.url + "/data/f", user="u", outage=0)
    with pytest.raises(OSError, match=r"response ended at byte 2097152 of 4194304 \(short read\) \(HDFS unavailable "
                                      r"for 0 s: gave up after 0 s\)"):
        while f.read(64 * 1024):
            pass


def test_a_datanode_that_does_not_answer_times_out(fake):
    fake.mode = "silent"
    with pytest.raises(OSError, match=f"WebHDFS server 127.0.0.1:{fake.port} unreachable: (TimeoutError|timeout)"):
        WebHDFSFile(fake.url + "/data/f", user="u", timeout=0.5, outage=0).read(1)


def test_an_unreachable_namenode_is_an_error_naming_it():
    with pytest.raises(OSError, match="WebHDFS server 127.0.0.1:1 unreachable: ConnectionRefusedError"):
        WebHDFSFile("webhdfs://127.0.0.1:1/data/f", user="u", outage=0).read(1)


def test_a_datanode_down_for_a_while_is_waited_for_and_the_read_goes_on_where_it_stopped(fake, caplog):
    """The chaos suite's datanode_down on YARN (2026-12-07): a DataNode stopped for 10 s failed the
    job, each connection refused charged to the task as bad data (3 attempts in 3 s)."""
    fake.mode = "short"  # the first response is cut halfway: the DataNode went down mid-stream
    f = WebHDFSFile(fake.url + "/data/f", user="u", outage=30)
    first = f.read(3 * 1024 * 1024)
    assert first == DATA[:2 * 1024 * 1024]  # all the cut stream had
    fake.mode = "down"  # then down for 2 more tries (0.5 + 1 + 2 s of waiting in all)
    fake.down_for = 2
    rest = b"".join(iter(lambda: f.read(64 * 1024), b""))
    assert first + rest == DATA  # every byte once, in order
    assert [q["offset"] for q in fake.opens()][-1] == str(2 * 1024 * 1024)  # on from where it stopped
    said = [r.getMessage() for r in caplog.records if r.name == "primus_runtime.data.webhdfs"]
    assert said[0].startswith("HDFS unavailable reading /data/f at byte 2097152 (the DataNode's response ended")
    assert said[-1].startswith("HDFS available again: reading /data/f on from byte 2097152 after ")


def test_an_outage_longer_than_the_limit_fails_the_read_saying_so(fake):
    fake.mode, fake.down_for = "down", 1000
    started = time.monotonic()
    with pytest.raises(OSError, match=r"HTTP 503 .* \(HDFS unavailable for [1-3] s: gave up after 3 s\)"):
        WebHDFSFile(fake.url + "/data/f", user="u", outage=3).read(1)
    assert time.monotonic() - started < 10


def test_refused_permission_is_an_error_at_once_not_an_outage(fake):
    fake.mode = "forbidden"
    with pytest.raises(PermissionError, match="HTTP 403 .*AccessControlException"):
        WebHDFSFile(fake.url + "/data/f", user="u", outage=60).read(1)
    assert len(fake.opens()) == 1


def test_only_webhdfs_urls_with_host_and_port_are_accepted():
    with pytest.raises(ValueError, match="not a webhdfs://host:port/path URL"):
        WebHDFSFile("hdfs:///data/f")


def test_the_am_filesystem_times_out_on_a_namenode_that_does_not_answer():
    from primus_runtime.hadoop import hdfs_filesystem

    with socket.socket() as silent:  # accepts connections (the kernel's backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        fs = hdfs_filesystem(f"webhdfs://127.0.0.1:{port}/data", timeout=0.5)
        with pytest.raises(OSError, match="Read timed out"):
            fs.info("/data/_SUCCESS")


def test_the_jobs_storage_outage_timeout_reaches_the_executors_reads(fake, monkeypatch, tmp_path):
    from conftest import make_spec
    from primus_runtime.backends.base import role_env
    from primus_runtime.protocol import ENV_STORAGE_OUTAGE_TIMEOUT
    from primus_runtime.spec import JobSpec

    (tmp_path / "20200103").mkdir()
    spec = JobSpec.model_validate(make_spec(
        [{"name": "worker", "replicas": 1, "command": "cat", "consumes_input": True}],
        input={"sources": [{"name": "d", "path": str(tmp_path) + "/{{YYYY}}{{MM}}{{DD}}/"}],
               "time_range": {"start": "2020-01-03", "end": "2020-01-03"}, "storage_outage_timeout": "1s"}))
    env = role_env(spec, "worker")
    assert env[ENV_STORAGE_OUTAGE_TIMEOUT] == "1.0"
    monkeypatch.setenv(ENV_STORAGE_OUTAGE_TIMEOUT, env[ENV_STORAGE_OUTAGE_TIMEOUT])
    fake.mode, fake.down_for = "down", 100
    with pytest.raises(OSError, match=r"HTTP 503 .*gave up after 1 s"):  # the job's limit, not 120 s
        WebHDFSFile(fake.url + "/data/f", user="u").read(1)
