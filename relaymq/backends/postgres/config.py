"""The backend's URL options.

URL: ``postgresql://user@host:port[,host:port...]/db?schema=NAME&migrate=true&pool_size=N``
(``postgres://`` works too). ``schema`` (default ``public``) is where the tables live: every
statement names its tables with the schema, so no connection depends on its ``search_path``.
``migrate=true`` applies pending migrations on connect. ``retention`` is how long finished
jobs of queues without a retention of their own are kept (seconds for every finished state,
``0`` keeps them for ever; not given: ``relaymq.retention``'s defaults). ``timeout`` is how long
connecting may take (seconds, default 10), and how long data a connection sent may stay
unacknowledged before it is dropped (a network cut: see ``connection.Connection``);
``command_timeout`` is how long one statement may take (default 60): a server that accepts
but never answers fails then, naming the server.

Behind a connection pooler (PgBouncer, a hosted service's pooler), ``pooler=session`` or
``pooler=transaction`` says which mode it runs in: no setting travels in the startup packet
(a pooler refuses them); in transaction mode no statement outlives its transaction on the
server (no named prepared statements), and wake-ups come through ``listen_url`` (a direct
``postgresql://`` URL to the server, for LISTEN only) or else by polling every
``poll_interval`` seconds (default 1). Several hosts with ``target_session_attrs=read-write``
(or ``primary``) fail over to whichever is the primary.

The driver's own options (asyncpg's DSN parameters: ``sslmode``, ``target_session_attrs``,
...) pass through; any other name is a ``ConfigError`` listing the options that exist.
Keyword arguments of our own options' names override the URL.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from relaymq.backends.urls import hosts, split_options, where
from relaymq.errors import ConfigError

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
"""A whole schema name (``fullmatch``: ``$`` would also pass a final newline)."""
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
POOLERS = ("session", "transaction")


@dataclass(frozen=True, slots=True)
class Options:
    dsn: str
    """The URL for the driver, without our own options."""
    schema: str = "public"
    migrate: bool = False
    retention: float | None = None
    """Seconds finished jobs are kept by default (``relaymq.retention.default``); None: the
    option was not given."""
    pool_size: int = 10
    timeout: float = 10.0
    command_timeout: float = 60.0
    pooler: str | None = None
    """``session`` or ``transaction``: a connection pooler's mode; None: the server itself."""
    listen_dsn: str | None = None
    """Where the LISTEN connection goes (the ``listen_url``, else ``dsn``); None: nowhere
    (a transaction pooler without a ``listen_url``: ``wait`` polls)."""
    poll_interval: float = 1.0
    where: str = "localhost:5432"
    """``host:port`` of the server (several, comma separated, for a failover URL)."""

    @property
    def database(self) -> str | None:
        """The database the URL names (None: the driver's default, the user's name)."""
        return urlsplit(self.dsn).path.lstrip("/") or None

    @property
    def quoted_schema(self) -> str:
        return f'"{self.schema}"'

    @property
    def cache_statements(self) -> bool:
        """Whether named prepared statements may outlive a transaction (not through a
        transaction pooler, which hands each transaction to any server connection)."""
        return self.pooler != "transaction"

    def listening(self) -> Options:
        """These options for the LISTEN connection (its own URL, its own ``where``)."""
        assert self.listen_dsn is not None
        if self.listen_dsn == self.dsn:
            return self
        listen_where = where(hosts(urlsplit(self.listen_dsn).netloc, 5432, self.listen_dsn))
        return dataclasses.replace(self, dsn=self.listen_dsn, pooler=None, where=listen_where)


def parse(url: str, overrides: dict[str, Any]) -> Options:
    """Split ``url`` into the driver's DSN and our options; ``overrides`` are keyword options."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"not a PostgreSQL URL: {url!r}")
    ours, rest = split_options(parts.query, OURS, DRIVER, "PostgreSQL")
    unknown = set(overrides) - set(OURS)
    if unknown:
        raise ConfigError(
            f"unknown PostgresBackend options: {sorted(unknown)} (they are {', '.join(OURS)})"
        )
    ours.update(overrides)
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(rest), parts.fragment))
    schema = str(ours.get("schema", "public"))
    if not _IDENTIFIER.fullmatch(schema):
        raise ConfigError(f"schema must be a plain identifier (letters, digits, _): {schema!r}")
    try:
        retention = None if ours.get("retention") is None else float(ours["retention"])
        pool_size = int(ours.get("pool_size", 10))
        timeout = float(ours.get("timeout", 10.0))
        command_timeout = float(ours.get("command_timeout", 60.0))
        poll_interval = float(ours.get("poll_interval", 1.0))
    except ValueError as e:
        raise ConfigError(f"bad PostgresBackend option in {url!r}: {e}") from e
    if (
        (retention is not None and retention < 0)
        or pool_size < 1
        or timeout <= 0
        or command_timeout <= 0
    ):
        raise ConfigError("retention must be >= 0, pool_size >= 1, timeouts > 0")
    if not 0.05 <= poll_interval <= 60:
        raise ConfigError(f"poll_interval must be between 0.05 and 60 seconds: {poll_interval}")
    pooler = str(ours.get("pooler") or "").lower() or None
    if pooler is not None and pooler not in POOLERS:
        raise ConfigError(
            f"pooler must be session or transaction (PgBouncer's pool_mode), not {pooler!r}"
        )
    listen_dsn: str | None = dsn
    if ours.get("listen_url"):
        listen_dsn = _listen_dsn(str(ours["listen_url"]))
    elif pooler == "transaction":
        listen_dsn = None
    return Options(
        dsn,
        schema,
        _flag(ours.get("migrate", False)),
        retention,
        pool_size,
        timeout,
        command_timeout,
        pooler,
        listen_dsn,
        poll_interval,
        where(hosts(parts.netloc, 5432, url)),
    )


def _listen_dsn(url: str) -> str:
    """The driver's URL out of a ``listen_url`` (only the driver's options make sense there)."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"listen_url must be a postgresql:// URL to the server, not {url!r}")
    _, rest = split_options(parts.query, (), DRIVER, "PostgreSQL listen_url")
    hosts(parts.netloc, 5432, url)
    return urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(rest), ""))


OURS = (
    "schema",
    "migrate",
    "retention",
    "pool_size",
    "timeout",
    "command_timeout",
    "pooler",
    "listen_url",
    "poll_interval",
)
DRIVER = (
    "host",
    "port",
    "user",
    "password",
    "passfile",
    "dbname",
    "database",
    "sslmode",
    "sslcert",
    "sslkey",
    "sslrootcert",
    "sslcrl",
    "sslpassword",
    "sslnegotiation",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "target_session_attrs",
    "krbsrvname",
    "gsslib",
    "service",
)
"""The DSN parameters asyncpg documents (``asyncpg.connect``); any other name would reach the
server as a setting."""


def _flag(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"migrate must be true or false, not {value!r}")
