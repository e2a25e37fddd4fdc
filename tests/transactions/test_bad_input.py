"""A transactional enqueue given a connection it cannot write through: a clear ``ConfigError``,
nothing stored, and the caller's transaction left as it was (still usable)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import asyncpg
import psycopg
import pytest

import relaymq
from relaymq import ConfigError
from relaymq.backends.memory import InMemoryBackend
from relaymq.backends.postgres import PostgresBackend
from tests.support import case_postgres
from tests.transactions.conftest import Env, make_app
from tests.transactions.drivers import Asyncpg, Sqlite3

pytestmark = pytest.mark.parametrize("driver_class", [Asyncpg, Sqlite3], ids=["pg", "sqlite"])


async def nothing_stored(env: Env) -> None:
    assert sum((await env.queue.counts()).values()) == 0


async def test_a_connection_to_another_database_is_refused(env: Env, tmp_path: Path) -> None:
    call = env.task.with_options(queue=env.queue.name).call(1)
    if isinstance(env.backend, PostgresBackend):
        other = await asyncpg.connect(f"{case_postgres.SERVER}/postgres")
        try:
            async with other.transaction():
                with pytest.raises(ConfigError, match=r"database 'postgres'.*'relaymq_test'"):
                    await env.queue.add(call, connection=other)
                await other.execute("SELECT 1")  # the caller's transaction still works
        finally:
            await other.close()
    else:
        for path in (str(tmp_path / "other.db"), ":memory:"):
            conn = sqlite3.connect(path, isolation_level=None)
            conn.execute("BEGIN")
            with pytest.raises(ConfigError, match="the backend's jobs are in"):
                env.app.enqueue_bulk_sync([call], connection=conn)
            conn.execute("COMMIT")
            conn.close()
    await nothing_stored(env)


async def test_a_database_without_the_backends_tables_is_refused(env: Env, tmp_path: Path) -> None:
    """Another schema (PostgreSQL), a file relaymq never prepared (SQLite), through an app
    that is never connected (a sync enqueue needs nothing but the caller's connection)."""
    conn: sqlite3.Connection | psycopg.Connection[tuple[object, ...]]
    if isinstance(env.backend, PostgresBackend):
        app = relaymq.App(f"{case_postgres.SERVER}/{case_postgres.DATABASE}?schema=txn_none")
        conn = psycopg.connect(f"{case_postgres.SERVER}/{case_postgres.DATABASE}")
        error = "no relaymq tables in schema 'txn_none'"
    else:
        path = tmp_path / "fresh.db"
        app = relaymq.App(f"sqlite:///{path}")
        conn = sqlite3.connect(path)
        error = "has relaymq schema 0, this relaymq writes"
    task = app.task(name="tests.transactions:nothing")(_nothing)
    with pytest.raises(ConfigError, match=error):
        task.with_options(connection=conn).enqueue_sync()
    assert not app.connected
    conn.commit()
    conn.close()


def _nothing() -> None:
    pass


async def test_a_connection_of_unknown_type_is_refused(env: Env) -> None:
    call = env.task.with_options(queue=env.queue.name).call(1)
    wrong = sqlite3.connect(":memory:") if isinstance(env.backend, PostgresBackend) else object()
    with pytest.raises(ConfigError, match="cannot write in a transaction of a"):
        await env.queue.add(call, connection=wrong)
    with pytest.raises(ConfigError, match="cannot write in a transaction of a"):
        env.app.enqueue_bulk_sync([call], connection=object())
    await nothing_stored(env)


async def test_an_async_connection_in_sync_code_is_refused(env: Env) -> None:
    if env.driver.sync:
        pytest.skip("a sync driver")
    await env.driver.begin()
    with pytest.raises(ConfigError, match="use the awaitable form"):
        env.app.enqueue_bulk_sync([env.task.call(1)], connection=env.driver.connection)
    await env.driver.rollback()


async def test_batches_name_one_connection(env: Env) -> None:
    await env.driver.begin()
    with_it = env.task.with_options(queue=env.queue.name, connection=env.driver.connection)
    with pytest.raises(ConfigError, match="different connections"):
        await env.queue.add_bulk([with_it.call(1), env.task.call(2)])
    with pytest.raises(ConfigError, match="give it connection="):
        env.app.enqueue_bulk_sync([env.task.call(3)])
    await env.driver.rollback()
    await nothing_stored(env)


async def test_a_failed_transaction_is_refused(env: Env) -> None:
    if not isinstance(env.backend, PostgresBackend):
        pytest.skip("PostgreSQL: a transaction that met an error accepts nothing more")
    conn = await psycopg.AsyncConnection.connect(f"{case_postgres.SERVER}/{case_postgres.DATABASE}")
    try:
        with pytest.raises(psycopg.errors.DivisionByZero):
            await conn.execute("SELECT 1 / 0")
        with pytest.raises(ConfigError, match="has failed: roll it back"):
            await env.queue.add(env.task.call(1), connection=conn)
        await conn.rollback()
    finally:
        await conn.close()
    await nothing_stored(env)


async def test_a_backend_that_cannot_write_in_a_transaction_says_so(env: Env) -> None:
    """The in-memory backend (Redis, MongoDB and RabbitMQ alike) needs an outbox."""
    ran: list[int] = []
    memory = InMemoryBackend()
    await memory.connect()
    app, task = make_app(memory, ran)
    queue = relaymq.Queue("q", app)
    await env.driver.begin()
    with pytest.raises(
        ConfigError, match="cannot write in your transaction: give the app an outbox"
    ):
        await queue.add(task.call(1), connection=env.driver.connection)
    await env.driver.rollback()
    assert sum((await queue.counts()).values()) == 0
    with pytest.raises(ConfigError, match="the outbox must be a database"):
        relaymq.App("memory://", outbox="redis://127.0.0.1:6379/0")
