"""SQLite has one write lock. A process that holds it for long (frozen in the middle of a
transaction) keeps every worker from renewing its claims; the recovery that runs once the lock
is free must not take those claims for stalled ones (the chaos soak froze such a process)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from relaymq.backends.sqlite import SQLiteBackend
from relaymq.job import JobState
from tests.support.case_sqlite import url
from tests.support.jobs import get_job, new_job
from tests.support.waiting import poll_until

THRESHOLD = 0.3
LOCKED_FOR = 0.9  # three thresholds: long enough for the claim to look stalled


async def test_a_claim_that_went_stale_while_the_database_was_locked_is_not_stalled(
    tmp_path: Path, q: str
) -> None:
    b = SQLiteBackend(url(tmp_path))
    await b.connect()
    holder = sqlite3.connect(tmp_path / "relaymq.db", isolation_level=None)
    try:
        await b.enqueue([new_job(q, "j")])
        [job] = (await b.claim([q], "w", 1)).jobs
        holder.execute("BEGIN IMMEDIATE")  # another process, frozen inside a write
        recovering = asyncio.create_task(b.recover_stalled(q, THRESHOLD, max_stalled=5))
        await asyncio.sleep(LOCKED_FOR)  # the lock held: the condition under test
        holder.execute("ROLLBACK")
        assert (await recovering).requeued == []  # it waited for the lock all that time
        stored = await get_job(b, q, "j")
        assert stored is not None and stored.state is JobState.ACTIVE
        assert stored.token == job.token

        # A claim still not renewed once the lock is free is recovered, a threshold later.
        async def recovered() -> bool:
            return bool((await b.recover_stalled(q, THRESHOLD, max_stalled=5)).requeued)

        await poll_until(recovered, "recovery of the claim that stayed stale", every=THRESHOLD / 3)
        stored = await get_job(b, q, "j")
        assert stored is not None and stored.state is JobState.WAITING
    finally:
        holder.close()
        await b.close()
