"""A claim of a queue with limits counts without a lock and claims only while no other claim
of the queue changed its limits row since it counted (relaymq/backends/postgres/limits.py):
the last statement of a claim that lost that race takes nothing and stores nothing."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest_asyncio

from relaymq.backends.postgres import PostgresBackend
from relaymq.backends.postgres.limits import Q, gate_of, windows
from relaymq.job import JobState
from relaymq.records.limits import Limits
from tests.support.case_postgres import DATABASE, SERVER, drop_schema, ensure_database
from tests.support.jobs import new_job


@pytest_asyncio.fixture
async def backend(postgres_case: None) -> AsyncIterator[PostgresBackend]:
    await ensure_database()
    schema = f"limited_{uuid.uuid4().hex[:12]}"
    b = PostgresBackend(f"{SERVER}/{DATABASE}?schema={schema}&migrate=true")
    await b.connect()
    try:
        yield b
    finally:
        await b.close()
        await drop_schema(schema)


async def test_a_claim_counted_before_another_claim_of_the_queue_takes_nothing(
    backend: PostgresBackend,
) -> None:
    await backend.set_limits("q", Limits(key_max_active=1))
    await backend.enqueue([new_job("q", i, limit_key="a") for i in ("a1", "a2")])
    assert backend._pool is not None
    async with backend._pool.acquire() as con:
        row = await con.fetchrow(Q["limits_view"], "q", 0, None, 1)
        late = gate_of(row, 1)  # counted while key "a" had no active job
        assert late.budget is not None and late.budget.take("a")
        taken = await backend.claim(["q"], "w1", 1)  # another claim, in between
        assert [j.id for j in taken.jobs] == ["a1"]
        rows = await con.fetch(
            Q["claim_ids"], "q", ["a2"], "w2", None, *windows(late, 0), late.version, True
        )
        assert [(r["won"], r["id"]) for r in rows] == [(False, None)]
        # Counted again, the same statement wins, and the cap leaves a2 waiting.
        row = await con.fetchrow(Q["limits_view"], "q", 0, None, 1)
        fresh = gate_of(row, 1)
        assert fresh.budget is not None and not fresh.budget.take("a")
        rows = await con.fetch(
            Q["claim_ids"], "q", [], "w2", None, *windows(fresh, 0), fresh.version, True
        )
        assert [(r["won"], r["id"]) for r in rows] == [(True, None)]
    [a2] = await backend.get_jobs("q", ["a2"])
    assert a2 is not None and a2.state is JobState.WAITING
