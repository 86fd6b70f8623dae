"""A thin asynchronous client of the Kubernetes API server, for the AM (aiohttp).

The AM makes a handful of calls (its pods, its Service, its ConfigMaps, pod logs) and watches its
executor pods. The ``kubernetes`` package would do the same, but importing it (its generated models)
cost about a third of a second of every AM start, on the path from submit to running, and its watch
blocks a thread. This client speaks the API's JSON directly: objects are plain dicts (``objects.py``
reads pods into typed models), errors are ``ApiError`` (the API's ``Status``) or ``ApiUnreachable``
(no answer within the timeouts: said at once, never hung on). The client side (the CLI, Airflow)
keeps the ``kubernetes`` package.

Credentials: the pod's service account (``in_cluster``: the projected token, re-read as the kubelet
rotates it, and the cluster's CA), or a kubeconfig file (``from_kubeconfig``: tests, and an AM run
by hand).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import ssl
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

log = logging.getLogger("primus.kubernetes")

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# The projected token is rotated by the kubelet (hourly by default, valid longer): read it again
# this often rather than on every request.
TOKEN_REREAD_SECONDS = 60.0
CONNECT_TIMEOUT = 5.0  # an API server that does not accept within this is reported unreachable
REQUEST_TIMEOUT = 30.0  # one call, answer included (watches and log follows have their own)
# A connection that cannot be made is tried again this many times (the request was never sent:
# safe for any verb), with these pauses, then reported.
CONNECT_RETRIES = (0.2, 0.5, 1.0)
WATCH_SECONDS = 300  # the server ends a watch after this; it is renewed from the last resourceVersion
WATCH_RETRY_MAX = 5.0  # the longest pause between two attempts to reconnect a watch


class ConfigError(Exception):
    """No usable credentials (not in a pod, an unsupported kubeconfig)."""


class ApiError(Exception):
    """The API server answered with an error: ``status`` is the HTTP status (404 not found, 409
    exists, 410 gone...), ``reason`` the Status object's reason, ``message`` its message."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(f"HTTP {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class ApiUnreachable(ConnectionError):
    """The API server did not answer (refused, reset, timed out)."""


@dataclass(frozen=True)
class Credentials:
    """Where the API server is and how to prove who we are. ``token_file``: a bearer token read
    from this file (and read again, it rotates); ``ssl_context``: the cluster's CA and, for a
    kubeconfig user with a client certificate, that certificate; None: TLS verification off."""

    server: str
    ssl_context: ssl.SSLContext | None
    token: str | None = None
    token_file: str | None = None
    namespace: str | None = None  # the pod's own (in_cluster), or the kubeconfig context's


def in_cluster(directory: str = SERVICE_ACCOUNT_DIR) -> Credentials:
    """The pod's service account: ``KUBERNETES_SERVICE_HOST``/``_PORT`` and the projected token,
    CA and namespace."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("not in a pod: KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set")
    folder = Path(directory)
    if not (folder / "token").is_file():
        raise ConfigError(f"no service account token at {folder / 'token'} (automountServiceAccountToken off?)")
    host = f"[{host}]" if ":" in host else host  # an IPv6 address
    namespace = folder / "namespace"
    return Credentials(f"https://{host}:{port}", ssl.create_default_context(cafile=str(folder / "ca.crt")),
                       token_file=str(folder / "token"),
                       namespace=namespace.read_text().strip() if namespace.is_file() else None)


def from_kubeconfig(path: str | None = None, context: str | None = None) -> Credentials:
    """A kubeconfig's cluster and user (``path``, else ``$KUBECONFIG``'s first file, else
    ``~/.kube/config``): server, CA (file or data, or insecure-skip-tls-verify), and a token
    (``token``, ``tokenFile``) or a client certificate (file or data). Exec and auth-provider
    plugins are not supported: the AM runs with its service account."""
    import yaml

    path = path or (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0] or str(Path.home() / ".kube/config")
    try:
        config = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read the kubeconfig {path}: {exc}") from None
    name = context or config.get("current-context")
    ctx = _named(config, "contexts", name, path)["context"]
    cluster = _named(config, "clusters", ctx["cluster"], path)["cluster"]
    user = _named(config, "users", ctx["user"], path).get("user") or {}
    if "exec" in user or "auth-provider" in user:
        raise ConfigError(f"{path}: user {ctx['user']!r} authenticates through a plugin (exec/auth-provider), "
                          f"which this client does not run; use a token or a client certificate")
    base = Path(path).parent
    context_ssl = None if cluster.get("insecure-skip-tls-verify") else _ssl_context(cluster, user, base)
    token_file = user.get("tokenFile")
    return Credentials(str(cluster["server"]).rstrip("/"), context_ssl, token=user.get("token"),
                       token_file=str(base / token_file) if token_file else None, namespace=ctx.get("namespace"))


def _named(config: dict[str, Any], section: str, name: str | None, path: str) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            return dict(entry)
    raise ConfigError(f"{path}: no {section[:-1]} named {name!r}")


def _ssl_context(cluster: dict[str, Any], user: dict[str, Any], base: Path) -> ssl.SSLContext:
    if "certificate-authority-data" in cluster:
        context = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    elif "certificate-authority" in cluster:
        context = ssl.create_default_context(cafile=str(base / cluster["certificate-authority"]))
    else:
        context = ssl.create_default_context()
    cert, key = _pem(user, "client-certificate", base), _pem(user, "client-key", base)
    if cert is not None:
        # load_cert_chain reads files only: the PEMs go through a private temporary directory.
        with tempfile.TemporaryDirectory(prefix="primus-kube-") as private:
            cert_file, key_file = Path(private, "cert.pem"), Path(private, "key.pem")
            cert_file.write_bytes(cert)
            key_file.write_bytes(key or b"")
            context.load_cert_chain(str(cert_file), str(key_file) if key else None)
    return context


def _pem(user: dict[str, Any], field: str, base: Path) -> bytes | None:
    if f"{field}-data" in user:
        return base64.b64decode(user[f"{field}-data"])
    if field in user:
        return (base / user[field]).read_bytes()
    return None


class KubeApi:
    """Calls to one API server. Paths are the API's (``/api/v1/namespaces/NS/pods``); bodies and
    answers are JSON dicts. The HTTP session is made on first use, in the running loop."""

    def __init__(self, credentials: Credentials, connect_timeout: float = CONNECT_TIMEOUT,
                 request_timeout: float = REQUEST_TIMEOUT, connect_retries: tuple[float, ...] = CONNECT_RETRIES):
        self.credentials = credentials
        self.server = credentials.server
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.connect_retries = connect_retries
        self._session: aiohttp.ClientSession | None = None
        self._token: tuple[float, str | None] = (0.0, credentials.token)

    # --- plumbing ---

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self.credentials.ssl_context or False, limit=64)
            self._session = aiohttp.ClientSession(connector=connector, json_serialize=json.dumps)
        return self._session

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        token = self._bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def _bearer(self) -> str | None:
        read_at, token = self._token
        path = self.credentials.token_file
        if path and time.monotonic() - read_at > TOKEN_REREAD_SECONDS:
            token = Path(path).read_text().strip()
            self._token = (time.monotonic(), token)
        return token

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(self, method: str, path: str, params: dict[str, Any] | None = None,
                      body: Any = None, content_type: str = "application/json",
                      timeout: float | None = None) -> bytes:
        """The answer's body; ``ApiError`` for an error status, ``ApiUnreachable`` when there is no
        answer. A connection refused is tried again (``connect_retries``): the call was not sent."""
        data = None if body is None else json.dumps(body).encode()
        for pause in (*self.connect_retries, None):
            try:
                return await self._once(method, path, params, data, content_type if data else None, timeout)
            except aiohttp.ClientConnectorError as exc:
                if pause is None or isinstance(exc, aiohttp.ClientSSLError):  # TLS refused: no retry helps
                    raise self._unreachable(exc) from None
                await asyncio.sleep(pause)
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _once(self, method: str, path: str, params: dict[str, Any] | None, data: bytes | None,
                    content_type: str | None, timeout: float | None) -> bytes:
        limit = aiohttp.ClientTimeout(total=timeout or self.request_timeout, connect=self.connect_timeout)
        try:
            async with self._session_now().request(method, self.server + path, params=_query(params), data=data,
                                                   headers=self._headers(content_type), timeout=limit) as reply:
                body = await reply.read()
                if reply.status >= 400:
                    raise _api_error(reply.status, body)
                return body
        except aiohttp.ClientConnectorError:
            raise
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise self._unreachable(exc) from None

    def _unreachable(self, exc: BaseException) -> ApiUnreachable:
        if isinstance(exc, aiohttp.ClientSSLError):
            return ApiUnreachable(f"the Kubernetes API server at {self.server} cannot be trusted (TLS: {exc})")
        what = "timed out" if isinstance(exc, asyncio.TimeoutError) else f"{type(exc).__name__}: {exc}"
        return ApiUnreachable(f"the Kubernetes API server at {self.server} does not answer ({what})")

    async def call(self, method: str, path: str, params: dict[str, Any] | None = None, body: Any = None,
                   content_type: str = "application/json") -> dict[str, Any]:
        """``request`` whose answer is a JSON object."""
        answer: dict[str, Any] = json.loads(await self.request(method, path, params, body, content_type))
        return answer

    # --- the calls the AM makes ---

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        return await self.call("GET", path, params)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.call("POST", path, body=body)

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        return await self.call("PATCH", path, body=patch, content_type="application/merge-patch+json")

    async def delete(self, path: str, grace_seconds: int | None = None, missing_ok: bool = True) -> bool:
        """Delete one object (``grace_seconds`` None: its own grace period); False when it was not
        there (and ``missing_ok``)."""
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        try:
            await self.call("DELETE", path, body=options)
        except ApiError as exc:
            if exc.status == 404 and missing_ok:
                return False
            raise
        return True

    async def read_log(self, namespace: str, pod: str, container: str, since_time: str | None = None,
                       limit_bytes: int | None = None, timestamps: bool = False,
                       tail_lines: int | None = None) -> bytes:
        """A container's log: from ``since_time`` (RFC 3339; the API keeps whole seconds), at most
        ``limit_bytes``, each line led by its RFC 3339 time (``timestamps``), the last ``tail_lines``."""
        params = {"container": container, "sinceTime": since_time, "limitBytes": limit_bytes,
                  "timestamps": timestamps or None, "tailLines": tail_lines}
        return await self.request("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}/log", params)

    async def watch(self, path: str, resource_version: str, timeout_seconds: int = WATCH_SECONDS,
                    **params: Any) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """(type, object) of each change after ``resource_version``, until the server ends the
        watch; an ``ERROR`` event is raised as ``ApiError`` (410: the version is too old)."""
        query = {**params, "watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": timeout_seconds}
        # No total timeout: the server ends it. A silent connection (bookmarks come about every
        # minute) is given up after the watch's own length.
        limit = aiohttp.ClientTimeout(total=None, connect=self.connect_timeout, sock_read=timeout_seconds + 30)
        try:
            async with self._session_now().get(self.server + path, params=_query(query), headers=self._headers(),
                                               timeout=limit) as reply:
                if reply.status >= 400:
                    raise _api_error(reply.status, await reply.read())
                async for line in _lines(reply.content):
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        status = event["object"]
                        raise ApiError(int(status.get("code") or 500), str(status.get("reason", "")),
                                       str(status.get("message", "")))
                    yield event["type"], event["object"]
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise self._unreachable(exc) from None


async def list_and_watch(api: KubeApi, path: str, label_selector: str, resource_version: str | None = None,
                         timeout_seconds: int = WATCH_SECONDS) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """Every change of the objects at ``path`` matching ``label_selector``, for ever: first
    ``("SYNC", all of them)``, then ``(type, [object])`` per event (``resource_version``: watch from
    there, without listing first). The watch resumes from the last resourceVersion seen (bookmarks
    included) after the server ends it or the connection drops; a version the server no longer has
    (410 Gone) lists again (another ``SYNC``). Errors after the first listing are retried with a
    growing pause, logged; the first listing's are raised (no rights, no server: a caller waiting
    for it is told)."""
    version = resource_version
    started = resource_version is not None  # listed once, or given a version to go on from
    pause = 0.1
    while True:
        try:
            if version is None:
                listing = await api.get(path, labelSelector=label_selector)
                version = str(listing["metadata"]["resourceVersion"])
                started = True
                yield "SYNC", list(listing.get("items") or [])
            async for kind, obj in api.watch(path, version, timeout_seconds, labelSelector=label_selector):
                version = str(obj["metadata"]["resourceVersion"])
                pause = 0.1
                if kind != "BOOKMARK":
                    yield kind, [obj]
        except ApiError as exc:
            if exc.status == 410:
                log.info("watching %s: version %s is gone (%s); listing again", path, version, exc.message)
            elif not started:
                raise
            else:
                log.warning("watching %s failed, again in %.1fs: %s", path, pause, exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, WATCH_RETRY_MAX)
            version = None  # 410 Gone, or an error of the version: list afresh
        except ApiUnreachable as exc:
            if not started:
                raise
            log.warning("watching %s: %s; again in %.1fs from version %s", path, exc, pause, version)
            await asyncio.sleep(pause)
            pause = min(pause * 2, WATCH_RETRY_MAX)


async def _lines(stream: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """The stream's non-empty lines, however long (one event is one line: a large object makes a
    line longer than aiohttp's own line reader takes)."""
    pending = b""
    async for chunk in stream.iter_any():
        pending += chunk
        if b"\n" not in chunk:
            continue
        *complete, pending = pending.split(b"\n")
        for line in complete:
            if line.strip():
                yield line


def _api_error(status: int, body: bytes) -> ApiError:
    try:
        reply = json.loads(body)
    except ValueError:
        reply = {}
    if not isinstance(reply, dict):
        reply = {}
    return ApiError(status, str(reply.get("reason", "")), str(reply.get("message") or body[:300].decode(errors="replace")))


def _query(params: dict[str, Any] | None) -> dict[str, str]:
    """Query parameters without the unset ones; booleans as the API writes them."""
    out = {}
    for key, value in (params or {}).items():
        if value is not None:
            out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def pods_path(namespace: str, name: str | None = None) -> str:
    return f"/api/v1/namespaces/{namespace}/pods" + (f"/{name}" if name else "")


def services_path(namespace: str, name: str | None = None) -> str:
    return f"/api/v1/namespaces/{namespace}/services" + (f"/{name}" if name else "")


def config_maps_path(namespace: str, name: str | None = None) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps" + (f"/{name}" if name else "")
