"""A TCP proxy that breaks the network on command, for chaos runs (bench/chaos.py, tests/chaos).

Put it between executors and the AM (the job's ``am.advertise`` is the proxy's address, ``am.port``
the AM's): every connection is forwarded to the AM, in the mode of the moment:

``pass``    bytes go through untouched;
``delay``   every chunk waits ``delay`` seconds before it is forwarded (a slow or congested link);
``drop``    a blackhole: connections are accepted and bytes read, nothing is forwarded either way
            (a partition: the peers only notice through their own timeouts);
``reset``   every open connection is reset (RST), new ones are reset the moment they connect.

The proxy runs its own event loop in a thread, so a synchronous test or benchmark drives it::

    with FaultProxy(("127.0.0.1", am_port)) as proxy:
        spec["am"]["advertise"] = proxy.address
        ...
        proxy.set("delay", 0.5)

Loopback only; standard library.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from typing import Literal

Mode = Literal["pass", "delay", "drop", "reset"]
MODES: tuple[Mode, ...] = ("pass", "delay", "drop", "reset")
CHUNK = 65536


class FaultProxy:
    def __init__(self, target: tuple[str, int], host: str = "127.0.0.1", port: int = 0):
        self.target = target
        self.mode: Mode = "pass"
        self.delay = 0.0
        self.connections = 0  # accepted so far, in every mode
        self._bind = (host, port)
        self._open: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="netfault", daemon=True)

    @property
    def address(self) -> str:
        """host:port clients connect to."""
        assert self._server is not None, "start() the proxy first"
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._accept, *self._bind))
        return self

    def set(self, mode: Mode, delay: float = 0.0) -> None:
        """Switch every connection, open or new, to ``mode`` (``delay``: seconds, for ``delay``)."""
        if mode not in MODES:
            raise ValueError(f"mode: must be one of {', '.join(MODES)}, got {mode!r}")
        if mode == "delay" and delay <= 0:
            raise ValueError(f"delay: must be > 0 seconds for mode 'delay', got {delay!r}")
        self.mode, self.delay = mode, delay
        if mode == "reset":  # done before this returns: what the caller sends next meets a reset connection
            self._call(self._reset_open())

    def stop(self) -> None:
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        self._reset_all()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if tasks:  # their connections are reset: they end on their own, promptly
            await asyncio.wait(tasks, timeout=2)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, coro):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.mode == "reset":
            _reset(client_writer)
            return
        try:
            am_reader, am_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(client_writer)  # the AM is down: the client sees a refused connection, as without us
            return
        self._open.update((client_writer, am_writer))
        await asyncio.gather(self._pump(client_reader, am_writer), self._pump(am_reader, client_writer),
                             return_exceptions=True)
        for writer in (client_writer, am_writer):
            self._open.discard(writer)
            writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(CHUNK):
                if self.mode == "delay":
                    await asyncio.sleep(self.delay)
                if self.mode == "drop":
                    continue
                writer.write(chunk)
                await writer.drain()
        finally:
            if not writer.is_closing():
                writer.close()  # half of the pair ended: end the other half (the AM or the client sees EOF)

    async def _reset_open(self) -> None:
        self._reset_all()

    def _reset_all(self) -> None:
        for writer in list(self._open):
            _reset(writer)
        self._open.clear()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST instead of a FIN (SO_LINGER 0), as a crashed peer or a firewall would."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:  # already closed (its pair's other half ended): abort is all that is left
            pass
    writer.transport.abort()


def free_port() -> int:
    """A port nothing listens on now (for ``am.port`` behind the proxy)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
