"""Stalled recovery, leases and the poison-job guard."""

from __future__ import annotations

import asyncio

from relaymq.backends.base import Backend
from relaymq.job import JobState
from relaymq.records.store import Beat, Outcome, Settle
from relaymq.testing import FakeClock
from tests.conftest import MakeBackend
from tests.support.jobs import get_job, new_job


async def test_only_stale_active_jobs_are_recovered(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    await backend.enqueue([new_job(q, "old"), new_job(q, "fresh"), new_job(q, "idle")])
    [old] = (await backend.claim([q], "w", 1)).jobs
    assert old.id == "old"
    clock.advance(25)
    [fresh] = (await backend.claim([q], "w", 1)).jobs
    clock.advance(10)  # old: 35 s since claim; fresh: 10 s
    recovered = await backend.recover_stalled(q, threshold=30, max_stalled=5)
    assert recovered.requeued == ["old"] and recovered.failed == []
    stored_old = await get_job(backend, q, "old")
    stored_fresh = await get_job(backend, q, "fresh")
    assert stored_old is not None and stored_old.state is JobState.WAITING
    assert stored_old.stalls == 1
    assert stored_fresh is not None and stored_fresh.state is JobState.ACTIVE
    assert fresh.id == "fresh"


async def test_recovered_job_reenters_through_the_fifo_allocator(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    await backend.enqueue([new_job(q, "a")])
    [a] = (await backend.claim([q], "w", 1)).jobs
    await backend.enqueue([new_job(q, "b")])
    clock.advance(60)
    await backend.recover_stalled(q, threshold=30, max_stalled=5)
    await backend.enqueue([new_job(q, "c")])
    # "a" was recovered after "b" was enqueued and before "c": it queues between them.
    assert [j.id for j in (await backend.claim([q], "w", 3)).jobs] == ["b", "a", "c"]
    assert a.token == 1


async def test_recovered_job_keeps_its_priority(backend: Backend, q: str, clock: FakeClock) -> None:
    await backend.enqueue([new_job(q, "urgent", priority=0)])
    await backend.claim([q], "w", 1)
    await backend.enqueue([new_job(q, "normal", priority=5)])
    clock.advance(60)
    await backend.recover_stalled(q, threshold=30, max_stalled=5)
    assert [j.id for j in (await backend.claim([q], "w", 2)).jobs] == ["urgent", "normal"]


async def test_job_past_max_stalled_fails_into_the_dlq(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    await backend.enqueue([new_job(q, "poison", max_attempts=10)])
    for round_ in range(2):
        await backend.claim([q], "w", 1)
        clock.advance(60)
        recovered = await backend.recover_stalled(q, threshold=30, max_stalled=2)
        assert recovered.requeued == ["poison"], round_
    await backend.claim([q], "w", 1)
    clock.advance(60)
    recovered = await backend.recover_stalled(q, threshold=30, max_stalled=2)
    assert recovered.failed == ["poison"] and recovered.requeued == []
    stored = await get_job(backend, q, "poison")
    assert stored is not None and stored.state is JobState.FAILED
    assert stored.error is not None and "stalled" in stored.error
    assert [j.id for j in await backend.list_jobs(q, JobState.FAILED)] == ["poison"]


async def test_f6_concurrent_recoveries_requeue_once(
    make_backend: MakeBackend, clock: FakeClock, q: str
) -> None:
    a, b = await make_backend(clock), await make_backend(clock)
    await a.enqueue([new_job(q) for _ in range(5)])
    await a.claim([q], "w", 5)
    clock.advance(60)
    results = await asyncio.gather(
        a.recover_stalled(q, 30, 5), b.recover_stalled(q, 30, 5), a.recover_stalled(q, 30, 5)
    )
    requeued = [job_id for r in results for job_id in r.requeued]
    assert len(requeued) == 5 and len(set(requeued)) == 5
    stalls = [(await get_job(a, q, i)).stalls for i in requeued]  # type: ignore[union-attr]
    assert stalls == [1] * 5


async def test_f9_token_keeps_growing_across_reclaims(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    await backend.enqueue([new_job(q, max_attempts=5)])
    tokens = []
    for _ in range(3):
        [job] = (await backend.claim([q], "w", 1)).jobs
        tokens.append(job.token)
        await backend.settle([Settle(job.claim, Outcome.RETRY, error="again")])
    assert tokens == sorted(set(tokens)) and len(tokens) == 3


async def test_heartbeat_keeps_a_long_job_alive(backend: Backend, q: str, clock: FakeClock) -> None:
    await backend.enqueue([new_job(q)])
    [job] = (await backend.claim([q], "w", 1)).jobs
    for _ in range(6):
        clock.advance(20)
        [beat] = await backend.heartbeat([Beat(job.claim)])
        assert beat.held
        assert (await backend.recover_stalled(q, 30, 5)).requeued == []


async def test_lock_is_exclusive_until_it_lapses(
    make_backend: MakeBackend, clock: FakeClock, q: str
) -> None:
    a, b = await make_backend(clock), await make_backend(clock)
    name = f"maintenance:{q}"
    assert await a.lease(name, "A", ttl=10)
    assert not await b.lease(name, "B", ttl=10)
    assert await a.lease(name, "A", ttl=10)  # renewal by the holder
    clock.advance(11)
    assert await b.lease(name, "B", ttl=10)  # lapsed: B takes over
    assert not await a.lease(name, "A", ttl=10)
    await a.lease(name, "A", 0)  # not the holder: no effect
    assert not await a.lease(name, "A", ttl=10)
    await b.lease(name, "B", 0)
    assert await a.lease(name, "A", ttl=10)


async def test_f8_recovery_never_touches_a_live_claim(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    await backend.enqueue([new_job(q, ttl=5)])
    [job] = (await backend.claim([q], "w", 1)).jobs
    clock.advance(29)  # TTL long passed, claim still fresh
    recovered = await backend.recover_stalled(q, threshold=30, max_stalled=0)
    assert recovered.requeued == [] and recovered.failed == []
    stored = await get_job(backend, q, job.id)
    assert stored is not None and stored.state is JobState.ACTIVE
