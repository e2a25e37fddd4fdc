"""A worker's next claim comes after its own settle that puts a job back in line (RELIABILITY.md
I10), however long that settle takes. On PostgreSQL a settle and a claim run on two pooled
connections side by side, so a slow settle (here: R's row locked by another transaction while
the retry is written) let the claim loop take the lower-priority B first (issue 36). The lock
makes the slow settle certain, where tests/contract/test_retry_order.py meets it by chance."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import asyncpg

from relaymq import JobContext, Queue, Settings, task
from relaymq.backends.postgres import PostgresBackend
from relaymq.records.store import Beat, Outcome, Settle
from tests.contract.test_keys import claim_exactly
from tests.contract.test_retry_order import resume_one_at_a_time
from tests.support.case_postgres import CASE, DATABASE, SERVER
from tests.support.jobs import new_job, queue_name

HOLD = 1.0
"""Seconds R's row stays locked at most: the worker's settle of R waits that long."""

FAST = Settings(heartbeat_interval=0.1, stalled_threshold=5.0, shutdown_timeout=2.0)

STARTS: dict[str, list[str]] = {}
"""Per test key, the labels of the handlers in the order they started."""
LOCKS: dict[str, asyncpg.Connection] = {}
"""Per test key, the connection whose open transaction locks R's row."""


async def unlock(key: str) -> None:
    """End the transaction that locks R's row (closing its connection rolls it back)."""
    con = LOCKS.pop(key, None)
    if con is not None:
        await con.close()


@task(queue="tests", retries=1, backoff=0)
async def fails_holding_its_row(ctx: JobContext, key: str, schema: str) -> None:
    """Its first attempt locks its own row in another transaction (for ``HOLD`` seconds at
    most), then raises: the retry, without delay, is written once the lock goes."""
    STARTS.setdefault(key, []).append("R")
    if ctx.attempt > 1:
        return
    con = await asyncpg.connect(f"{SERVER}/{DATABASE}", server_settings={"search_path": schema})
    await con.execute("BEGIN")
    await con.execute(
        "SELECT 1 FROM relaymq_jobs WHERE queue = $1 AND id = $2 FOR UPDATE", ctx.queue, ctx.job_id
    )
    LOCKS[key] = con
    asyncio.get_running_loop().call_later(HOLD, lambda: asyncio.ensure_future(unlock(key)))
    raise RuntimeError("first attempt of R fails on purpose")


@task(queue="tests")
async def records(key: str, label: str) -> None:
    """Records its start, and lets R's row go: a claim that passed R over has happened."""
    STARTS.setdefault(key, []).append(label)
    if label == "B":
        await unlock(key)


async def test_the_next_claim_waits_for_a_retry_still_being_written(
    postgres_case: None, tmp_path: Path
) -> None:
    live = await CASE.make(None, tmp_path)
    assert isinstance(live, PostgresBackend)
    key = uuid.uuid4().hex
    try:
        queue = Queue(queue_name("retry-order"), live, settings=FAST)
        schema = live.options.schema
        await queue.pause()
        handles = [
            await queue.add(fails_holding_its_row.with_options(priority=1).call(key, schema)),
            await queue.add(records.with_options(priority=1).call(key, "A")),
            await queue.add(records.with_options(priority=5).call(key, "B")),
        ]
        await resume_one_at_a_time(live, queue, handles)
        assert STARTS[key] == ["R", "A", "R", "B"]
    finally:
        await unlock(key)
        await live.close()


async def test_a_renewal_never_waits_behind_a_write_of_its_job(
    postgres_case: None, tmp_path: Path
) -> None:
    """A heartbeat of a job whose row another transaction is writing (the worker's own settle,
    here a lock standing for it) answers from the last committed row at once, rather than
    queueing behind the write: a renewal queued behind a settle that put the job back in line
    would lock the job's row after that settle, and a claim then would pass over it (SKIP
    LOCKED): the retry order this file is about, met in CI under load."""
    live = await CASE.make(None, tmp_path)
    assert isinstance(live, PostgresBackend)
    q = queue_name("renewal")
    con = await asyncpg.connect(
        f"{SERVER}/{DATABASE}", server_settings={"search_path": live.options.schema}
    )
    try:
        await live.enqueue([new_job(q, "R", priority=1), new_job(q, "B", priority=5)])
        [r] = await claim_exactly(live, q, 1)
        await con.execute("BEGIN")
        await con.execute("SELECT 1 FROM relaymq_jobs WHERE queue = $1 AND id = 'R' FOR UPDATE", q)
        async with asyncio.timeout(5):  # the renewal answering while the row is locked
            [beat] = await live.heartbeat([Beat(r.claim)])
        assert beat.held and not beat.cancel_requested
        settling = asyncio.create_task(live.settle([Settle(r.claim, Outcome.RETRY, error="x")]))
        async with asyncio.timeout(5):  # a renewal sent while the settle waits for the row
            [beat] = await live.heartbeat([Beat(r.claim)])
        assert beat.held
        await con.execute("ROLLBACK")
        async with asyncio.timeout(10):  # the settle writing once the row is free
            assert await settling == [True]
        [again] = (await live.claim([q], "w", 1)).jobs
        assert (again.id, again.attempts) == ("R", 2)
        [beat] = await live.heartbeat([Beat(r.claim)])  # the first claim's token: lost
        assert not beat.held
    finally:
        await con.close()
        await live.close()
