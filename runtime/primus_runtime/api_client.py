"""A small keep-alive JSON client for the AM API (standard library only: the
executor uses it on cluster nodes, the CLI and the provider from outside)."""

from __future__ import annotations

import http.client
import json
from typing import Any


class AMUnavailable(Exception):
    """The AM did not answer (connection refused or reset, timeout, 5xx)."""


class AMRejected(Exception):
    """The AM answered with a client error (bad token, bad request): retrying won't help."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


def _error_text(data: bytes) -> str:
    try:
        return str(json.loads(data)["error"])
    except (ValueError, KeyError, TypeError):
        return data[:200].decode(errors="replace")


class AMClient:
    def __init__(self, address: str, token: str):
        host, _, port = address.rpartition(":")
        self.host, self.port = host, int(port)
        self._headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
        self._conn: http.client.HTTPConnection | None = None

    def post(self, path: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        return self.request("POST", path, body, timeout)

    def get(self, path: str, timeout: float) -> dict[str, Any]:
        return self.request("GET", path, None, timeout)

    def request(self, method: str, path: str, body: dict[str, Any] | None, timeout: float) -> dict[str, Any]:
        payload = json.dumps(body).encode() if body is not None else None
        try:
            conn = self._connection(timeout)
            conn.request(method, path, payload, self._headers)
            response = conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise AMUnavailable(str(exc) or type(exc).__name__) from None
        if response.status >= 500:
            raise AMUnavailable(f"HTTP {response.status}")
        if response.status >= 400:
            raise AMRejected(response.status, _error_text(data))
        return json.loads(data)

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        else:
            self._conn.timeout = timeout
            if self._conn.sock is not None:
                self._conn.sock.settimeout(timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
