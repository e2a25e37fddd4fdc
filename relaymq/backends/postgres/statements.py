"""How ``PostgresBackend`` runs its statements (``queries.sql``, by name) on its pool: one
place for the connection check, the retry of a read on a dead pooled connection, the
translation of driver errors, and the rows that cannot be read as jobs (failed into the DLQ).
The base of the backend's parts (``admin.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import asyncpg

from relaymq.backends import sqlfile
from relaymq.backends.postgres.config import Options
from relaymq.backends.postgres.errors import DRIVER_ERRORS, translate
from relaymq.backends.postgres.limits import LimitedQueues
from relaymq.backends.postgres.records import describe, problems, to_job
from relaymq.errors import BackendError, BackendUnavailableError
from relaymq.job import Job
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

    async def _readable(self, rows: Sequence[asyncpg.Record], now: float | None) -> list[Job]:
        """The jobs of the rows a claim took; those that cannot be read are failed into the
        DLQ with the reason (``relaymq.backends.corrupt``), not handed out, not lost."""
        jobs: list[Job] = []
        bad: list[tuple[asyncpg.Record, list[str]]] = []
        for r in rows:
            wrong = problems(r)
            if wrong:
                bad.append((r, wrong))
            else:
                jobs.append(to_job(r))
        if bad:
            await self._quarantine(bad, now)
        return jobs

    async def _quarantine(
        self, bad: Sequence[tuple[asyncpg.Record, list[str]]], now: float | None
    ) -> list[str]:
        """Fail these unreadable rows into the DLQ with the reason; the ids failed."""
        failed = await self._fetch(
            "quarantine",
            [r["queue"] for r, _ in bad],
            [r["id"] for r, _ in bad],
            [describe(r, wrong) for r, wrong in bad],
            [r["state"] for r, _ in bad],
            now,
        )
        return [r["id"] for r in failed]

    async def _quarantine_strays(self, queue: str, states: Sequence[str]) -> list[str]:
        """Fail the jobs of ``queue`` in these states nobody knows into the DLQ."""
        bad = [
            (r, problems(r))
            for state in states
            for r in await self._fetch("jobs_in_state", queue, state)
        ]
        return await self._quarantine(bad, self._now()) if bad else []
