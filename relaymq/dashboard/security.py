"""Who may use the dashboard, and proof that a form was sent by the dashboard itself.

- ``Access``: with a token or a password, every page and action needs a signed session cookie
  (from the login form) or ``Authorization: Bearer <token>``. The cookie's signing key is
  derived from the secrets, so every dashboard process with the same secrets accepts it, and
  changing a secret ends every session. Without either, anyone who can reach the port may use
  it: ``exposure_problem`` refuses that on anything but a loopback address.
- CSRF: every action is a POST whose form carries the value of a random ``SameSite=Strict``
  cookie (double submit): another site can make a browser send the cookie, never read it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from dataclasses import dataclass

SESSION_COOKIE = "relaymq_session"
CSRF_COOKIE = "relaymq_csrf"
CSRF_FIELD = "csrf"
SESSION_SECONDS = 12 * 3600


@dataclass(frozen=True)
class Access:
    """The secrets that guard a dashboard; neither given: open (loopback only)."""

    token: str | None = None
    """Accepted as ``Authorization: Bearer <token>`` (scrapers, scripts) and at the login form."""
    password: str | None = None
    """Accepted at the login form."""

    @property
    def required(self) -> bool:
        return bool(self.token or self.password)

    def _key(self) -> bytes:
        material = f"{self.token or ''}\0{self.password or ''}".encode()
        return hmac.new(material, b"relaymq-dashboard-session", hashlib.sha256).digest()

    def accepts_secret(self, given: str) -> bool:
        """Whether ``given`` (typed at the login form) is the token or the password."""
        return any(
            s and hmac.compare_digest(s.encode(), given.encode())
            for s in (self.token, self.password)
        )

    def accepts_bearer(self, header: str | None) -> bool:
        if not self.token or not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(self.token.encode(), header[len("Bearer ") :].encode())

    def new_session(self, now: float | None = None) -> str:
        """A session cookie value: its expiry time and a signature of it."""
        expires = int((time.time() if now is None else now) + SESSION_SECONDS)
        return f"{expires}.{self._sign(str(expires))}"

    def accepts_session(self, value: str | None, now: float | None = None) -> bool:
        if not value or "." not in value:
            return False
        expires, signature = value.split(".", 1)
        if not expires.isdigit() or int(expires) < (time.time() if now is None else now):
            return False
        return hmac.compare_digest(self._sign(expires), signature)

    def _sign(self, text: str) -> str:
        return hmac.new(self._key(), text.encode(), hashlib.sha256).hexdigest()


def new_csrf() -> str:
    return secrets.token_urlsafe(24)


def csrf_matches(cookie: str | None, field: str | None) -> bool:
    return bool(cookie and field) and hmac.compare_digest(str(cookie), str(field))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_problem(host: str, access: Access) -> str | None:
    """Why serving on ``host`` with ``access`` is refused, or None when it is fine."""
    if access.required or is_loopback(host):
        return None
    return (
        f"refusing to serve the dashboard on {host}, which is not a loopback address, without "
        "a token or a password: anyone who reaches it could retry, cancel and remove jobs. "
        "Give --token or --password (RELAYMQ_DASHBOARD_TOKEN / RELAYMQ_DASHBOARD_PASSWORD), "
        "or serve on 127.0.0.1."
    )
