"""``PostgresBackend``'s admin by ids and state, pause, limits, the history's tallies and the
meta store: one statement each (``queries.sql``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import asyncpg

from relaymq.backends.postgres.errors import DRIVER_ERRORS, translate
from relaymq.backends.postgres.limits import to_limits
from relaymq.backends.postgres.records import to_job_lenient
from relaymq.backends.postgres.statements import Q, Statements
from relaymq.errors import BackendError
from relaymq.job import TERMINAL, Job, JobState
from relaymq.records.limits import Limits
from relaymq.records.meta import MetaRecord
from relaymq.records.store import Tally, merge_tallies

CLEAN_BATCH = 1000


def _meta(row: asyncpg.Record) -> MetaRecord:
    return MetaRecord(row["key"], bytes(row["value"]), row["version"], row["expires"])


def _seconds(ttl: float | None) -> float | None:
    return None if ttl is None else float(ttl)


class PostgresAdmin(Statements):
    async def sequence_head(self, queue: str, sequence: str) -> Job | None:
        row = await self._fetchrow("sequence_head", queue, sequence)
        return None if row is None else to_job_lenient(row, JobState(row["state"]))

    async def cancel_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        return await self._batch("cancel_jobs", queue, ids, self._now())

    async def retry_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        return await self._batch("retry_jobs", queue, ids, self._now())

    async def remove_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        return await self._batch("remove_jobs", queue, ids)

    async def _batch(self, query: str, queue: str, ids: Sequence[str], *args: Any) -> list[bool]:
        """One statement over ``ids``; per id, whether it was among the rows changed."""
        if not ids:
            return []
        changed = {r["id"] for r in await self._fetch(query, queue, list(ids), *args)}
        return [i in changed for i in ids]

    async def pause(self, queue: str) -> None:
        await self._execute("pause", queue, self._now())

    async def resume(self, queue: str) -> None:
        await self._execute("resume", queue, self.options.schema)

    async def is_paused(self, queue: str) -> bool:
        return bool((await self._fetchrow("is_paused", queue))["paused"])

    async def drain(self, queue: str) -> int:
        return int((await self._fetchrow("drain", queue))["n"])

    async def clean(self, queue: str, state: JobState, older_than: float) -> int:
        if state not in TERMINAL:
            return 0
        total = 0
        while True:
            row = await self._fetchrow(
                "clean", queue, state.value, float(older_than), CLEAN_BATCH, self._now()
            )
            total += int(row["n"])
            if row["n"] < CLEAN_BATCH:
                return total

    async def obliterate(self, queue: str) -> None:
        pool = self._pool
        if pool is None:
            raise BackendError("PostgresBackend is not connected (await connect() first)")
        try:
            async with pool.acquire() as con, con.transaction():
                await con.execute(Q["obliterate_jobs"], queue)
                await con.execute(Q["obliterate_queue"], queue)
        except DRIVER_ERRORS as e:
            raise translate(e, self.options.where) from e

    async def prune_keys(self, queue: str, older_than: float) -> int:
        return len(await self._fetch("prune_keys", queue, older_than, self._now()))

    async def set_limits(self, queue: str, limits: Limits | None) -> None:
        if limits is None or limits.empty:
            await self._execute("remove_limits", queue)
        else:
            await self._execute(
                "set_limits",
                queue,
                limits.max_active,
                limits.rate,
                float(limits.per),
                limits.key_rate,
                float(limits.key_per),
                limits.key_max_active,
                limits.fair,
                json.dumps(limits.weights),
            )
        self._limited.forget()

    async def list_limits(self) -> dict[str, Limits]:
        return {r["queue"]: to_limits(r) for r in await self._fetch("list_limits")}

    async def list_queues(self) -> list[str]:
        return [r["name"] for r in await self._fetch("list_queues")]

    # -- history ----------------------------------------------------------------------------

    async def add_tallies(self, tallies: Sequence[Tally]) -> None:
        merged = merge_tallies(tallies)
        per_queue = [t for t in merged if not t.task]
        if per_queue:
            columns = (
                [t.queue for t in per_queue],
                [t.minute for t in per_queue],
                [t.completed for t in per_queue],
                [t.retried for t in per_queue],
                [t.failed for t in per_queue],
            )
            await self._execute("add_tallies", *columns)
        per_task = [t for t in merged if t.task]
        if per_task:
            await self._execute(
                "add_task_tallies",
                [t.queue for t in per_task],
                [t.task for t in per_task],
                [t.minute for t in per_task],
                [t.completed for t in per_task],
                [t.retried for t in per_task],
                [t.failed for t in per_task],
                [_array(t.run_times) for t in per_task],
                [_array(t.pickups) for t in per_task],
            )

    async def tallies(self, queue: str, since: int) -> list[Tally]:
        return [
            Tally(
                queue,
                r["minute"],
                r["completed"],
                r["retried"],
                r["failed"],
                r["task"],
                tuple(r["run_times"] or ()),
                tuple(r["pickups"] or ()),
            )
            for r in await self._fetch("tallies", queue, since)
        ]

    async def prune_tallies(self, before: int) -> None:
        await self._execute("prune_tallies", before)

    # -- meta -------------------------------------------------------------------------------

    async def meta_get(self, key: str) -> MetaRecord | None:
        row = await self._fetchrow("meta_get", key, self._now())
        return None if row is None else _meta(row)

    async def meta_put(self, key: str, value: bytes, ttl: float | None = None) -> None:
        await self._execute("meta_put", key, value, _seconds(ttl), self._now())

    async def meta_swap(
        self, key: str, expected: int | None, value: bytes, ttl: float | None = None
    ) -> bool:
        if expected is None:
            row = await self._fetchrow("meta_create", key, value, _seconds(ttl), self._now())
        else:
            row = await self._fetchrow(
                "meta_swap", key, expected, value, _seconds(ttl), self._now()
            )
        return row is not None

    async def meta_list(self, prefix: str) -> list[MetaRecord]:
        return [_meta(r) for r in await self._fetch("meta_list", prefix, self._now())]

    async def meta_delete(self, key: str) -> bool:
        row = await self._fetchrow("meta_delete", key, self._now())
        return row is not None and bool(row["live"])


def _array(counts: Sequence[int]) -> str:
    """A histogram as PostgreSQL array text (``{1,0,2}``): arrays of arrays do not unnest."""
    return "{" + ",".join(str(n) for n in counts) + "}"
