"""Who may see a job's page: the job token, a session cookie, or a signed one-time link.

The API takes the job token in a header (never in a URL: URLs end up in logs and browser
histories). A browser has no header to send, so it signs in once: with the token in the login
form, or with a *ticket*, a short-lived one-time link the CLI or Airflow makes from the token
(`primus status`, the "Primus job" link). Either way it gets a session cookie, HMAC-signed with
the token, that carries only the signed-in name and an expiry. A leaked ticket is worth nothing
once used or expired, and neither the ticket nor the cookie reveals the token.

Cookies belong to a host, not a port: two jobs' AMs on one machine would overwrite each other's
cookie, so the cookie's name carries a digest of the job's id.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass, field

from ..protocol import USER_HEADER  # noqa: F401 - a name of this module's too (the API's headers)

TICKET_SECONDS = 300.0
SESSION_SECONDS = 12 * 3600.0
# Header every state-changing request signed in by cookie must carry: a cross-site form cannot set
# it, and a cross-site fetch that sets it needs a CORS preflight the server never grants.
ACTION_HEADER = "X-Primus-Action"
_MAX_NAME = 64


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(token: str, purpose: str, payload: str) -> str:
    return _b64(hmac.new(token.encode(), f"{purpose}:{payload}".encode(), hashlib.sha256).digest())


def clean_name(name: str) -> str:
    """A user name as recorded with actions: printable, short; ``anonymous`` when empty."""
    kept = "".join(ch for ch in name if ch.isprintable()).strip()[:_MAX_NAME]
    return kept or "anonymous"


def make_ticket(token: str, user: str, ttl: float = TICKET_SECONDS, now: float | None = None) -> str:
    """A one-time sign-in link's ``ticket`` parameter for ``user``, valid ``ttl`` seconds."""
    body = {"u": clean_name(user), "e": round((now or time.time()) + ttl, 3), "n": secrets.token_urlsafe(12)}
    payload = _b64(json.dumps(body, separators=(",", ":")).encode())
    return f"{payload}.{_sign(token, 'ticket', payload)}"


def cookie_name(app_id: str) -> str:
    return "primus_" + hashlib.sha256(app_id.encode()).hexdigest()[:12]


@dataclass
class WebAuth:
    """Checks tokens, tickets and session cookies for one job (``token`` is its job token)."""

    token: str
    app_id: str
    _used: dict[str, float] = field(default_factory=dict)  # ticket nonce -> expiry, until it expires

    @property
    def cookie(self) -> str:
        return cookie_name(self.app_id)

    def token_matches(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())

    def redeem(self, ticket: str, now: float | None = None) -> str | None:
        """The user a valid, unexpired, unused ticket names (it cannot be used again), else None."""
        body = self._verified(ticket, "ticket", now)
        if body is None or not isinstance(body.get("n"), str) or body["n"] in self._used:
            return None
        now = now or time.time()
        self._used = {nonce: expiry for nonce, expiry in self._used.items() if expiry > now}
        self._used[body["n"]] = float(body["e"])
        return str(body["u"])

    def session(self, user: str, now: float | None = None) -> str:
        """A session cookie's value for ``user``."""
        body = {"u": clean_name(user), "e": round((now or time.time()) + SESSION_SECONDS, 3)}
        payload = _b64(json.dumps(body, separators=(",", ":")).encode())
        return f"{payload}.{_sign(self.token, 'session', payload)}"

    def session_user(self, value: str, now: float | None = None) -> str | None:
        body = self._verified(value, "session", now)
        return None if body is None else str(body["u"])

    def _verified(self, value: str, purpose: str, now: float | None) -> dict | None:
        payload, _, signature = value.partition(".")
        if not signature or not hmac.compare_digest(signature.encode(), _sign(self.token, purpose, payload).encode()):
            return None
        try:
            body = json.loads(_unb64(payload))
        except ValueError:
            return None
        if not isinstance(body, dict) or not isinstance(body.get("e"), (int, float)) \
                or not isinstance(body.get("u"), str) or body["e"] < (now or time.time()):
            return None
        return body
