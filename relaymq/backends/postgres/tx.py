"""Running the backend's ``Steps`` (enqueue.py) on a connection: the backend's own (asyncpg),
or a caller's, inside the caller's transaction (``relaymq.backends.transactional``).

A caller's connection is an asyncpg ``Connection`` (a pool's too), a psycopg 3
``AsyncConnection`` or ``Connection``, or a SQLAlchemy object over asyncpg or psycopg. The
statements are those of queries.sql, with relaymq's tables named in the backend's schema (the
caller's ``search_path`` is the caller's), written for asyncpg's ``$n`` parameters; for
psycopg each ``$n`` becomes ``%(pn)s``; each statement is rewritten once. Before the first
write on a connection, ``tx_check`` (one statement that cannot fail) makes sure it reaches
the backend's database and schema. Nothing about the caller's transaction is touched.
"""

from __future__ import annotations

import functools
import re
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

from relaymq.backends.postgres.connection import qualify
from relaymq.backends.postgres.enqueue import Step, Steps, publish_steps
from relaymq.backends.postgres.errors import DRIVER_ERRORS, translate
from relaymq.backends.postgres.notify import Notes
from relaymq.backends.sqlfile import named_queries
from relaymq.backends.transactional import (
    driver_connection,
    driver_connection_sync,
    unknown_connection,
)
from relaymq.errors import BackendError, ConfigError
from relaymq.records.store import Settle

T = TypeVar("T")
Q = named_queries(__package__, "queries.sql")
KNOWN = (
    "an asyncpg Connection (a pool's too), a psycopg 3 AsyncConnection or Connection, or a "
    "SQLAlchemy AsyncSession, AsyncConnection, Session or Connection over one of them"
)


async def drive(steps: Steps[T], run: Callable[[Step], Awaitable[Any]]) -> T:
    """Run ``steps`` to their end, each through ``run``; their result."""
    try:
        step = next(steps)
        while True:
            step = steps.send(await run(step))
    except StopIteration as done:
        result: T = done.value
        return result


def drive_sync(steps: Steps[T], run: Callable[[Step], Any]) -> T:
    """``drive`` for a sync connection."""
    try:
        step = next(steps)
        while True:
            step = steps.send(run(step))
    except StopIteration as done:
        result: T = done.value
        return result


def asyncpg_runner(con: Any, schema: str | None = None) -> Callable[[Step], Awaitable[Any]]:
    """Each step as the asyncpg method of its kind; ``schema``: on a caller's connection."""

    async def run(step: Step) -> Any:
        kind, name, args = step
        return await getattr(con, kind)(
            Q[name] if schema is None else in_schema(name, schema), *args
        )

    return run


_PARAMETER = re.compile(r"\$(\d+)")


@functools.cache
def in_schema(name: str, schema: str) -> str:
    """Statement ``name`` with relaymq's tables (and sequence) named in ``schema``."""
    return qualify(Q[name], schema)


@functools.cache
def psycopg_sql(name: str, schema: str) -> str:
    """``in_schema`` with psycopg's named placeholders (``$3`` -> ``%(p3)s``)."""
    return _PARAMETER.sub(lambda m: f"%(p{m[1]})s", in_schema(name, schema).replace("%", "%%"))


def _answer(kind: str, rows: list[dict[str, Any]]) -> Any:
    if kind == "fetch":
        return rows
    if kind == "fetchrow":
        return rows[0] if rows else None
    if kind == "fetchval":
        return next(iter(rows[0].values())) if rows else None
    return None


def psycopg_runner(con: Any, schema: str) -> Callable[[Step], Awaitable[Any]]:
    from psycopg.rows import dict_row

    async def run(step: Step) -> Any:
        kind, name, args = step
        async with con.cursor(row_factory=dict_row) as cur:
            params = {f"p{i}": a for i, a in enumerate(args, 1)}
            await cur.execute(psycopg_sql(name, schema), params)
            return _answer(kind, await cur.fetchall() if cur.description else [])

    return run


def psycopg_sync_runner(con: Any, schema: str) -> Callable[[Step], Any]:
    from psycopg.rows import dict_row

    def run(step: Step) -> Any:
        kind, name, args = step
        with con.cursor(row_factory=dict_row) as cur:
            params = {f"p{i}": a for i, a in enumerate(args, 1)}
            cur.execute(psycopg_sql(name, schema), params)
            return _answer(kind, cur.fetchall() if cur.description else [])

    return run


def settle_args(settles: Sequence[Settle]) -> tuple[list[Any], ...]:
    """The arrays of the settle statements, one element per settle."""
    return (
        [s.claim.queue for s in settles],
        [s.claim.job_id for s in settles],
        [s.claim.token for s in settles],
        [s.outcome.value for s in settles],
        [s.result for s in settles],
        [s.error for s in settles],
        [float(s.delay) for s in settles],
    )


def attempt_args(settles: Sequence[Settle]) -> tuple[list[Any], ...]:
    """The arrays for each settle's attempt record (``ran_for``, ``keep``), after ``now``."""
    return [s.ran_for for s in settles], [s.keep for s in settles]


def settle_steps(
    settle: Settle, now: float | None, channel: str, events: Sequence[bytes], notes: Notes
) -> Steps[bool]:
    """One fenced settle, and (when it applied) its events."""
    rows = yield ("fetch", "settle", (*settle_args([settle]), now, *attempt_args([settle])))
    applied = bool(rows[0]["applied"])
    if applied and events:
        yield from publish_steps(channel, events, notes)
    return applied


class PostgresWrite(Generic[T]):
    """``steps`` to make in the transaction of ``connection`` (``InTransaction``)."""

    def __init__(
        self,
        connection: object,
        schema: str,
        database: str | None,
        steps: Callable[[], Steps[T]],
        where: str,
        checked: weakref.WeakSet[Any],
    ) -> None:
        self.connection = connection
        self.schema = schema
        self.database = database
        self.steps = steps
        self.where = where
        self.checked = checked
        """The connections already known to reach the backend's database and schema."""

    def _steps(self, con: Any) -> Steps[T]:
        key = con._con if type(con).__name__ == "PoolConnectionProxy" else con  # under a pool's
        if key in self.checked:
            return self.steps()
        return self._checking(key)

    def _checking(self, key: Any) -> Steps[T]:
        """``steps``, once the connection is known to reach the backend's tables (else
        ``ConfigError``, nothing written)."""
        row = yield ("fetchrow", "tx_check", (self.schema, self.database))
        if not row["ours"]:
            here = row["database"]
            if self.database is not None and here != self.database:
                raise ConfigError(
                    f"this connection is to database {here!r}, the backend's jobs are in "
                    f"{self.database!r}: write in a transaction of the backend's own database "
                    "(or give the app an outbox in yours)"
                )
            raise ConfigError(
                f"database {here!r} has no relaymq tables in schema {self.schema!r} (the "
                "backend's ?schema=): connect to the backend's database, or run relaymq "
                "migrate on it"
            )
        self.checked.add(key)
        return (yield from self.steps())

    async def run(self) -> T:
        con = await driver_connection(self.connection)
        module = type(con).__module__.split(".")[0]
        if module == "asyncpg":
            if not con.is_in_transaction():  # type: ignore[attr-defined]
                raise _no_transaction("asyncpg commits each statement on its own")
            try:
                return await drive(self._steps(con), asyncpg_runner(con, self.schema))
            except DRIVER_ERRORS as e:
                raise translate(e, self.where) from e
        if module == "psycopg":
            import psycopg

            if isinstance(con, psycopg.AsyncConnection):
                _check_psycopg(con)
                try:
                    return await drive(self._steps(con), psycopg_runner(con, self.schema))
                except psycopg.Error as e:
                    raise _psycopg_error(e) from e
            if isinstance(con, psycopg.Connection):
                return self._sync(con)
        raise unknown_connection(con, "the PostgreSQL backend", KNOWN)

    def run_sync(self) -> T:
        con = driver_connection_sync(self.connection)
        if type(con).__module__.split(".")[0] == "psycopg":
            import psycopg

            if isinstance(con, psycopg.Connection):
                return self._sync(con)
        if type(con).__module__.split(".")[0] in ("asyncpg", "psycopg"):
            raise ConfigError(
                f"a {type(con).__name__} is written to from async code: use the awaitable "
                "form (enqueue, add, complete_in), not the _sync one"
            )
        raise unknown_connection(con, "the PostgreSQL backend", KNOWN)

    def _sync(self, con: Any) -> T:
        import psycopg

        _check_psycopg(con)
        try:
            return drive_sync(self._steps(con), psycopg_sync_runner(con, self.schema))
        except psycopg.Error as e:
            raise _psycopg_error(e) from e


def _check_psycopg(con: Any) -> None:
    """A psycopg connection in a transaction, or outside one with autocommit off (psycopg
    opens one at the first statement, which the caller commits); else ``ConfigError``."""
    from psycopg.pq import TransactionStatus

    status = con.info.transaction_status
    if status == TransactionStatus.INERROR:
        raise ConfigError(
            "the transaction on this connection has failed: roll it back before writing in it"
        )
    if status == TransactionStatus.IDLE and con.autocommit:
        raise _no_transaction("this psycopg connection is in autocommit mode")
    if status not in (TransactionStatus.IDLE, TransactionStatus.INTRANS):
        raise ConfigError(f"this psycopg connection is busy ({status.name}): wait for it")


def _no_transaction(why: str) -> ConfigError:
    return ConfigError(
        f"no transaction is open on this connection ({why}), so the job would be stored at "
        "once whatever becomes of your work: open one first (async with conn.transaction())"
    )


def _psycopg_error(e: Exception) -> BackendError:
    return BackendError(f"PostgreSQL refused relaymq's write in your transaction: {e}")
