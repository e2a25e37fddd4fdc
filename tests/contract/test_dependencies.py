"""Jobs that wait for other jobs, on every backend: a job with ``depends_on`` is stored
``blocked`` and becomes due once every dependency has ended, in the same atomic step as the
last one's end; a dependency that does not complete fails its dependents under the FAIL policy,
down the chain, and counts as ended under IGNORE and INCLUDE."""

from __future__ import annotations

import asyncio

import pytest

from relaymq.backends.base import Backend
from relaymq.job import DependencyPolicy, Job, JobState
from relaymq.records.store import Outcome, Settle
from relaymq.testing import FakeClock
from tests.conftest import MakeBackend
from tests.contract.test_keys import claim_exactly, state
from tests.support.cases import BackendCase
from tests.support.jobs import cancel, get_job, new_job, remove_job

IGNORE, INCLUDE = DependencyPolicy.IGNORE, DependencyPolicy.INCLUDE


def after(
    q: str,
    job_id: str,
    *deps: str,
    policy: DependencyPolicy = DependencyPolicy.FAIL,
    **options: object,
) -> object:
    return new_job(q, job_id, depends_on=deps, on_dependency_failure=policy, **options)


async def done(backend: Backend, job: Job, outcome: Outcome = Outcome.COMPLETE) -> None:
    result = b"1" if outcome is Outcome.COMPLETE else None
    assert await backend.settle([Settle(job.claim, outcome, result=result, error="x")]) == [True]


async def released(backend: Backend, clock: FakeClock, q: str, n: int) -> list[Job]:
    """Claim the ``n`` jobs just released. They are due at once; a broker learns of due jobs
    when its store's promotion runs (every ``promote_interval``), so the clock moves on."""
    clock.advance(1)
    return await claim_exactly(backend, q, n)


async def nothing_to_claim(backend: Backend, q: str) -> None:
    assert (await backend.claim([q], "w", 10)).jobs == []


async def test_a_job_is_blocked_until_its_dependencies_complete(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    await backend.enqueue([new_job(q, "a"), new_job(q, "b")])
    await backend.enqueue([after(q, "c", "a", "b")])  # type: ignore[list-item]
    c = await get_job(backend, q, "c")
    assert c is not None and c.state is JobState.BLOCKED and c.depends_on == ("a", "b")
    assert (await backend.counts(q))[JobState.BLOCKED] == 1
    assert [j.id for j in await backend.list_jobs(q, JobState.BLOCKED)] == ["c"]
    a, b = sorted(await claim_exactly(backend, q, 2), key=lambda j: j.id)
    await nothing_to_claim(backend, q)  # c is not claimable
    await done(backend, a)
    assert await state(backend, q, "c") is JobState.BLOCKED
    await done(backend, b)  # the last one: c is due at once
    [c] = await released(backend, clock, q, 1)
    assert c.id == "c" and c.depends_on == ("a", "b")


async def test_a_chain_in_one_batch_runs_in_order(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    await backend.enqueue([new_job(q, "a"), after(q, "b", "a"), after(q, "c", "b")])  # type: ignore[list-item]
    for expected in "abc":
        [job] = await released(backend, clock, q, 1)
        assert job.id == expected
        await nothing_to_claim(backend, q)
        await done(backend, job)
    assert [await state(backend, q, i) for i in "abc"] == [JobState.COMPLETED] * 3


async def test_a_dependency_that_fails_fails_its_dependents_down_the_chain(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    await backend.enqueue(
        [
            new_job(q, "a"),
            after(q, "b", "a"),
            after(q, "c", "b"),  # FAIL, the default
            after(q, "d", "a", policy=IGNORE),
            after(q, "e", "c", policy=INCLUDE),
        ]
    )  # type: ignore[list-item]
    [a] = await claim_exactly(backend, q, 1)
    await done(backend, a, Outcome.FAIL)
    for job_id, dep in (("b", "a"), ("c", "b")):
        job = await get_job(backend, q, job_id)
        assert job is not None and job.state is JobState.FAILED
        assert job.error == f"dependency {dep} ended failed"
    # d ignores the failure, e waited for c (failed in the chain): both are due now.
    assert sorted(j.id for j in await released(backend, clock, q, 2)) == ["d", "e"]


async def test_cancelling_or_removing_a_dependency_counts_as_its_end(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    await backend.enqueue(
        [
            new_job(q, "a"),
            new_job(q, "b"),
            new_job(q, "c"),
            after(q, "x", "a"),
            after(q, "y", "b", "c", policy=INCLUDE),
        ]
    )  # type: ignore[list-item]
    assert await remove_job(backend, q, "a")
    x = await get_job(backend, q, "x")
    assert x is not None and (x.state, x.error) == (JobState.FAILED, "dependency a ended removed")
    await cancel(backend, q, "b")
    assert await state(backend, q, "y") is JobState.BLOCKED  # c has not ended
    await cancel(backend, q, "c")
    [y] = await released(backend, clock, q, 1)
    assert y.id == "y"
    # Cancelling a blocked job ends it like any other: its own dependents learn it.
    await backend.enqueue([new_job(q, "p"), after(q, "q1", "p"), after(q, "q2", "q1")])  # type: ignore[list-item]
    await cancel(backend, q, "q1")
    assert await state(backend, q, "q2") is JobState.FAILED


async def test_dependencies_that_ended_before_the_enqueue(backend: Backend, q: str) -> None:
    await backend.enqueue([new_job(q, "ok"), new_job(q, "bad")])
    claimed = {j.id: j for j in await claim_exactly(backend, q, 2)}
    await done(backend, claimed["ok"])
    await done(backend, claimed["bad"], Outcome.FAIL)
    await backend.enqueue(
        [
            after(q, "j1", "ok"),
            after(q, "j2", "ok", "bad"),
            after(q, "j3", "bad", policy=IGNORE),
            after(q, "j4", "gone", policy=INCLUDE),
            after(q, "j5", "gone"),
        ]
    )  # type: ignore[list-item]
    j2 = await get_job(backend, q, "j2")
    assert j2 is not None and j2.state is JobState.FAILED
    assert j2.error == "dependency bad ended failed"
    assert await state(backend, q, "j5") is JobState.FAILED
    assert sorted(j.id for j in await claim_exactly(backend, q, 3)) == ["j1", "j3", "j4"]


async def test_a_stalled_dependency_is_recovered_and_still_releases(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    await backend.enqueue(
        [new_job(q, "a"), after(q, "b", "a"), new_job(q, "s"), after(q, "t", "s")]
    )  # type: ignore[list-item]
    await claim_exactly(backend, q, 2)
    clock.advance(60)
    found = await backend.recover_stalled(q, 30, max_stalled=1)  # both run again
    assert sorted(found.requeued) == ["a", "s"]
    again = {j.id: j for j in await claim_exactly(backend, q, 2)}
    await done(backend, again["a"])
    [b] = await released(backend, clock, q, 1)
    assert b.id == "b"
    clock.advance(60)
    found = await backend.recover_stalled(q, 30, max_stalled=1)  # "s" has stalled too often
    assert found.failed == ["s"]
    assert await state(backend, q, "t") is JobState.FAILED


async def test_drain_deletes_blocked_jobs_with_the_rest(backend: Backend, q: str) -> None:
    await backend.enqueue([new_job(q, "a"), after(q, "b", "a"), after(q, "c", "b")])  # type: ignore[list-item]
    assert await backend.drain(q) == 3
    assert sum((await backend.counts(q)).values()) == 0


async def test_a_repeated_dependent_is_a_duplicate_and_released_once(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    await backend.enqueue([new_job(q, "a")])
    await backend.enqueue([after(q, "b", "a")])  # type: ignore[list-item]
    answers = await backend.enqueue([after(q, "b", "a"), after(q, "c", "a", "a")])  # type: ignore[list-item]
    assert [(e.id, e.duplicate) for e in answers] == [("b", True), ("c", False)]
    [a] = await claim_exactly(backend, q, 1)
    await done(backend, a)
    assert sorted(j.id for j in await released(backend, clock, q, 2)) == ["b", "c"]
    await nothing_to_claim(backend, q)


async def test_the_last_two_dependencies_ending_at_once_release_the_job_once(
    make_backend: MakeBackend, clock: FakeClock, q: str
) -> None:
    one, two = await make_backend(clock), await make_backend(clock)
    await one.enqueue([new_job(q, f"d{i}") for i in range(6)])
    await one.enqueue([after(q, "z", *(f"d{i}" for i in range(6)))])  # type: ignore[list-item]
    deps = await claim_exactly(one, q, 6)
    await asyncio.gather(*(done(h, j) for h, j in zip([one, two] * 3, deps, strict=True)))
    clock.advance(1)
    got: list[Job] = []
    async with asyncio.timeout(10):  # a broker may push it to either handle's consumer
        while not got:
            for h in (one, two):
                got += (await h.claim([q], "w", 10)).jobs
    assert [j.id for j in got] == ["z"]
    await nothing_to_claim(one, q)
    await nothing_to_claim(two, q)


async def test_a_released_dependent_comes_after_a_job_its_settle_put_back(
    backend: Backend, case: BackendCase, q: str
) -> None:
    """One settle retries a job (no delay) and completes the dependency of a blocked one, with
    the backend's clock standing still: the retried job went back in line first, the released
    dependent became ready after it (docs/guarantees.md, Ordering)."""
    if case.name.startswith("rabbitmq"):
        pytest.skip("a broker hands out what it already holds first (guarantees: Ordering)")
    await backend.enqueue([new_job(q, "a"), new_job(q, "b")])
    await backend.enqueue([after(q, "c", "a")])  # type: ignore[list-item]
    a, b = sorted(await claim_exactly(backend, q, 2), key=lambda j: j.id)
    settles = [Settle(b.claim, Outcome.RETRY, error="again"), Settle(a.claim, Outcome.COMPLETE)]
    answer = await backend.settle_and_claim(settles, [q], "w", 1)
    assert answer.applied == [True, True] and answer.batch is not None
    assert [j.id for j in answer.batch.jobs] == ["b"]
    assert [j.id for j in (await backend.claim([q], "w", 1)).jobs] == ["c"]
