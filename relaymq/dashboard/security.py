"""Who may use the dashboard, and proof that a form was sent by the dashboard itself.

- ``Access``: with a token or a password, every page and action needs a session cookie (from
  the login form) or ``Authorization: Bearer <token>``. A session cookie is signed with a key
  made of the secrets and the session key (``SessionKey``): a random one per process, so a
  restart ends every session, or one kept in a file that several processes share and
  ``relaymq dashboard --rotate-sessions`` replaces. Logging out revokes the cookie's session
  in the process that served it (and ``--rotate-sessions`` every session everywhere).
  Without a secret, anyone who can reach the port may use it: ``exposure_problem`` refuses
  that on anything but a loopback address.
- ``Throttle``: failed sign-ins and bad Bearer tokens, per client; after a few, the client
  waits before its next try, twice as long after each further failure.
- CSRF: every action is a POST whose form carries the value of a random ``SameSite=Strict``
  cookie (double submit): another site can make a browser send the cookie, never read it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from relaymq.errors import ConfigError

SESSION_COOKIE = "relaymq_session"
CSRF_COOKIE = "relaymq_csrf"
CSRF_FIELD = "csrf"
SESSION_SECONDS = 12 * 3600


class SessionKey:
    """The server's part of every session's signing key: random for this process, or read
    from ``path`` (created, readable by its owner only, when missing) and read again whenever
    the file changes, so a rotation reaches running dashboards at their next request."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._key = secrets.token_bytes(32)
        self._seen: tuple[int, int] | None = None
        self.current()  # a file that cannot be made or read is refused here, not per request

    def current(self) -> bytes:
        if self.path is None:
            return self._key
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            write_key(self.path)
            stat = self.path.stat()
        if (stat.st_mtime_ns, stat.st_ino) != self._seen:
            try:
                key = bytes.fromhex(self.path.read_text().strip())
            except (ValueError, UnicodeDecodeError):
                key = b""
            if len(key) < 16:
                raise ConfigError(
                    f"{self.path} holds no session key: write a new one with "
                    "relaymq dashboard --rotate-sessions"
                )
            self._key, self._seen = key, (stat.st_mtime_ns, stat.st_ino)
        return self._key


def write_key(path: Path) -> None:
    """A new random session key in ``path`` (owner-only), replacing any: every session signed
    with the old one ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    os.replace(fresh, path)


@dataclass(frozen=True)
class Access:
    """The secrets that guard a dashboard; neither given: open (loopback only)."""

    token: str | None = None
    """Accepted as ``Authorization: Bearer <token>`` (scrapers, scripts) and at the login form."""
    password: str | None = None
    """Accepted at the login form."""
    session_key: SessionKey = field(default_factory=SessionKey, compare=False)
    revoked: dict[str, int] = field(default_factory=dict, compare=False)
    """Sessions logged out in this process, by id, with their expiry time."""

    @property
    def required(self) -> bool:
        return bool(self.token or self.password)

    def _key(self) -> bytes:
        material = f"{self.token or ''}\0{self.password or ''}".encode()
        return hmac.new(
            material, b"relaymq-dashboard-session\0" + self.session_key.current(), hashlib.sha256
        ).digest()

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
        """A session cookie value: its expiry time, a random id, and a signature of both."""
        expires = int((time.time() if now is None else now) + SESSION_SECONDS)
        text = f"{expires}.{secrets.token_urlsafe(16)}"
        return f"{text}.{self.sign(text)}"

    def _session(self, value: str | None, now: float | None) -> tuple[int, str] | None:
        """The expiry and id of a valid session cookie, or None."""
        parts = (value or "").split(".")
        if len(parts) != 3 or not parts[0].isascii() or not parts[0].isdigit():
            return None
        expires, sid, signature = int(parts[0]), parts[1], parts[2]
        if expires < (time.time() if now is None else now):
            return None
        if not hmac.compare_digest(self.sign(f"{parts[0]}.{sid}"), signature):
            return None
        return expires, sid

    def accepts_session(self, value: str | None, now: float | None = None) -> bool:
        found = self._session(value, now)
        return found is not None and found[1] not in self.revoked

    def revoke(self, value: str | None, now: float | None = None) -> None:
        """End the cookie's session here (logout); forget revocations past their expiry."""
        found = self._session(value, now)
        if found is None:
            return
        at = time.time() if now is None else now
        for sid in [s for s, expires in self.revoked.items() if expires < at]:
            del self.revoked[sid]
        self.revoked[found[1]] = found[0]

    def sign(self, text: str) -> str:
        """A signature of ``text`` by this dashboard (sessions, and the messages it shows)."""
        return hmac.new(self._key(), text.encode(), hashlib.sha256).hexdigest()


class Throttled(Exception):
    """A client that failed to sign in too often must wait ``retry_after`` seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"retry after {retry_after:.0f}s")
        self.retry_after = retry_after

    @property
    def seconds(self) -> int:
        return max(1, math.ceil(self.retry_after))


@dataclass
class Throttle:
    """Failed sign-ins and bad Bearer tokens per client (its address): ``free`` failures
    cost nothing; from then on the client waits ``delay`` seconds after its last failure
    before its next try, twice as long after each further failure (at most ``longest``). A
    success, or ``forget`` seconds without a failure, clears its count. Tries while it must
    wait are refused without being counted."""

    free: int = 5
    delay: float = 1.0
    longest: float = 900.0
    forget: float = 3600.0
    clock: Callable[[], float] = time.monotonic
    most_clients: int = 10_000
    """Clients remembered at once; past it the longest-quiet ones are forgotten."""
    failures: dict[str, tuple[int, float]] = field(default_factory=dict)
    """Per client: failures so far, and when the last one was."""

    def wait(self, client: str) -> float:
        """Seconds ``client`` must wait before its next try; 0 when it may try now."""
        found = self.failures.get(client)
        if found is None:
            return 0.0
        count, last = found
        now = self.clock()
        if now - last >= self.forget:
            del self.failures[client]
            return 0.0
        if count < self.free:
            return 0.0
        until = last + min(self.longest, self.delay * 2.0 ** (count - self.free))
        return max(0.0, until - now)

    def failed(self, client: str) -> None:
        now = self.clock()
        count, last = self.failures.pop(client, (0, now))
        if now - last >= self.forget:
            count = 0
        self.failures[client] = (count + 1, now)  # re-inserted: the newest last
        while len(self.failures) > self.most_clients:
            del self.failures[next(iter(self.failures))]

    def succeeded(self, client: str) -> None:
        self.failures.pop(client, None)


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
