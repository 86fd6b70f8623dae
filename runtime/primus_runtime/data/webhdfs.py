"""Reading one HDFS file over WebHDFS with the standard library (the executor's HDFS reader).

The executor runs without site-packages, so this is ``http.client`` only. ``WebHDFSFile`` is a
binary, seekable file object (``read``, ``readinto``, ``seek``, ``tell``) for
``webhdfs://namenode-http-host:port/path`` URLs; the AM hands executors ``hdfs://`` inputs in
that form, so executors need no Hadoop configuration.

A read asks the NameNode to ``OPEN`` the file at the current offset (no length: the rest of the
file), follows its 307 redirect to a DataNode and then streams that one response: sequential
reads cost one request pair per file, not one per read. A seek only moves the position; the
next read reads past up to ``READ_PAST`` bytes on the open stream, or opens a new one at the
new offset. The file's length comes with the first response, or (``GETFILESTATUS``, once) when
needed before one.
User: ``HADOOP_USER_NAME``, else the login (simple authentication, as Hadoop's own clients); on a
Kerberized cluster the delegation token the AM put in ``PRIMUS_WEBHDFS_DELEGATION`` instead (the
NameNode's redirect to a DataNode carries it on).

Every socket operation times out after ``hadoop.WEBHDFS_TIMEOUT`` seconds, so an unreachable or stalled
NameNode or DataNode is an ``OSError`` (naming the server), never a hang. A response that ends
before its ``Content-Length`` is an ``OSError`` too, never a short file.

An outage is waited through, as Hadoop's own client does: a server unreachable, a stream cut, an
HTTP 5xx, a NameNode in safe mode or standby. The read asks the NameNode again (which may name
another replica's DataNode) after 0.5, 1, 2, 4, 5, 5 ... s, from where it stopped, for up to
``outage`` seconds (the job's ``input.storage_outage_timeout``, 120 by default: a DataNode
restart) before it fails; a warning says when an outage starts and when reading goes on. Missing
files, refused permissions and other answers are errors at once.
"""

from __future__ import annotations

import http.client
import io
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from ..hadoop import ENV_WEBHDFS_DELEGATION, WEBHDFS_OUTAGE_SECONDS, WEBHDFS_TIMEOUT, hadoop_user
from ..protocol import ENV_STORAGE_OUTAGE_TIMEOUT

log = logging.getLogger(__name__)

READ_PAST = 1024 * 1024  # a forward seek up to this far reads past the bytes instead of a new request
_REDIRECTS = 3
_RETRY_FIRST, _RETRY_MAX = 0.5, 5.0  # seconds between tries through an outage: doubled each time
#: RemoteExceptions that say "not now" rather than "never" (a NameNode starting, failing over).
_TRANSIENT_REMOTE = ("StandbyException", "RetriableException", "SafeModeException", "ConnectException",
                     "SocketTimeoutException", "ServerNotRunningYetException")


class _Unavailable(OSError):
    """HDFS cannot answer now (a server unreachable, a stream cut, a 5xx, safe mode): worth waiting for."""


class WebHDFSFile(io.RawIOBase):
    """A file on HDFS, read through WebHDFS (``webhdfs://host:port/path``)."""

    def __init__(self, url: str, user: str | None = None, timeout: float = WEBHDFS_TIMEOUT,
                 outage: float | None = None):
        super().__init__()
        parts = urlsplit(url)
        if parts.scheme != "webhdfs" or not parts.hostname or not parts.port:
            raise ValueError(f"not a webhdfs://host:port/path URL: {url!r}")
        self.url = url
        self.path = parts.path or "/"
        self._namenode = (parts.hostname, parts.port)
        self._target = "/webhdfs/v1" + quote(self.path)
        self._user = user or hadoop_user()
        self._timeout = timeout
        self._outage = float(os.environ.get(ENV_STORAGE_OUTAGE_TIMEOUT, WEBHDFS_OUTAGE_SECONDS)) if outage is None \
            else outage
        self._pos = 0
        self._size: int | None = None
        self._conn: http.client.HTTPConnection | None = None
        self._response: http.client.HTTPResponse | None = None
        self._at = 0  # file offset of the open response's next byte

    # --- io.RawIOBase ---

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._pos
        elif whence == io.SEEK_END:
            offset += self.size()
        elif whence != io.SEEK_SET:
            raise ValueError(f"invalid whence {whence}")
        if offset < 0:
            raise ValueError(f"negative seek position {offset}")
        self._pos = offset
        return offset

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if not view or self._through_outage(self._at_end):
            return 0
        return self._through_outage(lambda: self._read_into(view))

    def _read_into(self, view: memoryview) -> int:
        response = self._stream()
        try:
            count = response.readinto(view)
        except (OSError, http.client.HTTPException) as exc:  # a timeout, a reset, a broken chunk
            self._drop()
            raise _Unavailable(f"reading from the DataNode failed at byte {self._pos}: {type(exc).__name__}: "
                               f"{exc}") from exc
        if count == 0:  # http.client returns 0 (not an error) when the connection ends early
            self._drop()
            raise _Unavailable(f"the DataNode's response ended at byte {self._pos} of {self.size()} (short read)")
        self._pos += count
        self._at += count
        return count

    def readall(self) -> bytes:  # io.RawIOBase's reads 8 KiB at a time
        parts = []
        while chunk := self.read(1024 * 1024):
            parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        self._drop()
        super().close()

    # --- WebHDFS ---

    def size(self) -> int:
        """The file's length in bytes (``GETFILESTATUS``, asked once)."""
        if self._size is None:
            conn, response = self._request(self._namenode, self._url("GETFILESTATUS"))
            try:
                status = json.loads(response.read())["FileStatus"]
            finally:
                conn.close()
            if status.get("type") != "FILE":
                raise IsADirectoryError(f"{self.path} is a {status.get('type')}, not a file")
            self._size = int(status["length"])
        return self._size

    def _at_end(self) -> bool:
        """Whether ``_pos`` is at (or past) the end of the file. Before the first response no
        GETFILESTATUS is asked: the first read opens a response at ``_pos``, which tells the length
        (an OPEN without a length answers with the rest of the file). Readers start inside the file
        (a split's start; an OPEN at its end would be refused), or ask ``size()`` (a seek to the end)."""
        if self._size is None and self._response is None:
            return False
        return self._pos >= self.size()

    def _stream(self) -> http.client.HTTPResponse:
        """The open response, positioned at ``_pos``: the current one if it can get there by reading
        at most ``READ_PAST`` bytes, else a new ``OPEN`` from ``_pos`` to the end of the file."""
        response = self._response
        if response is not None and self._at <= self._pos <= self._at + READ_PAST:
            while self._at < self._pos:
                skipped = len(response.read(min(self._pos - self._at, 64 * 1024)))
                if not skipped:
                    break
                self._at += skipped
            if self._at == self._pos:
                return response
        self._drop()
        self._conn, response = self._request(self._namenode, self._url("OPEN", offset=self._pos))
        self._response, self._at = response, self._pos
        if self._size is None and response.length is not None:
            self._size = self._pos + response.length  # OPEN without a length: the rest of the file
        return response

    def _through_outage(self, step: Callable[[], Any]) -> Any:
        """``step()``, tried again through an outage of up to ``outage`` seconds (see the module)."""
        started, pause, at = None, _RETRY_FIRST, self._pos
        while True:
            try:
                result = step()
            except _Unavailable as exc:
                now = time.monotonic()
                if started is None:
                    started = now
                    log.warning("HDFS unavailable reading %s at byte %d (%s): trying again for up to %.0f s",
                                self.path, self._pos, exc, self._outage)
                if now - started + pause > self._outage:
                    raise OSError(f"{exc} (HDFS unavailable for {now - started:.0f} s: gave up after "
                                  f"{self._outage:.0f} s)") from exc
                time.sleep(pause)
                pause = min(pause * 2, _RETRY_MAX)
                continue
            if started is not None:
                log.warning("HDFS available again: reading %s on from byte %d after %.1f s", self.path, at,
                            time.monotonic() - started)
            return result

    def _url(self, op: str, **params: Any) -> str:
        token = os.environ.get(ENV_WEBHDFS_DELEGATION)
        who = {"delegation": token} if token else {"user.name": self._user}
        return f"{self._target}?{urlencode({'op': op, **who, **params})}"

    def _request(self, server: tuple[str, int],
                 target: str) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """GET ``target``, following the NameNode's redirect to a DataNode: the connection and its 200
        response (the caller closes the connection), or an OSError."""
        for _ in range(_REDIRECTS + 1):
            conn = http.client.HTTPConnection(*server, timeout=self._timeout)
            try:
                conn.request("GET", target)
                response = conn.getresponse()
                if response.status == 200:
                    return conn, response
                body = response.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise _Unavailable(f"WebHDFS server {server[0]}:{server[1]} unreachable: {type(exc).__name__}: "
                                   f"{exc}") from exc
            conn.close()
            if response.status not in (301, 302, 303, 307, 308):
                raise _error(response.status, body, server)
            location = urlsplit(response.getheader("Location") or "")
            if location.scheme != "http" or not location.hostname:
                raise OSError(f"WebHDFS server {server[0]}:{server[1]} redirected to an unusable location "
                              f"{location.geturl()!r}")
            server = (location.hostname, location.port or 80)
            target = f"{location.path}?{location.query}" if location.query else location.path
        raise OSError(f"more than {_REDIRECTS} WebHDFS redirects for {self.url}")

    def _drop(self) -> None:
        if self._response is not None:
            self._response.close()
            self._response = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _error(status: int, body: bytes, server: tuple[str, int]) -> OSError:
    """The WebHDFS ``RemoteException`` as the matching OSError (FileNotFoundError for a missing file)."""
    try:
        remote = json.loads(body)["RemoteException"]
        kind, message = str(remote.get("exception", "")), str(remote.get("message", ""))
    except (ValueError, KeyError, TypeError):
        kind, message = "", body[:200].decode("utf-8", "replace")
    text = f"HTTP {status} from {server[0]}:{server[1]}: {kind + ': ' if kind else ''}{message}"
    if status == 404 or kind == "FileNotFoundException":
        return FileNotFoundError(text)
    if status >= 500 or kind in _TRANSIENT_REMOTE:
        return _Unavailable(text)
    if status in (401, 403) and kind in ("AccessControlException", "SecurityException", ""):
        return PermissionError(text)
    return OSError(text)
