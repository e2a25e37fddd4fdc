"""Admin and observation: counts, listing, manual retry, removal, clean-up, registry, events."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from relaymq import registry
from relaymq.backends import from_url
from relaymq.backends.base import Backend
from relaymq.job import JobState
from relaymq.records.store import CancelResult, Outcome, Settle, WorkerInfo
from relaymq.testing import FakeClock
from tests.conftest import MakeBackend
from tests.support.cases import BackendCase
from tests.support.jobs import cancel, get_job, new_job, remove_job, retry_job


async def test_counts_cover_every_state(backend: Backend, q: str) -> None:
    await backend.enqueue([new_job(q) for _ in range(6)] + [new_job(q, delay=60)])
    a, b, c, d = (await backend.claim([q], "w", 4)).jobs
    await backend.enqueue([new_job(q, "blocked", depends_on=(d.id,))])
    await backend.settle(
        [
            Settle(a.claim, Outcome.COMPLETE, result=b"1"),
            Settle(b.claim, Outcome.FAIL, error="x"),
            Settle(c.claim, Outcome.EXPIRE, error="ttl"),
        ]
    )
    await cancel(backend, q, d.id)  # the job blocked on it fails with it
    await backend.enqueue([new_job(q, "also-blocked", depends_on=("blocked", d.id))])
    counts = await backend.counts(q)
    assert counts == {
        JobState.BLOCKED: 0,
        JobState.WAITING: 2,
        JobState.DELAYED: 1,
        JobState.ACTIVE: 0,
        JobState.COMPLETED: 1,
        JobState.FAILED: 3,
        JobState.EXPIRED: 1,
        JobState.CANCELLED: 1,
    }
    await backend.enqueue(
        [
            new_job(q, "waits", depends_on=(new.id,))
            for new in (await backend.claim([q], "w", 1)).jobs
        ]
    )
    assert (await backend.counts(q))[JobState.BLOCKED] == 1
    assert await backend.counts(q + "-empty") == {s: 0 for s in JobState}


async def test_list_jobs_pages_in_claim_order(backend: Backend, q: str) -> None:
    ids = [f"j{i:02}" for i in range(12)]
    await backend.enqueue([new_job(q, i, priority=1 if i == "j11" else 5) for i in ids])
    page1 = await backend.list_jobs(q, JobState.WAITING, offset=0, limit=5)
    page2 = await backend.list_jobs(q, JobState.WAITING, offset=5, limit=5)
    page3 = await backend.list_jobs(q, JobState.WAITING, offset=10, limit=5)
    listed = [j.id for j in page1 + page2 + page3]
    assert listed == ["j11", *ids[:11]]
    assert await backend.list_jobs(q, JobState.COMPLETED) == []


async def test_list_delayed_by_run_time(backend: Backend, q: str) -> None:
    await backend.enqueue([new_job(q, "late", delay=50), new_job(q, "soon", delay=5)])
    assert [j.id for j in await backend.list_jobs(q, JobState.DELAYED)] == ["soon", "late"]


async def test_manual_retry_out_of_the_dlq(backend: Backend, q: str) -> None:
    await backend.enqueue([new_job(q, "dead", max_attempts=1)])
    [job] = (await backend.claim([q], "w", 1)).jobs
    await backend.settle([Settle(job.claim, Outcome.FAIL, error="boom")])
    assert await retry_job(backend, q, "dead")
    stored = await get_job(backend, q, "dead")
    assert stored is not None and stored.state is JobState.WAITING and stored.attempts == 0
    [again] = (await backend.claim([q], "w", 1)).jobs
    assert again.token == job.token + 1  # a new claim, a new token
    assert await backend.settle([Settle(job.claim, Outcome.COMPLETE, result=b"x")]) == [False]
    counts = await backend.counts(q)
    assert (counts[JobState.FAILED], counts[JobState.ACTIVE]) == (0, 1)


async def test_manual_retry_refuses_live_and_completed_jobs(backend: Backend, q: str) -> None:
    await backend.enqueue([new_job(q, "first"), new_job(q, "second")])
    [first] = (await backend.claim([q], "x", 1)).jobs
    assert not await retry_job(backend, q, first.id)  # active
    await backend.settle([Settle(first.claim, Outcome.COMPLETE, result=b"1")])
    assert not await retry_job(backend, q, first.id)  # completed
    assert not await retry_job(backend, q, "second")  # waiting
    assert not await retry_job(backend, q, "missing")


async def test_remove_drain_clean_obliterate(backend: Backend, q: str, clock: FakeClock) -> None:
    await backend.enqueue([new_job(q, f"w{i}") for i in range(3)] + [new_job(q, "d", delay=9)])
    await backend.enqueue([new_job(q, "done")])
    assert await remove_job(backend, q, "w0")
    assert not await remove_job(backend, q, "w0")
    jobs = (await backend.claim([q], "w", 10)).jobs
    done = next(j for j in jobs if j.id == "done")
    for j in jobs:
        if j.id != "done":
            await backend.settle([Settle(j.claim, Outcome.RELEASE)])
    await backend.settle([Settle(done.claim, Outcome.COMPLETE, result=b"1")])
    assert await backend.drain(q) == 3  # w1, w2 and the delayed one
    clock.advance(100)
    assert await backend.clean(q, JobState.COMPLETED, older_than=200) == 0
    assert await backend.clean(q, JobState.COMPLETED, older_than=50) == 1
    assert await get_job(backend, q, "done") is None
    await backend.enqueue([new_job(q, "again")])
    await backend.pause(q)
    await backend.obliterate(q)
    assert await backend.counts(q) == {s: 0 for s in JobState}
    assert not await backend.is_paused(q)
    assert q not in await backend.list_queues()


async def test_a_paused_queue_keeps_its_due_jobs_delayed(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    """A claim on a paused queue hands out nothing and moves nothing: a due delayed job is
    still delayed (RabbitMQ promoted it to waiting; found by the state-machine test)."""
    await backend.enqueue([new_job(q, "later", delay=10)])
    await backend.pause(q)
    clock.advance(15)
    assert (await backend.claim([q], "w", 5)).jobs == []
    job = await get_job(backend, q, "later")
    assert job is not None and job.state is JobState.DELAYED
    await backend.resume(q)
    claimed: list[str] = []
    async with asyncio.timeout(10):  # a broker delivers what the store promoted
        while not claimed:
            claimed = [j.id for j in (await backend.claim([q], "w", 5)).jobs]
            await asyncio.sleep(0.01 if not claimed else 0)
    assert claimed == ["later"]


async def test_list_queues(backend: Backend, q: str) -> None:
    await backend.enqueue([new_job(q + "-a"), new_job(q + "-b")])
    await backend.pause(q + "-c")
    names = await backend.list_queues()
    assert {q + "-a", q + "-b", q + "-c"} <= set(names)
    assert names == sorted(names)


async def test_worker_registry(backend: Backend, clock: FakeClock, q: str) -> None:
    info = WorkerInfo(f"wk-{q}", (q,), 4, "host", 123, clock())
    await registry.register(backend, info, ttl=30)
    listed = {w.id: w for w in await registry.list_workers(backend)}
    assert listed[info.id].queues == (q,) and listed[info.id].concurrency == 4
    clock.advance(31)
    assert info.id not in {w.id for w in await registry.list_workers(backend)}
    await registry.register(backend, info, ttl=30)
    await registry.unregister(backend, info.id)
    assert info.id not in {w.id for w in await registry.list_workers(backend)}


async def test_events_reach_every_subscriber(make_backend: MakeBackend) -> None:
    publisher, listener = await make_backend(), await make_backend()
    sub = await listener.subscribe()
    try:
        await publisher.publish([b'{"n":1}', b'{"n":2}'])
        got = [await asyncio.wait_for(anext(sub), 10) for _ in range(2)]
        assert got == [b'{"n":1}', b'{"n":2}']
    finally:
        await sub.aclose()


async def test_migrate_is_idempotent_and_matches_the_capability(backend: Backend) -> None:
    applied = await backend.migrate()  # the case's backend is connected: storage is ready
    assert applied == [] and await backend.migrate() == []
    if not backend.capabilities.migrations:
        assert type(backend).migrate is Backend.migrate


@pytest.mark.parametrize("ending", [JobState.EXPIRED, JobState.CANCELLED])
async def test_manual_retry_replays_expired_and_cancelled_jobs_at_the_back(
    backend: Backend, q: str, ending: JobState
) -> None:
    await backend.enqueue([new_job(q, "ended"), new_job(q, "next")])
    if ending is JobState.EXPIRED:
        [job] = (await backend.claim([q], "w", 1)).jobs
        assert job.id == "ended"
        assert await backend.settle([Settle(job.claim, Outcome.EXPIRE, error="ttl")]) == [True]
    else:
        assert await cancel(backend, q, "ended") is CancelResult.CANCELLED
    assert (await get_job(backend, q, "ended")).state is ending  # type: ignore[union-attr]
    assert await retry_job(backend, q, "ended")
    stored = await get_job(backend, q, "ended")
    assert stored is not None and stored.state is JobState.WAITING and stored.attempts == 0
    # a replay goes through the FIFO allocator: behind the job that was waiting all along
    assert [j.id for j in (await backend.claim([q], "w", 10)).jobs] == ["next", "ended"]


async def test_a_replayed_job_gets_a_fresh_ttl_window(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    await backend.enqueue([new_job(q, "stale", ttl=10)])
    created = (await get_job(backend, q, "stale")).created_at  # type: ignore[union-attr]
    replayed_at = clock.advance(60)
    [job] = (await backend.claim([q], "w", 1)).jobs
    assert job.expired_at(replayed_at)
    assert await backend.settle([Settle(job.claim, Outcome.EXPIRE, error="ttl")]) == [True]
    assert await retry_job(backend, q, "stale")
    [again] = (await backend.claim([q], "w", 1)).jobs
    # the TTL counts from the replay, not from the first creation: it runs, not expire again
    assert again.created_at == pytest.approx(replayed_at, abs=0.01) and created < replayed_at
    assert not again.expired_at(replayed_at + 9)
    assert again.expired_at(replayed_at + 10)


async def test_a_read_only_handle_opens_existing_storage(
    case: BackendCase, make_backend: MakeBackend, tmp_path: Path, q: str
) -> None:
    if case.url is None:
        pytest.skip(f"{case.name} has no URL other handles could open")
    writer = await make_backend()
    await writer.enqueue([new_job(q, "a")])
    reader = from_url(case.url(tmp_path))
    reader.create_missing = False  # what read-only tools set: never create, only open
    await reader.connect()
    try:
        assert (await reader.counts(q))[JobState.WAITING] == 1
    finally:
        await reader.close()
