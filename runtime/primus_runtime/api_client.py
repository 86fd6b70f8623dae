"""A small keep-alive JSON client for the AM API (standard library only: the
executor uses it on cluster nodes, the CLI and the provider from outside)."""

from __future__ import annotations

import http.client
import json
import ssl
from typing import Any

from .protocol import USER_HEADER


class AMUnavailable(Exception):
    """The AM did not answer (connection refused or reset, timeout, 5xx)."""


class AMRejected(Exception):
    """The AM answered with a client error (bad token, bad request): retrying won't help."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class AMUntrusted(AMRejected):
    """The AM's TLS certificate does not verify against the job's CA (another CA, or issued for
    another host): retrying won't help."""

    def __init__(self, address: str, reason: str):
        super().__init__(0, f"TLS: the certificate of the AM at {address} does not verify against the "
                            f"job's CA ({reason})")

    def __str__(self) -> str:
        return self.message


def verifying_context(ca_file: str) -> ssl.SSLContext:
    """A TLS client context trusting only the job's CA (``ca_file``, PEM) and checking the host name."""
    return ssl.create_default_context(cafile=ca_file)


def am_base_url(address: str, ca_file: str | None) -> str:
    """``scheme://host:port`` of the AM API: https for a job whose AM serves TLS (it has a CA file)."""
    return f"{'https' if ca_file else 'http'}://{address}"


def _error_text(data: bytes) -> str:
    try:
        return str(json.loads(data)["error"])
    except (ValueError, KeyError, TypeError):
        return data[:200].decode(errors="replace")


def check_answer(status: int, data: bytes) -> None:
    """What an HTTP answer of the AM means, for every client of its API (``AMClient`` here, the
    provider's aiohttp path): 5xx raises ``AMUnavailable`` (the AM cannot serve now: ask again
    later), 4xx ``AMRejected`` with the AM's own error text (asking again won't help), anything
    else is an answer to read."""
    if status >= 500:
        raise AMUnavailable(f"HTTP {status}")
    if status >= 400:
        raise AMRejected(status, _error_text(data))


def transport_error(address: str, exc: BaseException) -> AMUnavailable | AMUntrusted:
    """What a request that got no answer from the AM at ``address`` means: a certificate that does
    not verify against the job's CA is ``AMUntrusted`` (retrying won't help); anything else
    (refused, reset, timed out, a broken reply) is ``AMUnavailable``. ``exc`` may come from any
    HTTP library: aiohttp carries the TLS error as ``certificate_error``."""
    cert = getattr(exc, "certificate_error", exc)  # aiohttp's error is an SSLCertVerificationError too
    if isinstance(cert, ssl.SSLCertVerificationError):
        return AMUntrusted(address, getattr(cert, "verify_message", None) or str(cert))
    return AMUnavailable(str(exc) or type(exc).__name__)


class AMClient:
    """Speaks to the AM at ``address`` (``host:port``); over TLS when given the job's CA file, then
    trusting only that CA and checking the certificate names ``host``. ``user``: who asks, recorded
    with the actions it takes (else the AM records ``token``)."""

    def __init__(self, address: str, token: str, ca_file: str | None = None, user: str | None = None):
        host, _, port = address.rpartition(":")
        self.host, self.port = host, int(port)
        self._headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
        if user:
            self._headers[USER_HEADER] = user
        self._tls = verifying_context(ca_file) if ca_file else None
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
        except (OSError, http.client.HTTPException) as exc:  # ssl.SSLCertVerificationError is an OSError
            self.close()
            raise transport_error(f"{self.host}:{self.port}", exc) from None
        check_answer(response.status, data)
        return json.loads(data)

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._conn is None and self._tls is not None:
            self._conn = http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self._tls)
        elif self._conn is None:
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
