"""Versioned migrations: ``migrations/NNNN_*.sql``, applied in order, each once, never undone.

Each migration runs in its own transaction together with its row in ``relaymq_migrations``;
an advisory lock per schema makes concurrent runners take turns. Migrations only add: none
drops or rewrites user data (tests/postgres/test_migrations.py checks the files).
"""

from __future__ import annotations

from typing import Any

import asyncpg

from relaymq.backends import sqlfile
from relaymq.backends.postgres.config import Options, parse
from relaymq.backends.postgres.connection import apply_session_settings, connect_options
from relaymq.backends.postgres.errors import DRIVER_ERRORS, translate

Q = sqlfile.named_queries(__package__, "queries.sql")


def migrations() -> tuple[tuple[str, str], ...]:
    """``(name, script)`` of every migration of ``migrations/``, in order."""
    return sqlfile.migrations(__package__)


async def apply(con: asyncpg.Connection, options: Options) -> list[str]:
    """Apply every pending migration on ``con``; their names. Each runs in a transaction of
    its own whose ``search_path`` is the schema (set for that transaction only: a pooler may
    give the next one another server connection)."""
    applied: list[str] = []
    async with con.transaction():
        await con.execute(Q["migrations_lock"], options.schema)
        if options.schema != "public":
            await con.execute(Q["create_schema"].format(schema=options.quoted_schema))
        await con.execute(Q["migrations_table"])
    for name, sql in migrations():
        async with con.transaction():
            await con.execute(Q["migrations_lock"], options.schema)
            await con.execute(Q["local_search_path"], options.quoted_schema)
            done = {r["name"] for r in await con.fetch(Q["migrations_applied"])}
            if name in done:
                continue
            await con.execute(sql)
            await con.execute(Q["migration_record"], name)
            applied.append(name)
    return applied


async def connect_one(options: Options) -> asyncpg.Connection:
    """One connection of the backend (for migrations and the LISTEN connection)."""
    con: asyncpg.Connection = await asyncpg.connect(options.dsn, **connect_options(options))
    if options.pooler == "session":
        await apply_session_settings(con)
    return con


async def migrate(url: str, **options: Any) -> list[str]:
    """Apply the pending migrations of the database and schema ``url`` names.

    Returns the names of the migrations applied now (empty when the schema is up to date).
    This is what ``relaymq migrate`` runs.
    """
    opts = parse(url, options)
    try:
        con = await connect_one(opts)
        try:
            return await apply(con, opts)
        finally:
            await con.close()
    except DRIVER_ERRORS as e:
        raise translate(e, opts.where) from e
