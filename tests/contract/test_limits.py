"""Queue limits on every backend: a cap on a queue's active jobs and a rate of starts per
window, decided by the claim itself, so they hold over every process's claims together."""

from __future__ import annotations

import asyncio

import pytest

from relaymq.backends.base import Backend
from relaymq.job import Job, JobState
from relaymq.records.limits import Limits
from relaymq.records.store import ClaimBatch, Outcome, Settle
from relaymq.testing import FakeClock
from tests.conftest import MakeBackend
from tests.contract.test_keys import claim_exactly
from tests.support.jobs import new_job


async def claim_until_limited(backend: Backend, q: str, want: int = 10) -> list[Job]:
    """Claim from ``q`` until a claim reports it limited; every job claimed on the way.
    (A broker hands out what the store made eligible over a few calls.)"""
    got: list[Job] = []
    async with asyncio.timeout(10):  # the broker delivering what the store made eligible
        while True:
            batch = await backend.claim([q], "w", want)
            got += batch.jobs
            if q in batch.limited:
                return got


async def claim_from_all(handles: list[Backend], q: str, limit: int) -> list[Job]:
    """One round of claims, two per handle, all at once: what they took together."""
    batches: list[ClaimBatch] = await asyncio.gather(
        *(h.claim([q], f"w{n}", limit) for n in range(2) for h in handles)
    )
    return [j for b in batches for j in b.jobs]


async def active(backend: Backend, q: str) -> int:
    return (await backend.counts(q))[JobState.ACTIVE]


async def test_limits_are_stored_listed_and_removed(backend: Backend, q: str) -> None:
    other = q + "-b"
    await backend.set_limits(q, Limits(max_active=3, rate=100, per=60, key_rate=7, key_per=2.5))
    await backend.set_limits(other, Limits(rate=5, per=0.5))
    stored = await backend.list_limits()
    assert stored[q] == Limits(max_active=3, rate=100, per=60, key_rate=7, key_per=2.5)
    assert stored[other] == Limits(rate=5, per=0.5)
    await backend.set_limits(q, Limits(max_active=1))  # replaces, does not merge
    assert (await backend.list_limits())[q] == Limits(max_active=1)
    await backend.set_limits(q, None)
    await backend.set_limits(other, Limits())  # empty limits remove them too
    stored = await backend.list_limits()
    assert q not in stored and other not in stored


async def test_max_active_caps_the_active_jobs_of_the_queue(backend: Backend, q: str) -> None:
    await backend.set_limits(q, Limits(max_active=2))
    await backend.enqueue([new_job(q, f"j{i}") for i in range(5)])
    first = await claim_until_limited(backend, q)
    assert [j.id for j in first] == ["j0", "j1"]
    batch = await backend.claim([q], "w", 10)
    assert batch.jobs == [] and batch.limited == {q: None}  # waits for a job to end
    await backend.settle([Settle(first[0].claim, Outcome.COMPLETE, result=b"1")])
    assert len(await claim_until_limited(backend, q)) == 1
    assert await active(backend, q) == 2
    # A retried job leaves active too; a stalled one counts until it is recovered.
    await backend.settle([Settle(first[1].claim, Outcome.RETRY, error="x", delay=0)])
    assert len(await claim_until_limited(backend, q)) == 1
    assert await active(backend, q) == 2


async def test_a_queue_with_room_is_not_reported_limited(backend: Backend, q: str) -> None:
    await backend.set_limits(q, Limits(max_active=5, rate=50, per=60))
    await backend.enqueue([new_job(q, "a"), new_job(q, "b")])
    got: list[Job] = []
    async with asyncio.timeout(10):
        while len(got) < 2:
            batch = await backend.claim([q], "w", 10)
            assert q not in batch.limited  # fewer jobs than the limits allow
            got += batch.jobs


async def test_rate_counts_starts_per_window(backend: Backend, clock: FakeClock, q: str) -> None:
    assert clock.now % 10 == 0  # a window starts now
    await backend.set_limits(q, Limits(rate=3, per=10))
    await backend.enqueue([new_job(q, f"j{i}") for i in range(8)])
    clock.advance(4)
    first = await claim_until_limited(backend, q)
    assert [j.id for j in first] == ["j0", "j1", "j2"]
    # Ending them gives nothing back: the rate counts starts.
    await backend.settle([Settle(j.claim, Outcome.COMPLETE, result=b"1") for j in first])
    batch = await backend.claim([q], "w", 10)
    assert batch.jobs == []
    assert batch.limited[q] == pytest.approx(6.0)  # the window ends in 6 s
    clock.advance(6)  # the next window
    second = await claim_until_limited(backend, q)
    assert len(second) == 3
    clock.advance(25)  # windows without claims bank no starts: two wait, both start
    last = await claim_exactly(backend, q, 2)
    # (A broker may hand held-back jobs out of order: the order is not what is tested here.)
    assert sorted(j.id for j in first + second + last) == [f"j{i}" for i in range(8)]


async def test_limits_hold_back_only_their_own_queue(backend: Backend, q: str) -> None:
    free = q + "-free"
    await backend.set_limits(q, Limits(max_active=1))
    await backend.enqueue(
        [new_job(q, "l1"), new_job(q, "l2"), new_job(free, "f1"), new_job(free, "f2")]
    )
    got: list[Job] = []
    limited: dict[str, float | None] = {}
    async with asyncio.timeout(10):
        while len(got) < 3:
            batch = await backend.claim([q, free], "w", 10)
            got += batch.jobs
            limited |= batch.limited
    assert sorted(j.id for j in got) == ["f1", "f2", "l1"]
    assert limited == {q: None}
    assert (await backend.claim([q, free], "w", 10)).jobs == []


async def test_removed_limits_stop_limiting(backend: Backend, q: str) -> None:
    await backend.set_limits(q, Limits(max_active=1))
    await backend.enqueue([new_job(q, f"j{i}") for i in range(3)])
    assert len(await claim_until_limited(backend, q)) == 1
    await backend.set_limits(q, None)
    got: list[Job] = []
    async with asyncio.timeout(10):
        while len(got) < 2:
            batch = await backend.claim([q], "w", 10)
            assert batch.limited == {}
            got += batch.jobs


async def test_obliterate_forgets_the_limits(backend: Backend, q: str) -> None:
    await backend.set_limits(q, Limits(max_active=1))
    await backend.enqueue([new_job(q, "a")])
    await backend.obliterate(q)
    assert q not in await backend.list_limits()


async def test_limits_hold_over_concurrent_claims_of_many_processes(
    make_backend: MakeBackend, q: str
) -> None:
    handles = [await make_backend() for _ in range(3)]
    await handles[0].set_limits(q, Limits(max_active=4))
    await handles[0].enqueue([new_job(q, f"j{i}") for i in range(20)])
    taken: list[Job] = []
    async with asyncio.timeout(10):
        while len(taken) < 4:
            taken += await claim_from_all(handles, q, 3)
            assert len(taken) <= 4
            assert await active(handles[0], q) <= 4
    assert len({j.id for j in taken}) == 4


async def test_rate_holds_over_concurrent_claims_of_many_processes(
    make_backend: MakeBackend, q: str
) -> None:
    handles = [await make_backend() for _ in range(3)]
    await handles[0].set_limits(q, Limits(rate=5, per=3600))
    await handles[0].enqueue([new_job(q, f"j{i}") for i in range(20)])
    taken: list[Job] = []
    async with asyncio.timeout(10):
        while len(taken) < 5:
            taken += await claim_from_all(handles, q, 3)
            assert len(taken) <= 5
    # Work ending frees no start within the window.
    await handles[0].settle([Settle(j.claim, Outcome.COMPLETE, result=b"1") for j in taken])
    assert (await handles[1].claim([q], "w", 10)).jobs == []


async def test_a_key_rate_counts_starts_per_key_per_window(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    assert clock.now % 10 == 0  # a key window starts now
    await backend.set_limits(q, Limits(key_rate=2, key_per=10))
    keys = {"a1": "a.x", "a2": "a.x", "a3": "a.x", "b1": "$b", "n1": None, "a4": "a.x"}
    await backend.enqueue([new_job(q, i, limit_key=k) for i, k in keys.items()])
    clock.advance(3)
    first = await claim_until_limited(backend, q)
    assert sorted(j.id for j in first) == ["a1", "a2", "b1", "n1"]  # past a3, to b1 and n1
    assert {j.limit_key for j in first} == {"a.x", "$b", None}
    batch = await backend.claim([q], "w", 10)
    assert batch.jobs == [] and batch.limited[q] == pytest.approx(7.0)
    await backend.settle([Settle(j.claim, Outcome.COMPLETE, result=b"1") for j in first])
    assert (await backend.claim([q], "w", 10)).jobs == []  # ending gives nothing back
    clock.advance(7)
    assert sorted(j.id for j in await claim_exactly(backend, q, 2)) == ["a3", "a4"]


async def test_a_key_rate_holds_over_concurrent_claims_of_many_processes(
    make_backend: MakeBackend, q: str
) -> None:
    handles = [await make_backend() for _ in range(3)]
    await handles[0].set_limits(q, Limits(key_rate=3, key_per=3600))
    await handles[0].enqueue(
        [new_job(q, f"k{i}", limit_key="k") for i in range(12)]
        + [new_job(q, f"m{i}", limit_key="m") for i in range(4)]
    )
    taken: list[Job] = []
    async with asyncio.timeout(10):
        while len(taken) < 6:
            taken += await claim_from_all(handles, q, 2)
            by_key = [j.limit_key for j in taken]
            assert by_key.count("k") <= 3 and by_key.count("m") <= 3
    assert len({j.id for j in taken}) == 6
