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
from relaymq.backends.postgres.errors import DRIVER_ERRORS, translate

Q = sqlfile.named_queries(__package__, "queries.sql")


def migrations() -> tuple[tuple[str, str], ...]:
    """``(name, script)`` of every migration of ``migrations/``, in order."""
    return sqlfile.migrations(__package__)


async def apply(con: asyncpg.Connection, options: Options) -> list[str]:
    """Apply every pending migration on ``con`` (search_path = the schema); their names."""
    applied: list[str] = []
    async with con.transaction():
        await con.execute(Q["migrations_lock"], options.schema)
        if options.schema != "public":
            await con.execute(Q["create_schema"].format(schema=options.quoted_schema))
        await con.execute(Q["migrations_table"])
    for name, sql in migrations():
        async with con.transaction():
            await con.execute(Q["migrations_lock"], options.schema)
            done = {r["name"] for r in await con.fetch(Q["migrations_applied"])}
            if name in done:
                continue
            await con.execute(sql)
            await con.execute(Q["migration_record"], name)
            applied.append(name)
    return applied


async def connect_one(options: Options) -> asyncpg.Connection:
    """One connection on the options' schema (for migrations and the LISTEN connection)."""
    con: asyncpg.Connection = await asyncpg.connect(
        options.dsn, server_settings=server_settings(options), timeout=options.timeout
    )
    return con


def server_settings(options: Options) -> dict[str, str]:
    """Settings of every connection of the backend.

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
    """
    return {
        "search_path": options.schema,
        "application_name": "relaymq",
        "jit": "off",
        "enable_seqscan": "off",
        "enable_hashjoin": "off",
        "enable_mergejoin": "off",
        "plan_cache_mode": "force_generic_plan",
    }


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
