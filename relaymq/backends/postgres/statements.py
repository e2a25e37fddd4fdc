"""How ``PostgresBackend`` runs its statements (``queries.sql``, by name) on its pool: one
place for the connection check, the retry of a read on a dead pooled connection, and the
translation of driver errors. The base of the backend's parts (``admin.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg

from relaymq.backends import sqlfile
from relaymq.backends.postgres.config import Options
from relaymq.backends.postgres.errors import DRIVER_ERRORS, translate
from relaymq.backends.postgres.limits import LimitedQueues
from relaymq.errors import BackendError, BackendUnavailableError
from relaymq.records.store import Clock

Q = sqlfile.named_queries(__package__, "queries.sql")
T = TypeVar("T")


READS = frozenset(
    {
        "get_jobs",
        "list_waiting",
        "list_delayed",
        "list_active",
        "list_finished",
        "search_jobs",
        "counts",
        "is_paused",
        "list_queues",
        "meta_get",
        "meta_list",
        "wait_check",
        "fetch_event",
        "sequence_head",
    }
)
"""Statements that change nothing: retried once when a pooled connection turns out dead."""


class Statements:
    """The statement runner every part of the backend uses."""

    options: Options
    _clock: Clock | None
    _pool: asyncpg.Pool | None
    _limited: LimitedQueues

    def _now(self) -> float | None:
        """The test clock's reading, or None: the statement then uses the server's now()."""
        return self._clock() if self._clock is not None else None

    async def _run(self, method: str, name: str, *args: Any) -> Any:
        pool = self._pool
        if pool is None:
            raise BackendError("PostgresBackend is not connected (await connect() first)")
        for attempt in (1, 2):
            try:
                async with pool.acquire() as con:
                    return await getattr(con, method)(Q[name], *args)
            except DRIVER_ERRORS as e:
                error = translate(e, self.options.where)
                if attempt == 1 and name in READS and isinstance(error, BackendUnavailableError):
                    continue
                raise error from e
        raise AssertionError("unreachable")

    async def _in_transaction(self, step: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``await step(con, *args)`` on a pooled connection (it opens its own transaction)."""
        pool = self._pool
        if pool is None:
            raise BackendError("PostgresBackend is not connected (await connect() first)")
        try:
            async with pool.acquire() as con:
                return await step(con, *args)
        except DRIVER_ERRORS as e:
            raise translate(e, self.options.where) from e

    async def _fetch(self, name: str, *args: Any) -> list[asyncpg.Record]:
        rows: list[asyncpg.Record] = await self._run("fetch", name, *args)
        return rows

    async def _fetchrow(self, name: str, *args: Any) -> asyncpg.Record:
        row: asyncpg.Record = await self._run("fetchrow", name, *args)
        return row

    async def _execute(self, name: str, *args: Any) -> None:
        await self._run("execute", name, *args)
