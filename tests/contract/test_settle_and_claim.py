"""``settle_and_claim`` on every backend: a worker's settle and its next claim in one call
(one round trip where ``capabilities.settle_claims`` says so), each with the meaning it has
alone: the settle fenced, then the claim, which sees what the settle changed."""

from __future__ import annotations

import dataclasses

from relaymq.backends.base import Backend
from relaymq.job import Job, JobState
from relaymq.records.limits import Limits
from relaymq.records.store import Outcome, Settle
from tests.contract.test_keys import claim_exactly, state
from tests.support.jobs import get_job, new_job


async def the_rest(backend: Backend, q: str, got: list[Job], n: int) -> list[Job]:
    """``got``, and what a broker still hands out up to ``n`` jobs (a backend that claims in
    the same round trip has taken them all already)."""
    if backend.capabilities.settle_claims:
        return got
    return got + await claim_exactly(backend, q, n - len(got))


async def test_a_settle_claims_the_next_jobs_in_the_same_call(backend: Backend, q: str) -> None:
    await backend.enqueue([new_job(q, f"j{i}") for i in range(4)])
    [first] = await claim_exactly(backend, q, 1)
    answer = await backend.settle_and_claim(
        [Settle(first.claim, Outcome.COMPLETE, result=b"1")], [q], "w2", 2
    )
    assert answer.applied == [True] and answer.claim_error is None
    assert answer.batch is not None and len(answer.batch.jobs) <= 2
    got = await the_rest(backend, q, answer.batch.jobs, 2)
    assert sorted(j.id for j in got) == ["j1", "j2"]  # FIFO, and no more than the limit
    assert await state(backend, q, first.id) is JobState.COMPLETED
    for j in got:
        stored = await get_job(backend, q, j.id)
        assert stored is not None and stored.state is JobState.ACTIVE
        assert stored.worker_id == "w2" and stored.token == j.claim.token
    assert await state(backend, q, "j3") is JobState.WAITING


async def test_without_a_limit_it_only_settles(backend: Backend, q: str) -> None:
    await backend.enqueue([new_job(q, f"j{i}") for i in range(2)])
    [first] = await claim_exactly(backend, q, 1)
    answer = await backend.settle_and_claim(
        [Settle(first.claim, Outcome.FAIL, error="boom")], [q], "w", 0
    )
    assert answer.applied == [True] and answer.batch is None
    assert await state(backend, q, first.id) is JobState.FAILED
    assert await state(backend, q, "j1") is JobState.WAITING


async def test_a_lost_claim_is_refused_and_the_claim_still_runs(backend: Backend, q: str) -> None:
    await backend.enqueue([new_job(q, f"j{i}") for i in range(2)])
    [first] = await claim_exactly(backend, q, 1)
    old = Settle(dataclasses.replace(first.claim, token=first.claim.token - 1), Outcome.COMPLETE)
    answer = await backend.settle_and_claim([old], [q], "w", 5)
    assert answer.applied == [False]
    assert await state(backend, q, first.id) is JobState.ACTIVE  # the stale write changed nothing
    assert answer.batch is not None
    got = await the_rest(backend, q, answer.batch.jobs, 1)
    assert [j.id for j in got] == ["j1"]


async def test_the_claim_takes_the_slot_its_settle_freed(backend: Backend, q: str) -> None:
    """Under ``max_active``, the claim runs after the settle: the slot the settle frees is
    taken in the same call."""
    await backend.set_limits(q, Limits(max_active=1))
    await backend.enqueue([new_job(q, f"j{i}") for i in range(3)])
    [first] = await claim_exactly(backend, q, 1)
    answer = await backend.settle_and_claim([Settle(first.claim, Outcome.COMPLETE)], [q], "w", 5)
    assert answer.applied == [True] and answer.batch is not None
    got = await the_rest(backend, q, answer.batch.jobs, 1)
    assert [j.id for j in got] == ["j1"]
    assert await state(backend, q, "j2") is JobState.WAITING
