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
import os
import secrets
import urllib.request
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

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


def urlopen(request: urllib.request.Request | str, timeout: float, login: KerberosLogin | None) -> Any:
    """``urllib.request.urlopen``, with SPNEGO when ``login`` is given."""
    if login is None:
        return urllib.request.urlopen(request, timeout=timeout)
    return login.opener().open(request, timeout=timeout)
