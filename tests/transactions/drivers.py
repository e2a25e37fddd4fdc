"""The application side of a transactional enqueue, once per driver: a connection of the
application's own (asyncpg, psycopg 3, SQLAlchemy, sqlite3, aiosqlite), its transactions and
its own writes (rows of an ``orders`` table in the same database as the backend's jobs).

Every driver offers the same few steps, so one test runs through each: ``begin``, ``commit``,
``rollback``, ``savepoint``/``rollback_to``, ``write(n)`` (an order row), ``transaction()`` (the
driver's own idiom: commits when its block ends, rolls back on an exception), and
``connection`` (what is given as ``connection=``). ``sync`` drivers are enqueued through the
sync entry points (``add_bulk_sync``), as sync code would.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiosqlite
import asyncpg
import psycopg
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session


@dataclass(frozen=True)
class Where:
    """The database the backend's jobs are in: a PostgreSQL DSN and schema, or a file."""

    dsn: str = ""
    schema: str = ""
    path: str = ""

    @property
    def orders(self) -> str:
        return f'"{self.schema}".orders' if self.schema else "orders"


class Driver:
    name = ""
    kind = ""  # "postgres" or "sqlite"
    sync = False
    savepoints = True
    opens_transactions = False
    """The driver (or SQLAlchemy) opens a transaction by itself at the first statement: an
    enqueue without ``begin`` joins it. Otherwise relaymq refuses a connection with none."""
    connection: Any = None

    def __init__(self, where: Where) -> None:
        self.where = where

    async def open(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def sql(self, statement: str) -> None:
        raise NotImplementedError

    async def begin(self) -> None:
        await self.sql("BEGIN")

    async def commit(self) -> None:
        await self.sql("COMMIT")

    async def rollback(self) -> None:
        await self.sql("ROLLBACK")

    async def savepoint(self) -> None:
        await self.sql("SAVEPOINT relaymq_test")

    async def rollback_to(self) -> None:
        await self.sql("ROLLBACK TO SAVEPOINT relaymq_test")

    async def write(self, n: int) -> None:
        await self.sql(f"INSERT INTO {self.where.orders} (n) VALUES ({n})")

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        await self.begin()
        try:
            yield
        except BaseException:
            await self.rollback()
            raise
        await self.commit()


# -- PostgreSQL -----------------------------------------------------------------------------


class Awaited(Driver):
    """A driver whose connection's methods are awaited, with a ``transaction()`` block."""

    async def close(self) -> None:
        await self.connection.close()

    async def sql(self, statement: str) -> None:
        await self.connection.execute(statement)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        async with self.connection.transaction():
            yield


class Asyncpg(Awaited):
    name, kind = "asyncpg", "postgres"

    async def open(self) -> None:
        self.connection = await asyncpg.connect(self.where.dsn)


class AsyncpgPool(Asyncpg):
    name = "asyncpg_pool"

    async def open(self) -> None:
        self.pool = await asyncpg.create_pool(self.where.dsn, min_size=1, max_size=1)
        self.connection = await self.pool.acquire()

    async def close(self) -> None:
        await self.pool.release(self.connection)
        await self.pool.close()


class PsycopgAsync(Awaited):
    name, kind = "psycopg_async", "postgres"

    async def open(self) -> None:
        self.connection = await psycopg.AsyncConnection.connect(self.where.dsn, autocommit=True)


class PsycopgSync(Driver):
    name, kind, sync = "psycopg_sync", "postgres", True
    opens_transactions = True

    async def open(self) -> None:
        self.connection = psycopg.connect(self.where.dsn)  # autocommit off: psycopg's default

    async def close(self) -> None:
        self.connection.close()

    async def sql(self, statement: str) -> None:
        self.connection.execute(statement)

    async def begin(self) -> None:
        pass  # psycopg opens the transaction at the first statement

    async def commit(self) -> None:
        self.connection.commit()

    async def rollback(self) -> None:
        self.connection.rollback()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        with self.connection.transaction():
            yield


class SQLAlchemyAsync(Driver):
    """An ``AsyncSession`` (``savepoint``: ``begin_nested``)."""

    opens_transactions = True

    dialect = ""

    async def open(self) -> None:
        self.engine = create_async_engine(self._url())
        self.connection = await self._handle()

    async def _handle(self) -> Any:
        return AsyncSession(self.engine)

    def _url(self) -> str:
        if self.kind == "sqlite":
            return f"sqlite+aiosqlite:///{self.where.path}"
        return self.where.dsn.replace("postgresql://", f"postgresql+{self.dialect}://", 1)

    async def close(self) -> None:
        await self.connection.close()
        await self.engine.dispose()

    async def sql(self, statement: str) -> None:
        await self.connection.execute(text(statement))

    async def begin(self) -> None:
        await self.connection.begin()

    async def commit(self) -> None:
        await self.connection.commit()

    async def rollback(self) -> None:
        await self.connection.rollback()

    async def savepoint(self) -> None:
        self._nested = await self.connection.begin_nested()

    async def rollback_to(self) -> None:
        await self._nested.rollback()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        async with self.connection.begin():
            yield


class SQLAlchemyAsyncpg(SQLAlchemyAsync):
    name, kind, dialect = "sqlalchemy_asyncpg", "postgres", "asyncpg"


class SQLAlchemyPsycopgAsync(SQLAlchemyAsync):
    name, kind, dialect = "sqlalchemy_psycopg_async", "postgres", "psycopg"


class SQLAlchemyAsyncConnection(SQLAlchemyAsync):
    """An ``AsyncConnection`` (``engine.connect()``), not a session."""

    async def _handle(self) -> Any:
        return await self.engine.connect()


class SQLAlchemyAsyncpgConnection(SQLAlchemyAsyncConnection):
    name, kind, dialect = "sqlalchemy_asyncpg_connection", "postgres", "asyncpg"


class SQLAlchemyPsycopgAsyncConnection(SQLAlchemyAsyncConnection):
    name, kind, dialect = "sqlalchemy_psycopg_async_connection", "postgres", "psycopg"


class SQLAlchemySync(Driver):
    """A sync ``Session``."""

    opens_transactions = True

    sync = True

    async def open(self) -> None:
        if self.kind == "sqlite":
            url = f"sqlite:///{self.where.path}"
        else:
            url = self.where.dsn.replace("postgresql://", "postgresql+psycopg://", 1)
        self.engine = create_engine(url)
        self.connection = self._handle()

    def _handle(self) -> Any:
        return Session(self.engine)

    async def close(self) -> None:
        self.connection.close()
        self.engine.dispose()

    async def sql(self, statement: str) -> None:
        self.connection.execute(text(statement))

    async def begin(self) -> None:
        self.connection.begin()

    async def commit(self) -> None:
        self.connection.commit()

    async def rollback(self) -> None:
        self.connection.rollback()

    async def savepoint(self) -> None:
        self._nested = self.connection.begin_nested()

    async def rollback_to(self) -> None:
        self._nested.rollback()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        with self.connection.begin():
            yield


class SQLAlchemyPsycopgSync(SQLAlchemySync):
    name, kind = "sqlalchemy_psycopg_sync", "postgres"


class SQLAlchemySyncConnection(SQLAlchemySync):
    """A sync ``Connection`` (``engine.connect()``), not a session."""

    def _handle(self) -> Any:
        return self.engine.connect()


class SQLAlchemyPsycopgSyncConnection(SQLAlchemySyncConnection):
    name, kind = "sqlalchemy_psycopg_sync_connection", "postgres"


# -- SQLite ---------------------------------------------------------------------------------


class Sqlite3(Driver):
    """``isolation_level=None``: the application says BEGIN itself (IMMEDIATE, as a writer
    beside relaymq's workers should)."""

    name, kind, sync = "sqlite3", "sqlite", True

    async def open(self) -> None:
        self.connection = sqlite3.connect(self.where.path, isolation_level=None, timeout=30)

    async def close(self) -> None:
        self.connection.close()

    async def sql(self, statement: str) -> None:
        self.connection.execute(statement)

    async def begin(self) -> None:
        await self.sql("BEGIN IMMEDIATE")

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        await self.begin()
        with self.connection:  # commits, or rolls back on an exception
            yield


class Sqlite3Legacy(Sqlite3):
    """sqlite3's default transaction control: it begins a transaction before a write by
    itself (relaymq begins it before its own first statement instead)."""

    name = "sqlite3_legacy"
    opens_transactions = True

    async def open(self) -> None:
        self.connection = sqlite3.connect(self.where.path, timeout=30)

    async def begin(self) -> None:
        pass

    async def commit(self) -> None:
        self.connection.commit()

    async def rollback(self) -> None:
        self.connection.rollback()

    async def savepoint(self) -> None:
        if not self.connection.in_transaction:
            self.connection.execute("BEGIN")
        await self.sql("SAVEPOINT relaymq_test")


class Aiosqlite(Awaited):
    name, kind = "aiosqlite", "sqlite"
    transaction = Driver.transaction  # aiosqlite has no transaction() block: BEGIN, COMMIT

    async def open(self) -> None:
        self.connection = await aiosqlite.connect(self.where.path, isolation_level=None)

    async def begin(self) -> None:
        await self.sql("BEGIN IMMEDIATE")


class SQLAlchemyAiosqlite(SQLAlchemyAsync):
    name, kind = "sqlalchemy_aiosqlite", "sqlite"
    savepoints = False  # SQLAlchemy's SQLite dialect: SAVEPOINT needs the driver's own BEGIN


class SQLAlchemySqlite(SQLAlchemySync):
    name, kind = "sqlalchemy_sqlite", "sqlite"
    savepoints = False


class SQLAlchemyAiosqliteConnection(SQLAlchemyAsyncConnection):
    name, kind = "sqlalchemy_aiosqlite_connection", "sqlite"
    savepoints = False


class SQLAlchemySqliteConnection(SQLAlchemySyncConnection):
    name, kind = "sqlalchemy_sqlite_connection", "sqlite"
    savepoints = False


DRIVERS: list[Callable[[Where], Driver]] = [
    Asyncpg,
    AsyncpgPool,
    PsycopgAsync,
    PsycopgSync,
    SQLAlchemyAsyncpg,
    SQLAlchemyPsycopgAsync,
    SQLAlchemyPsycopgSync,
    SQLAlchemyAsyncpgConnection,
    SQLAlchemyPsycopgAsyncConnection,
    SQLAlchemyPsycopgSyncConnection,
    Sqlite3,
    Sqlite3Legacy,
    Aiosqlite,
    SQLAlchemyAiosqlite,
    SQLAlchemySqlite,
    SQLAlchemyAiosqliteConnection,
    SQLAlchemySqliteConnection,
]
