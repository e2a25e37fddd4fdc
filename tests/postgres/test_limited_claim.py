"""A claim of a queue with limits counts without a lock and claims only while no other claim
of the queue changed its limits row since it counted (relaymq/backends/postgres/limits.py):
the last statement of a claim that lost that race takes nothing and stores nothing."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest_asyncio

from relaymq.backends.postgres import PostgresBackend
from relaymq.backends.postgres.limits import Q, _claim_gated, claim_ids, gate_of
from relaymq.job import JobState
from relaymq.records.limits import Limits
from relaymq.records.store import Outcome, Settle
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
        row = await con.fetchrow(Q["limits_view"], "q", 0, None, 1, [], [], [])
        late = gate_of(row, 1)  # counted while key "a" had no active job
        assert late.budget is not None and late.budget.take("a")
        taken = await backend.claim(["q"], "w1", 1)  # another claim, in between
        assert [j.id for j in taken.jobs] == ["a1"]
        rows = await claim_ids(con, "q", ["a2"], "w2", None, late)
        assert [(r["won"], r["id"]) for r in rows] == [(False, None)]
        # Counted again, the same statement wins, and the cap leaves a2 waiting.
        row = await con.fetchrow(Q["limits_view"], "q", 0, None, 1, [], [], [])
        fresh = gate_of(row, 1)
        assert fresh.budget is not None and not fresh.budget.take("a")
        rows = await claim_ids(con, "q", [], "w2", None, fresh)
        assert [(r["won"], r["id"]) for r in rows] == [(True, None)]
    [a2] = await backend.get_jobs("q", ["a2"])
    assert a2 is not None and a2.state is JobState.WAITING


async def test_settles_in_the_claim_statement_that_do_not_apply_as_counted_claim_nothing(
    backend: PostgresBackend,
) -> None:
    """A limited claim that goes with the worker's settles counts and reads its candidates as
    if they had applied; when one does not (its job was recovered in between), the claim,
    made on what no longer holds, takes nothing: here it would have started the second job
    of a sequence while the first, back in line, waits."""
    await backend.set_limits("q", Limits(max_active=10))
    await backend.enqueue([new_job("q", i, sequence="s") for i in ("s1", "s2")])
    [s1] = (await backend.claim(["q"], "w1", 1)).jobs
    assert backend._pool is not None
    async with backend._pool.acquire() as con:
        row = await con.fetchrow(
            Q["limits_view"], "q", 0, None, 4, ["s1"], [s1.claim.token], ["completed"]
        )
        assert row["settling"] == 1 and list(row["page_ids"]) == ["s2"]  # as if s1 completed
        page = list(zip(row["page_ids"], row["page_keys"], row["page_served"], strict=True))
        gate = gate_of(row, 1)
        recovered = await backend.recover_stalled("q", 0.0, max_stalled=5)
        assert recovered.requeued == ["s1"]  # in between: s1 back in line
        settle = Settle(s1.claim, Outcome.COMPLETE, result=b"1")
        claimed, applied = await _claim_gated(con, "q", "w1", None, gate, (page, 4), ([settle], 1))
    assert claimed is None and applied == [False]
    jobs = await backend.get_jobs("q", ["s1", "s2"])
    assert [j.state if j else None for j in jobs] == [JobState.WAITING, JobState.WAITING]


async def test_a_claim_with_settles_reads_them_as_applied_past_its_first_page_too(
    backend: PostgresBackend,
) -> None:
    """When the limits view promoted due jobs, its first page (read in the same snapshot,
    without them) is read again by another statement, which must read the claim's own settles
    as applied too: the completed job's sequence lets its next job start, in this claim."""
    now = [1_800_000_000.0]
    clocked = PostgresBackend(backend.url, clock=lambda: now[0])
    await clocked.connect()
    try:
        await clocked.set_limits("q", Limits(max_active=10))
        jobs = [new_job("q", i, sequence="s") for i in ("s1", "s2")]
        await clocked.enqueue([*jobs, new_job("q", "d1", delay=5)])
        [s1] = (await clocked.claim(["q"], "w", 1)).jobs
        now[0] += 10  # d1 is due: the claim below promotes it
        settle = Settle(s1.claim, Outcome.COMPLETE, result=b"1")
        got = await clocked.settle_and_claim([settle], ["q"], "w", 2)
    finally:
        await clocked.close()
    assert got.applied == [True] and got.batch is not None
    assert [j.id for j in got.batch.jobs] == ["s2", "d1"]
