"""What an AM's HTTP answer (or its absence) means: one rule set, ``api_client.check_answer`` and
``transport_error``, which ``AMClient`` and the provider's aiohttp path both use."""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from primus_runtime.api_client import (
    AMClient,
    AMRejected,
    AMUnavailable,
    AMUntrusted,
    check_answer,
    transport_error,
)

#: path -> (status, body) the stub AM answers with.
ANSWERS = {
    "/ok": (200, b'{"job": {"state": "running"}}'),
    "/busy": (503, b'{"error": "shutting down"}'),
    "/ending": (409, b'{"error": "the job is already killed"}'),
    "/token": (401, b"missing or wrong token, no JSON"),
}


class _StubAM(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        status, body = ANSWERS[self.path.removeprefix("/api/v1")]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stub_am() -> Iterator[str]:
    """``host:port`` of an HTTP server answering as ``ANSWERS`` says."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StubAM)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_2xx_answer_is_read():
    check_answer(200, b"{}")  # no error


def test_a_5xx_answer_means_the_am_is_unavailable():
    with pytest.raises(AMUnavailable, match="HTTP 503"):
        check_answer(503, b'{"error": "shutting down"}')


def test_a_4xx_answer_is_a_refusal_with_the_ams_own_error_text():
    with pytest.raises(AMRejected) as info:
        check_answer(409, b'{"error": "the job is already killed"}')
    assert (info.value.status, info.value.message) == (409, "the job is already killed")
    with pytest.raises(AMRejected, match="HTTP 401: missing or wrong token, no JSON"):
        check_answer(401, b"missing or wrong token, no JSON")  # no JSON: the body's start


def test_a_certificate_that_does_not_verify_means_untrusted_whatever_library_raised_it():
    error = ssl.SSLCertVerificationError("certificate verify failed")
    error.verify_message = "self-signed certificate"
    assert isinstance(transport_error("am:1", error), AMUntrusted)
    assert "self-signed certificate" in str(transport_error("am:1", error))

    class AiohttpStyle(Exception):  # aiohttp.ClientConnectorCertificateError carries it so
        certificate_error = error

    untrusted = transport_error("am:1", AiohttpStyle())
    assert isinstance(untrusted, AMUntrusted) and str(untrusted).startswith("TLS: the certificate of the AM at am:1")


@pytest.mark.parametrize("error", [ConnectionRefusedError(111, "Connection refused"), ConnectionResetError(),
                                   TimeoutError(), OSError("no route to host")], ids=repr)
def test_any_other_failure_to_get_an_answer_means_unavailable(error):
    unavailable = transport_error("am:1", error)
    assert type(unavailable) is AMUnavailable and str(unavailable)  # never an empty message


def test_the_am_client_maps_real_answers_by_those_rules(stub_am):
    client = AMClient(stub_am, "token")
    try:
        assert client.get("/api/v1/ok", timeout=5) == json.loads(ANSWERS["/ok"][1])
        with pytest.raises(AMUnavailable, match="HTTP 503"):
            client.get("/api/v1/busy", timeout=5)
        with pytest.raises(AMRejected, match="HTTP 409: the job is already killed"):
            client.get("/api/v1/ending", timeout=5)
        with pytest.raises(AMRejected, match="HTTP 401: missing or wrong token"):
            client.get("/api/v1/token", timeout=5)
    finally:
        client.close()
    with socket.socket() as free:  # a port nobody listens on
        free.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{free.getsockname()[1]}"
    with pytest.raises(AMUnavailable):
        AMClient(closed, "token").get("/api/v1/ok", timeout=5)
