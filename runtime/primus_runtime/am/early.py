"""The AM's listening socket, opened first thing (standard library only).

The AM imports its stack (pydantic, aiohttp: most of its start-up) before it serves. Executors that
start beside it (the Kubernetes client starts the first ones with the job) would find nothing
listening and back off, and come back late. A backend that knows the AM's address before the AM
starts sets ``PRIMUS_AM_LISTEN=host:port``: ``am/__main__.py`` listens there before any other
import, their connections wait in the socket's backlog, and ``serve`` takes the socket over.
"""

from __future__ import annotations

import os
import socket
import sys

from ..protocol import ENV_AM_LISTEN

BACKLOG = 2048
_early: dict[tuple[str, int], socket.socket] = {}


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: a free port)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(BACKLOG)
    return sock


def listen() -> None:
    """Listen at ``$PRIMUS_AM_LISTEN`` now, if set. A failure is only said: ``serve`` binds again
    and reports its own error."""
    address = os.environ.get(ENV_AM_LISTEN)
    if not address:
        return
    host, _, port = address.rpartition(":")
    try:
        _early[(host, int(port))] = bind(host, int(port))
    except (OSError, ValueError) as exc:
        print(f"primus AM: cannot listen early at {address}: {exc}", file=sys.stderr)


def socket_for(host: str, port: int) -> socket.socket:
    """The socket opened early for ``host:port``, else a new one."""
    return _early.pop((host, port), None) or bind(host, port)
