"""bench/netfault.py's proxy does what each mode says, against a plain echo server."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest
from netfault import FaultProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with FaultProxy(server.server_address[:2]) as proxy:  # type: ignore[arg-type]
        yield proxy
    server.shutdown()
    server.server_close()


def _connect(proxy: FaultProxy) -> socket.socket:
    host, port = proxy.address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)


def test_pass_and_delay_deliver_every_byte_in_order(proxy):
    with _connect(proxy) as sock:
        sock.sendall(b"one")
        assert sock.recv(10) == b"one"
        proxy.set("delay", 0.2)
        started = time.monotonic()
        sock.sendall(b"two")
        assert sock.recv(10) == b"two"
        assert time.monotonic() - started >= 0.2  # delayed on the way there and back: at least once


def test_drop_forwards_nothing_until_passing_again(proxy):
    with _connect(proxy) as sock:
        proxy.set("drop")
        sock.sendall(b"lost")
        sock.settimeout(0.5)
        with pytest.raises(socket.timeout):
            sock.recv(10)
        proxy.set("pass")
        sock.settimeout(5)
        sock.sendall(b"back")
        assert sock.recv(10) == b"back"


def test_reset_resets_open_and_new_connections(proxy):
    with _connect(proxy) as sock:
        sock.sendall(b"x")
        assert sock.recv(10) == b"x"
        proxy.set("reset")  # returns once the open connections are reset
        with pytest.raises(ConnectionResetError):
            sock.sendall(b"y")
            sock.recv(10)
    with pytest.raises(ConnectionResetError):  # the reset may already meet the connect, or else the read
        with _connect(proxy) as sock:
            sock.recv(10)


def test_bad_modes_are_refused_naming_the_value(proxy):
    with pytest.raises(ValueError, match="mode: must be one of pass, delay, drop, reset, got 'slow'"):
        proxy.set("slow")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="delay: must be > 0 seconds"):
        proxy.set("delay")
