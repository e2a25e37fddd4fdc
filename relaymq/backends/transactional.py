"""Writing in the caller's transaction: what the two SQL backends (PostgreSQL, SQLite) offer
beyond the seams, for a job that exists if and only if the application's transaction commits.

A backend with ``capabilities.joins_transactions`` implements ``Transactional``: given the
caller's own connection (a driver's, a SQLAlchemy session or connection), it returns the
writes of an enqueue or of a fenced settle, bound to that connection and not made yet
(``InTransaction``). ``await work.run()`` makes them from async code, ``work.run_sync()`` from
sync code (a sync connection only). They are the statements of the backend's own enqueue and
settle, run on the caller's connection inside the caller's transaction: nothing here commits,
rolls back, or changes the isolation of that transaction. Before writing anything, each
checks that the connection reaches the backend's own database (and schema) and is in a
transaction, or raises ``ConfigError`` with nothing written.

The connection's driver is found under the SQLAlchemy object first (``driver_connection``),
without importing SQLAlchemy unless the object is one of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from relaymq.errors import ConfigError
from relaymq.job import NewJob
from relaymq.records.store import Enqueued, Settle

T_co = TypeVar("T_co", covariant=True)


class InTransaction(Protocol[T_co]):
    """Writes bound to a caller's connection, made by ``run`` or ``run_sync``."""

    async def run(self) -> T_co:
        """Make the writes from async code (any connection type the backend knows)."""
        ...

    def run_sync(self) -> T_co:
        """Make the writes from sync code, on the calling thread (sync connections only)."""
        ...


class Transactional(Protocol):
    """A backend that writes in a caller's transaction (``capabilities.joins_transactions``)."""

    def enqueue_in(
        self, connection: object, jobs: Sequence[NewJob], at: float
    ) -> InTransaction[list[Enqueued]]:
        """``enqueue_announced(jobs, at)`` on ``connection``, in its open transaction: the jobs
        with their key rules and dependencies, and their events, which subscribers see only
        once (and if) that transaction commits. The answers say what the enqueue did inside
        the transaction (a duplicate of a job it can see: committed, or its own)."""
        ...

    def settle_in(
        self, connection: object, settle: Settle, events: Sequence[bytes]
    ) -> InTransaction[bool]:
        """``settle([settle])`` on ``connection``, in its open transaction, fenced as always;
        when it applies, ``events`` are published in the same transaction (seen at commit).
        True when it applied; False when the claim is lost (nothing written)."""
        ...


def transactional(backend: object) -> Transactional | None:
    """``backend`` as a ``Transactional``, or None when it cannot write in a caller's
    transaction."""
    capabilities = getattr(backend, "capabilities", None)
    if capabilities is not None and getattr(capabilities, "joins_transactions", False):
        return backend  # type: ignore[return-value]
    return None


def _is_sqlalchemy(connection: object) -> bool:
    return type(connection).__module__.startswith("sqlalchemy.")


async def driver_connection(connection: object) -> object:
    """The driver's connection under a SQLAlchemy ``AsyncSession`` or ``AsyncConnection``
    (its transaction begun, as SQLAlchemy begins one at a connection's first statement: the
    caller's later ``commit()`` would otherwise do nothing, and the driver's implicit
    transaction holding the job be rolled back when the connection goes back to its pool;
    asyncpg's begins only at the first statement, so one ``SELECT 1`` is sent when asyncpg has
    none yet), or under a sync ``Session`` or ``Connection``; any other object as it is."""
    if not _is_sqlalchemy(connection):
        return connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    if isinstance(connection, AsyncSession):
        connection = await connection.connection()
    if isinstance(connection, AsyncConnection):
        if not connection.in_transaction():  # what its own first statement would do
            await connection.begin()
        raw = await connection.get_raw_connection()
        driver: Any = raw.driver_connection
        if _asyncpg_outside_transaction(driver):
            await connection.exec_driver_sql("SELECT 1")
        return driver
    return driver_connection_sync(connection)


def driver_connection_sync(connection: object) -> object:
    """``driver_connection`` for sync code: under a SQLAlchemy ``Session`` or ``Connection``
    (an async one is refused: use ``await``); any other object as it is."""
    if not _is_sqlalchemy(connection):
        return connection
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

    if isinstance(connection, Session):
        connection = connection.connection()
    if isinstance(connection, Connection):
        if not connection.in_transaction():  # what its own first statement would do
            connection.begin()
        return connection.connection.driver_connection
    raise ConfigError(
        f"a SQLAlchemy {type(connection).__name__} is written to from async code: "
        "use the awaitable form (enqueue, add, complete_in), not the _sync one"
    )


def _asyncpg_outside_transaction(driver: Any) -> bool:
    if type(driver).__module__.split(".")[0] != "asyncpg":
        return False
    return not driver.is_in_transaction()


def unknown_connection(connection: object, backend: str, known: str) -> ConfigError:
    """The error for a connection of a type ``backend`` cannot write through."""
    kind = f"{type(connection).__module__}.{type(connection).__qualname__}"
    return ConfigError(f"{backend} cannot write in a transaction of a {kind}: it takes {known}")
