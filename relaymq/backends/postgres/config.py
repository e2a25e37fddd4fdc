"""The backend's URL options.

URL: ``postgresql://user@host:port/db?schema=NAME&migrate=true&retention=SECONDS&pool_size=N``
(``postgres://`` works too). ``schema`` (default ``public``) is where the tables live: every
connection gets it as its ``search_path``. ``migrate=true`` applies pending migrations on
connect. ``retention`` is how long finished jobs are kept (seconds, default 7 days, ``0`` keeps
them for ever). ``timeout`` is how long connecting may take (seconds, default 10) and
``command_timeout`` how long one statement may (default 60): a server that accepts but never
answers fails then, naming the server. Every other query parameter goes to the driver
unchanged. Keyword arguments of the same names override the URL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from relaymq.errors import ConfigError

DEFAULT_RETENTION = 7 * 24 * 3600.0
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
"""A whole schema name (``fullmatch``: ``$`` would also pass a final newline)."""
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True, slots=True)
class Options:
    dsn: str
    """The URL for the driver, without our own options."""
    schema: str = "public"
    migrate: bool = False
    retention: float = DEFAULT_RETENTION
    pool_size: int = 10
    timeout: float = 10.0
    command_timeout: float = 60.0

    @property
    def where(self) -> str:
        """``host:port`` of the server, for messages."""
        parts = urlsplit(self.dsn)
        return f"{parts.hostname or 'localhost'}:{parts.port or 5432}"

    @property
    def quoted_schema(self) -> str:
        return f'"{self.schema}"'


def parse(url: str, overrides: dict[str, Any]) -> Options:
    """Split ``url`` into the driver's DSN and our options; ``overrides`` are keyword options."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"not a PostgreSQL URL: {url!r}")
    ours: dict[str, Any] = {}
    rest: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in _OURS:
            ours[key] = value
        else:
            rest.append((key, value))
    unknown = set(overrides) - set(_OURS)
    if unknown:
        raise ConfigError(f"unknown PostgresBackend options: {sorted(unknown)}")
    ours.update(overrides)
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(rest), parts.fragment))
    schema = str(ours.get("schema", "public"))
    if not _IDENTIFIER.fullmatch(schema):
        raise ConfigError(f"schema must be a plain identifier (letters, digits, _): {schema!r}")
    try:
        retention = float(ours.get("retention", DEFAULT_RETENTION))
        pool_size = int(ours.get("pool_size", 10))
        timeout = float(ours.get("timeout", 10.0))
        command_timeout = float(ours.get("command_timeout", 60.0))
    except ValueError as e:
        raise ConfigError(f"bad PostgresBackend option in {url!r}: {e}") from e
    if retention < 0 or pool_size < 1 or timeout <= 0 or command_timeout <= 0:
        raise ConfigError("retention must be >= 0, pool_size >= 1, timeouts > 0")
    migrate = _flag(ours.get("migrate", False))
    return Options(dsn, schema, migrate, retention, pool_size, timeout, command_timeout)


_OURS = ("schema", "migrate", "retention", "pool_size", "timeout", "command_timeout")


def _flag(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"migrate must be true or false, not {value!r}")
