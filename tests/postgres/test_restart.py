"""Restart survival on a private cluster: crash-style stop (-m immediate), then start.

Every accepted job is still there, the pool and the LISTEN connection come back by
themselves within 10 s, active jobs are recovered and completed, nothing is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest

from relaymq.backends.postgres import PostgresBackend
from relaymq.job import JobState
from relaymq.records.store import Outcome, Settle
from tests.postgres.cluster import Cluster
from tests.support.jobs import get_job, new_job

pytestmark = pytest.mark.slow


async def within(seconds: float, awaitable: Awaitable[object], what: str) -> None:
    try:
        await asyncio.wait_for(awaitable, seconds)
    except TimeoutError:
        raise AssertionError(f"waited {seconds} s for {what}") from None


async def test_accepted_jobs_survive_and_active_ones_are_recovered(cluster: Cluster) -> None:
    backend = PostgresBackend(cluster.url, migrate=True)
    await backend.connect()
    try:
        q = "restart"
        jobs = [new_job(q, f"j{i:03}") for i in range(200)]
        await backend.enqueue(jobs[:100])
        await backend.enqueue(jobs[100:])
        active = (await backend.claim([q], "before", 30)).jobs
        done = (await backend.claim([q], "before", 20)).jobs
        assert (
            await backend.settle([Settle(j.claim, Outcome.COMPLETE) for j in done]) == [True] * 20
        )

        await asyncio.to_thread(cluster.stop_immediate)
        await asyncio.to_thread(cluster.start)

        # The next call after the server is back works (the pool replaced its connections).
        counts = await backend.counts(q)
        assert counts[JobState.WAITING] == 150
        assert counts[JobState.ACTIVE] == 30
        assert counts[JobState.COMPLETED] == 20
        for j in jobs:
            assert await get_job(backend, q, j.id) is not None, f"{j.id} lost in the restart"

        # The claims made before the restart are stale: recovery gives their jobs back, and
        # their old tokens stay fenced off (F9).
        recovered = await backend.recover_stalled(q, threshold=0, max_stalled=5)
        assert sorted(recovered.requeued) == sorted(j.id for j in active)
        rest: list[str] = []
        while batch := (await backend.claim([q], "after", 50)).jobs:
            answers = await backend.settle([Settle(j.claim, Outcome.COMPLETE) for j in batch])
            assert all(answers)
            rest += [j.id for j in batch]
        assert len(rest) == 180 and len(set(rest)) == 180
        stale = [Settle(j.claim, Outcome.COMPLETE, result=b"late") for j in active]
        assert await backend.settle(stale) == [False] * 30
        counts = await backend.counts(q)
        assert counts[JobState.COMPLETED] == 200 and sum(counts.values()) == 200
    finally:
        await backend.close()


async def test_listen_connection_comes_back_and_wakes_an_idle_waiter(cluster: Cluster) -> None:
    waiter = PostgresBackend(cluster.url, migrate=True)
    producer = PostgresBackend(cluster.url)
    await waiter.connect()
    await producer.connect()
    try:
        q = "wake"
        await waiter.wait([q], 0.01)  # starts the LISTEN connection
        assert waiter._listener.connections == 1

        await asyncio.to_thread(cluster.stop_immediate)
        await asyncio.to_thread(cluster.start)
        await within(10, waiter._listener.came_up(2), "the LISTEN connection to come back")

        idle = asyncio.create_task(waiter.wait([q], 60))
        # Not a wait for a result: time for the waiter to get past its "work already there?"
        # check, so that what wakes it below can only be the NOTIFY.
        await asyncio.sleep(0.2)
        assert not idle.done()
        await producer.enqueue([new_job(q, "after-restart")])
        # A listening waiter does not poll: until its 60 s timeout only a NOTIFY can wake it,
        # so waking well inside that proves the re-established LISTEN (no tight timing).
        await within(10, idle, "the idle waiter to be woken by NOTIFY")
        [job] = (await waiter.claim([q], "w", 1)).jobs
        assert job.id == "after-restart"
    finally:
        await producer.close()
        await waiter.close()
