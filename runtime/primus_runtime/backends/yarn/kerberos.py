"""SPNEGO (Kerberos over HTTP) for the YARN backend's REST calls: the ResourceManager's and the
NodeManagers' REST APIs and WebHDFS, from a principal's keytab.

The credentials live in a private in-memory cache (``MEMORY:``): logging in from the keytab never
touches the user's default credential cache (``KRB5CCNAME``). Each request carries a fresh
``Authorization: Negotiate`` token for ``HTTP@<host of the URL>`` (opportunistic: no 401 round
trip). Needs ``gssapi`` (the ``kerberos`` extra); nothing here is imported without a keytab.

Used by urllib (``opener``: the RM and NM calls) and by requests (``requests_auth``: fsspec's
WebHDFS, see ``hadoop.hdfs_filesystem``).
"""

from __future__ import annotations

import base64
import logging
import os
import secrets
import time
import urllib.request
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger("primus.yarn")

#: The AM's container: its keytab (a file YARN localized there) and principal.
ENV_PRINCIPAL = "PRIMUS_KERBEROS_PRINCIPAL"
ENV_KEYTAB = "PRIMUS_KERBEROS_KEYTAB"
#: Name of the keytab in the AM's container (shipped to the AM only).
KEYTAB_NAME = "primus.keytab"


class KerberosError(RuntimeError):
    """A keytab or principal that does not work: the message names the field and the value."""


@dataclass
class KerberosLogin:
    principal: str
    keytab: str
    #: Where the values come from, for messages ("backend.principal", an environment variable...).
    fields: tuple[str, str] = ("principal", "keytab")
    _ccache: str = field(default_factory=lambda: f"MEMORY:primus-{secrets.token_hex(8)}")

    def check(self) -> None:
        """Fail early and clearly: the keytab must be a readable file holding the principal's key,
        and the KDC must accept it (a ticket is fetched now)."""
        principal_field, keytab_field = self.fields
        if not self.principal:
            raise KerberosError(f"{principal_field} is missing (the keytab {self.keytab} needs its principal)")
        if not os.path.isfile(self.keytab) or not os.access(self.keytab, os.R_OK):
            raise KerberosError(f"{keytab_field}: {self.keytab} is not a readable file")
        self.credentials  # noqa: B018 - logs in (raises KerberosError)

    @cached_property
    def credentials(self) -> Any:
        import gssapi

        principal_field, keytab_field = self.fields
        try:
            name = gssapi.Name(self.principal, gssapi.NameType.kerberos_principal)
            creds = gssapi.Credentials(name=name, usage="initiate",
                                       store={"client_keytab": self.keytab, "ccache": self._ccache})
            # Acquiring from a keytab is lazy: asking for the lifetime gets the ticket now.
            creds.lifetime  # noqa: B018
            return creds
        except gssapi.exceptions.GSSError as exc:
            raise KerberosError(f"cannot log in as {principal_field} {self.principal!r} with {keytab_field} "
                                f"{self.keytab}: {exc.gen_message()}") from None

    def token(self, url: str) -> str:
        """The ``Authorization`` header's value for a request to ``url``."""
        import gssapi

        host = urlsplit(url).hostname or "localhost"
        try:
            target = gssapi.Name(f"HTTP@{host}", gssapi.NameType.hostbased_service)
            context = gssapi.SecurityContext(name=target, creds=self.credentials, usage="initiate")
            token = context.step()
        except gssapi.exceptions.GSSError as exc:
            raise KerberosError(f"SPNEGO to {host} as {self.principal!r}: {exc.gen_message()}") from None
        return "Negotiate " + base64.b64encode(token or b"").decode()

    def opener(self) -> urllib.request.OpenerDirector:
        """A urllib opener whose requests carry a token (``opener().open(request, timeout=...)``)."""
        return urllib.request.build_opener(_SpnegoHandler(self))

    def requests_auth(self) -> Any:
        import requests

        login = self

        class _Auth(requests.auth.AuthBase):
            def __call__(self, request: Any) -> Any:
                request.headers["Authorization"] = login.token(request.url)
                return request

        return _Auth()


class _SpnegoHandler(urllib.request.BaseHandler):
    handler_order = 400  # before the default handlers open the connection

    def __init__(self, login: KerberosLogin):
        self.login = login

    def http_request(self, request: urllib.request.Request) -> urllib.request.Request:
        request.add_unredirected_header("Authorization", self.login.token(request.full_url))
        return request

    https_request = http_request


def login_from(principal: str | None, keytab: str | None,
               fields: tuple[str, str] = ("principal", "keytab")) -> KerberosLogin | None:
    """A checked login when a keytab is given (None when neither is: simple authentication)."""
    if not keytab and not principal:
        return None
    if not keytab:
        raise KerberosError(f"{fields[1]} is missing ({fields[0]} {principal!r} is set)")
    login = KerberosLogin(principal or "", keytab, fields)
    login.check()
    return login


def webhdfs_delegation_token(webhdfs: str, login: KerberosLogin, timeout: float = 10.0) -> str:
    """A WebHDFS delegation token of ``login``'s user (``op=GETDELEGATIONTOKEN``), the form
    ``delegation=`` takes: for executors, which get no keytab."""
    import json

    with urlopen(f"{webhdfs.rstrip('/')}/webhdfs/v1/?op=GETDELEGATIONTOKEN", timeout, login) as response:
        return str(json.loads(response.read())["Token"]["urlString"])


def renew_webhdfs_delegation_token(webhdfs: str, login: KerberosLogin, token: str, timeout: float = 10.0) -> float:
    """Renew ``token`` (``op=RENEWDELEGATIONTOKEN``, as its renewer: the keytab's user); when it now
    expires (epoch seconds): never past its max lifetime, so a renewal that no longer moves it on says
    the token is near its end."""
    import json

    request = urllib.request.Request(f"{webhdfs.rstrip('/')}/webhdfs/v1/?op=RENEWDELEGATIONTOKEN&token={token}",
                                     method="PUT")
    with urlopen(request, timeout, login) as response:
        return int(json.loads(response.read())["long"]) / 1000


class DelegationTokens:
    """The WebHDFS delegation token executors read HDFS with (they get no keytab), kept valid for the
    life of the job by the AM, which holds the keytab.

    A token lives until its expiry (the NameNode's renew interval, a day by default) unless renewed,
    and at most its max lifetime (7 days by default). ``refresh()``, called when ``due()``, renews it
    half-way to its expiry; once a renewal no longer moves the expiry as far as the first one did (the
    max lifetime caps it), or fails, it gets a new token, well before the old one ends. Each new token
    moves ``version`` on: the AM hands it to running executors on their heartbeats."""

    RETRY_SECONDS = 30.0  # after a failed renewal and fetch: the current token is still good meanwhile

    def __init__(self, webhdfs: str, login: KerberosLogin, clock: Any = time.time):
        self.webhdfs, self.login, self.clock = webhdfs, login, clock
        self.token: str | None = None
        self.version = 0
        self.expires_at = 0.0
        self.lifetime = 0.0  # how far a renewal of a fresh token moves its expiry: the renew interval
        self.next_at = 0.0

    def current(self) -> str:
        if self.token is None:
            self._new()
        assert self.token is not None
        return self.token

    def due(self) -> bool:
        return self.token is not None and self.clock() >= self.next_at

    def refresh(self) -> bool:
        """Renew the token, or replace it when it nears its max lifetime; whether it was replaced."""
        assert self.token is not None
        try:
            expires = renew_webhdfs_delegation_token(self.webhdfs, self.login, self.token)
        except Exception as exc:  # noqa: BLE001 - expired, cancelled, or the NameNode away: try a new one
            log.warning("renewing the executors' WebHDFS delegation token failed (%s): getting a new one", exc)
            return self._replace()
        now = self.clock()
        if expires - now < 0.75 * self.lifetime:  # capped by the max lifetime: its end is near
            log.info("the executors' WebHDFS delegation token ends at %s (its max lifetime): getting a new one",
                     time.strftime("%H:%M:%S", time.localtime(expires)))
            return self._replace()
        self.expires_at, self.next_at = expires, now + (expires - now) / 2
        return False

    def _replace(self) -> bool:
        try:
            self._new()
        except Exception:  # noqa: BLE001 - the current token holds until it expires; retried soon
            log.exception("getting a new WebHDFS delegation token for the executors failed")
            self.next_at = self.clock() + min(self.RETRY_SECONDS, max(1.0, (self.expires_at - self.clock()) / 4))
            return False
        return True

    def _new(self) -> None:
        token = webhdfs_delegation_token(self.webhdfs, self.login)
        expires = renew_webhdfs_delegation_token(self.webhdfs, self.login, token)  # learns its expiry
        now = self.clock()
        self.token, self.version = token, self.version + 1
        self.expires_at, self.lifetime, self.next_at = expires, expires - now, now + (expires - now) / 2
        log.info("WebHDFS delegation token #%d for the executors, renewed until %s", self.version,
                 time.strftime("%H:%M:%S", time.localtime(expires)))


def urlopen(request: urllib.request.Request | str, timeout: float, login: KerberosLogin | None) -> Any:
    """``urllib.request.urlopen``, with SPNEGO when ``login`` is given."""
    if login is None:
        return urllib.request.urlopen(request, timeout=timeout)
    return login.opener().open(request, timeout=timeout)
