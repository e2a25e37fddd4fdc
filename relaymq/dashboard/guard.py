"""What every response of the dashboard goes through: the Host check and the security headers.

- Host: a page on another site can make its own name resolve to 127.0.0.1 (DNS rebinding) and
  then read and post to a loopback dashboard as "its" origin. The browser still sends that
  name as ``Host``, so the dashboard answers only to the names it is served under
  (``allowed_hosts_for``); anything else is a 400 before any page or action runs.
- Headers: a Content-Security-Policy that allows only the dashboard's own script, style and
  connections (no inline script, no framing, forms posted only to itself), ``X-Frame-Options:
  DENY`` for older browsers, no Referer beyond the dashboard, no content sniffing.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from starlette.responses import PlainTextResponse

from relaymq.dashboard.security import is_loopback

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
WILDCARDS = ("", "0.0.0.0", "::", "[::]")

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"x-content-type-options", b"nosniff"),
]


def host_name(host: str) -> str:
    """A bind address or host name as it appears in a ``Host`` header (IPv6 in brackets),
    lower case."""
    host = host.strip().lower()
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        return host
    return f"[{literal}]" if literal.version == 6 else str(literal)


def allowed_hosts_for(bind: str, extra: Iterable[str] = ()) -> frozenset[str] | None:
    """The ``Host`` names a dashboard bound to ``bind`` answers to, with any port: a loopback
    bind answers to localhost, 127.0.0.1 and [::1]; another bind to its own name; a wildcard
    bind (0.0.0.0, ::), which serves the loopback interface too, to the loopback names (its
    other names go in ``extra``); plus ``extra``. ``'*'`` in ``extra``: None, no check (a
    proxy in front checks the Host)."""
    names = [n.strip() for n in extra if n.strip()]
    if "*" in names:
        return None
    allowed = {host_name(n) for n in names}
    wildcard = bind.strip() in WILDCARDS
    if wildcard or is_loopback(bind):
        allowed.update(LOOPBACK_NAMES)
    if not wildcard:
        allowed.add(host_name(bind))
    return frozenset(allowed)


def name_of(header: str) -> str | None:
    """The name in a ``Host`` header without its port; None when the header is malformed."""
    header = header.strip().lower()
    if header.startswith("["):
        name, bracket, port = header.partition("]")
        name += bracket
    else:
        name, _, port = header.partition(":")
        port = f":{port}" if _ else ""
    if port and not (port.startswith(":") and port[1:].isascii() and port[1:].isdigit()):
        return None
    return name or None


class Guard:
    """ASGI middleware: the Host check (when ``allowed`` is given) and the headers."""

    def __init__(self, app: Any, allowed: frozenset[str] | None) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], *HEADERS]
            await send(message)

        if self.allowed is not None:
            host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
            if name_of(host) not in self.allowed:
                response = PlainTextResponse(
                    f"This dashboard does not answer to Host {host!r}: it is served as "
                    f"{', '.join(sorted(self.allowed)) or 'no name'} (add a name with "
                    "--allowed-host).",
                    status_code=400,
                )
                await response(scope, receive, with_headers)
                return
        await self.app(scope, receive, with_headers)
