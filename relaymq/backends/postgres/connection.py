"""How the backend's connections are made: what they send at startup, and the schema in every
statement.

Statements are written with bare table names (``queries.sql``). When they are loaded, each
``relaymq_*`` name is qualified with the backend's schema (``"app".relaymq_jobs``), once per
schema, and a connection of the backend's class runs the qualified text of any statement of
that file it is given. So no connection depends on its ``search_path``: a pooler may hand a
statement to any server connection. The migrations' scripts run under a ``search_path`` set
for their own transaction only (``apply``), and their trigger functions keep it
(``SET search_path FROM CURRENT``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

import asyncpg

from relaymq.backends import sockets, sqlfile
from relaymq.backends.postgres.config import Options

Q = sqlfile.named_queries(__package__, "queries.sql")

_NAME = re.compile(r'(?<![\w."])(?<!CONSTRAINT )(relaymq_\w+)(?![\w."])')
"""A table, sequence or function of ours: not already qualified, not quoted, not a
constraint, not the head of a longer dotted name (``'relaymq_wake.'``)."""


def qualify(sql: str, schema: str) -> str:
    """``sql`` with every name of ours qualified with ``schema``."""
    return _NAME.sub(lambda m: f'"{schema}".{m.group(1)}', sql)


@cache
def statements(schema: str) -> Mapping[str, str]:
    """The text of each statement of ``queries.sql`` -> its text for ``schema``."""
    return {text: qualify(text, schema) for text in Q.values()}


class Connection(asyncpg.Connection):  # type: ignore[misc]
    """A connection of the backend: runs every statement of ``queries.sql`` qualified with its
    schema (``_sql``, set by ``connection_class``).

    They hold no session state (no LISTEN but on the listener's own connection, no session
    locks, cursors or SET but the session pooler's settings), so giving one back to the pool
    needs no reset statement; asyncpg's default sends one on every release, a round trip per
    call. A transaction left open is still rolled back on release.

    Over TCP, data it sent that stays unacknowledged for ``_silent_for`` seconds (the URL's
    ``timeout``) closes it (``TCP_USER_TIMEOUT``): after a network cut, a call whose request or
    reply was lost would otherwise wait for TCP's retransmissions, long after the network
    healed (``sockets.drop_when_silent``; elsewhere than Linux, for ``command_timeout``)."""

    _sql: Mapping[str, str] = {}
    _silent_for = 0.0

    def __init__(self, protocol: Any, transport: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(protocol, transport, *args, **kwargs)
        sockets.drop_when_silent(transport, self._silent_for)

    def get_reset_query(self) -> str:
        return ""

    async def execute(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return await super().execute(self._sql.get(query, query), *args, **kwargs)

    async def executemany(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return await super().executemany(self._sql.get(query, query), *args, **kwargs)

    async def fetch(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return await super().fetch(self._sql.get(query, query), *args, **kwargs)

    async def fetchrow(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return await super().fetchrow(self._sql.get(query, query), *args, **kwargs)

    async def fetchval(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return await super().fetchval(self._sql.get(query, query), *args, **kwargs)

    async def fetchmany(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return await super().fetchmany(self._sql.get(query, query), *args, **kwargs)

    async def prepare(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return await super().prepare(self._sql.get(query, query), *args, **kwargs)


@cache
def connection_class(schema: str, silent_for: float = 0.0) -> type[Connection]:
    """The connection class whose statements name ``schema``, dropping a connection whose sent
    data stays unacknowledged for ``silent_for`` seconds (0: never)."""
    attrs = {"_sql": statements(schema), "_silent_for": silent_for}
    return type(f"Connection_{schema}", (Connection,), attrs)


def planner_settings() -> dict[str, str]:
    """Settings of every connection of the backend, but through a transaction pooler.

    Every statement of the backend is meant to be index-driven (a few rows by primary key or
    the head of a partial index). A prepared statement's generic plan is made once, often
    while the table is still small, when a full scan with a hash or merge join looks cheaper
    than ten key lookups; kept as the table grows to a million rows, such a plan would make
    each batch scan the table. Disabling those paths keeps the plans that stay flat.

    With those paths gone the generic plan is the index-driven one whatever the parameters,
    so every prepared statement uses it from its first run (``force_generic_plan``): the
    default would plan the claim afresh on every call for its first five runs per
    connection and keep doing so whenever the estimates favour it, about 0.4 ms of server
    time per claim (benchmarks/postgres_statements.py).

    Through a transaction pooler no statement is kept prepared: each is planned for its own
    values, so the generic plans these settings shape never exist there.
    """
    return {
        "jit": "off",
        "enable_seqscan": "off",
        "enable_hashjoin": "off",
        "enable_mergejoin": "off",
        "plan_cache_mode": "force_generic_plan",
    }


def connect_options(options: Options) -> dict[str, Any]:
    """Keyword arguments of ``asyncpg.connect`` / ``create_pool`` for ``options``.

    Straight to the server, the settings travel in the startup packet (no round trip). A
    pooler refuses every startup parameter but a few it tracks (``application_name``): in
    session mode the settings are set once on each new connection (``init``), which the
    pooler's ``server_reset_query`` undoes when the client leaves; in transaction mode
    there are none (``planner_settings``) and asyncpg keeps no named statement
    (``statement_cache_size=0``: each statement is parsed in the round trip that runs it).
    """
    kwargs: dict[str, Any] = {
        "connection_class": connection_class(options.schema, options.timeout),
        "timeout": options.timeout,
        "server_settings": {"application_name": "relaymq"},
    }
    if options.pooler is None:
        kwargs["server_settings"] |= planner_settings()
    if not options.cache_statements:
        kwargs["statement_cache_size"] = 0
    return kwargs


async def apply_session_settings(con: asyncpg.Connection) -> None:
    """The planner settings for the whole session (``init`` of a session pooler's pool)."""
    settings = planner_settings()
    await con.execute(Q["session_settings"], list(settings), list(settings.values()))
