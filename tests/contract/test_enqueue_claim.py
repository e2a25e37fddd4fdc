"""Enqueue and claim: acceptance, delays, duplicates, ordering, exclusivity."""

from __future__ import annotations

import asyncio

import pytest

from relaymq.backends.base import Backend
from relaymq.errors import ConfigError
from relaymq.job import JobState
from relaymq.options import MAX_PRIORITY
from relaymq.records.store import Outcome, Settle
from relaymq.testing import FakeClock
from tests.conftest import MakeBackend
from tests.support.jobs import get_job, new_job


async def test_batch_enqueue_stores_every_job_waiting(backend: Backend, q: str) -> None:
    jobs = [new_job(q, payload=f'{{"n":{i}}}'.encode(), max_attempts=3) for i in range(5)]
    answers = await backend.enqueue(jobs)
    assert [a.id for a in answers] == [j.id for j in jobs]
    assert not any(a.duplicate for a in answers)
    counts = await backend.counts(q)
    assert counts[JobState.WAITING] == 5
    assert sum(counts.values()) == 5
    stored = await get_job(backend, q, jobs[2].id)
    assert stored is not None
    assert (stored.state, stored.payload, stored.max_attempts) == (
        JobState.WAITING,
        b'{"n":2}',
        3,
    )
    assert stored.token == 0 and stored.attempts == 0


async def test_get_job_of_unknown_id_is_none(backend: Backend, q: str) -> None:
    assert await get_job(backend, q, "nope") is None


async def test_delayed_job_is_invisible_until_due(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    [a] = await backend.enqueue([new_job(q, delay=30)])
    assert (await get_job(backend, q, a.id)).state is JobState.DELAYED  # type: ignore[union-attr]
    assert (await backend.claim([q], "w", 10)).jobs == []
    clock.advance(29)
    assert (await backend.claim([q], "w", 10)).jobs == []
    clock.advance(1.5)
    batch = await backend.claim([q], "w", 10)
    assert [j.id for j in batch.jobs] == [a.id]
    assert (await backend.counts(q))[JobState.DELAYED] == 0


async def test_promoted_delayed_job_queues_behind_earlier_waiting_ones(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    delayed, first, second = new_job(q, "delayed", delay=5), new_job(q, "first"), new_job(q, "2nd")
    await backend.enqueue([delayed, first, second])
    clock.advance(6)
    [taken] = (await backend.claim([q], "w", 1)).jobs  # falls due: promoted by now at the latest
    later = new_job(q, "later")
    await backend.enqueue([later])
    rest = (await backend.claim([q], "w", 10)).jobs
    # It entered the waiting line when it fell due, behind the jobs waiting then, ahead of the
    # job enqueued after that. (Exact order: a set would hide a backend that differs.)
    assert [taken.id] + [j.id for j in rest] == ["first", "2nd", "delayed", "later"]


async def test_delayed_jobs_due_at_the_same_moment_keep_their_fifo_order(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    # found by tests/contract/test_stateful.py: Redis promoted equal run times in id order
    await backend.enqueue([new_job(q, i, delay=5) for i in ("j9", "j10", "j8")])
    clock.advance(6)
    assert [j.id for j in (await backend.claim([q], "w", 3)).jobs] == ["j9", "j10", "j8"]


async def test_duplicate_job_id_creates_nothing(backend: Backend, q: str) -> None:
    original = new_job(q, "same-id", payload=b'{"v":1}')
    [first] = await backend.enqueue([original])
    assert not first.duplicate
    answers = await backend.enqueue(
        [new_job(q, "same-id", payload=b'{"v":2}'), new_job(q, "other")]
    )
    assert [(a.id, a.duplicate) for a in answers] == [("same-id", True), ("other", False)]
    stored = await get_job(backend, q, "same-id")
    assert stored is not None and stored.payload == b'{"v":1}'
    assert (await backend.counts(q))[JobState.WAITING] == 2


async def test_duplicate_within_one_batch(backend: Backend, q: str) -> None:
    answers = await backend.enqueue([new_job(q, "x"), new_job(q, "x")])
    assert [a.duplicate for a in answers] == [False, True]
    assert (await backend.counts(q))[JobState.WAITING] == 1


async def test_same_job_id_in_two_queues_is_two_jobs(backend: Backend, q: str) -> None:
    answers = await backend.enqueue([new_job(q, "x"), new_job(q + "-b", "x")])
    assert [a.duplicate for a in answers] == [False, False]


async def test_duplicate_of_finished_job_is_still_suppressed(backend: Backend, q: str) -> None:
    await backend.enqueue([new_job(q, "done-once")])
    [job] = (await backend.claim([q], "w", 1)).jobs
    assert await backend.settle([Settle(job.claim, Outcome.COMPLETE, result=b"1")]) == [True]
    [again] = await backend.enqueue([new_job(q, "done-once")])
    assert again.duplicate


async def test_claims_the_whole_priority_range_in_order_one_claim_at_a_time(
    backend: Backend, q: str
) -> None:
    # every priority the backend accepts (0 to 255, or RabbitMQ's max_priority), not only 0 to
    # 5; lowest and highest last in the batch, equal priorities apart
    top = backend.capabilities.max_priority
    mid, low = top * 2 // 5, min(7, top // 4)
    spec = [("top-a", top), ("mid-a", mid), ("low-a", low), ("p0-a", 0)]
    spec += [("mid-b", mid), ("top-b", top), ("low-b", low), ("p0-b", 0)]
    await backend.enqueue([new_job(q, job_id, priority=p) for job_id, p in spec])
    order: list[str] = []
    while batch := (await backend.claim([q], "w", 1)).jobs:
        order += [j.id for j in batch]
    assert order == ["p0-a", "p0-b", "low-a", "low-b", "mid-a", "mid-b", "top-a", "top-b"]


async def test_a_priority_past_the_backends_range_is_refused_and_nothing_is_stored(
    backend: Backend, q: str
) -> None:
    top = backend.capabilities.max_priority
    if top >= MAX_PRIORITY:
        pytest.skip("the backend accepts every priority a job can have")
    with pytest.raises(ConfigError, match=f"max_priority={top}"):
        await backend.enqueue([new_job(q, "ok", priority=top), new_job(q, "no", priority=top + 1)])
    assert await get_job(backend, q, "ok") is None and await get_job(backend, q, "no") is None


async def test_claim_marks_job_active_with_new_token(backend: Backend, q: str) -> None:
    [a] = await backend.enqueue([new_job(q)])
    batch = await backend.claim([q], "worker-7", 5)
    [job] = batch.jobs
    assert job.id == a.id and job.state is JobState.ACTIVE
    assert job.token == 1 and job.attempts == 1
    assert job.worker_id == "worker-7"
    assert job.claimed_at is not None and abs(job.claimed_at - batch.now) < 1
    stored = await get_job(backend, q, a.id)
    assert stored is not None and stored.state is JobState.ACTIVE and stored.token == 1
    counts = await backend.counts(q)
    assert (counts[JobState.WAITING], counts[JobState.ACTIVE]) == (0, 1)


async def test_claim_respects_limit_and_visits_queues_in_order(backend: Backend, q: str) -> None:
    other = q + "-other"
    await backend.enqueue([new_job(q) for _ in range(3)] + [new_job(other) for _ in range(3)])
    batch = await backend.claim([other, q], "w", 4)
    assert [j.queue for j in batch.jobs] == [other, other, other, q]


async def test_claim_from_empty_or_unknown_queue(backend: Backend, q: str) -> None:
    assert (await backend.claim([q], "w", 10)).jobs == []


async def test_concurrent_claimers_never_share_a_job(
    make_backend: MakeBackend, clock: FakeClock, q: str
) -> None:
    clients = [await make_backend(clock) for _ in range(4)]
    await clients[0].enqueue([new_job(q) for _ in range(60)])

    async def drain(b: Backend) -> list[str]:
        got: list[str] = []
        while batch := (await b.claim([q], "w", 3)).jobs:
            got += [j.id for j in batch]
        return got

    results = await asyncio.gather(*(drain(clients[i % 4]) for i in range(8)))
    claimed = [job_id for r in results for job_id in r]
    assert len(claimed) == 60
    assert len(set(claimed)) == 60


async def test_paused_queue_is_skipped_until_resumed(backend: Backend, q: str) -> None:
    await backend.enqueue([new_job(q)])
    await backend.pause(q)
    assert await backend.is_paused(q)
    assert (await backend.claim([q], "w", 10)).jobs == []
    await backend.resume(q)
    assert not await backend.is_paused(q)
    assert len((await backend.claim([q], "w", 10)).jobs) == 1


async def test_pausing_one_queue_leaves_others_claimable(backend: Backend, q: str) -> None:
    other = q + "-b"
    await backend.enqueue([new_job(q), new_job(other)])
    await backend.pause(q)
    batch = await backend.claim([q, other], "w", 10)
    assert [j.queue for j in batch.jobs] == [other]


async def test_wait_returns_after_timeout_when_idle(backend: Backend, q: str) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(5):  # the wait ending by its own 0.3 s timeout
        await backend.wait([q], 0.3)
    assert loop.time() - started >= 0.25  # it blocked: an idle wait is not a busy poll


async def test_wait_wakes_on_enqueue(make_backend: MakeBackend, q: str) -> None:
    waiter = await make_backend()
    producer = await make_backend()
    task = asyncio.create_task(waiter.wait([q], 30))
    done, _ = await asyncio.wait({task}, timeout=0.3)
    assert not done, "wait returned with nothing enqueued"  # it blocks while idle
    await producer.enqueue([new_job(q)])
    async with asyncio.timeout(5):  # far below the 30 s timeout: woken, not timed out
        await task


async def test_wait_returns_at_once_when_work_is_already_there(backend: Backend, q: str) -> None:
    await backend.enqueue([new_job(q)])
    await asyncio.wait_for(backend.wait([q], 30), 5)
