"""Every backend keeps a job's last attempts with it (``Job.attempt_history``), written by the
settle's own atomic step: in order, each with its number, worker, times, run time and error,
capped at ``Settle.keep`` of them."""

from __future__ import annotations

import dataclasses

from relaymq.backends.base import Backend
from relaymq.job import Attempt, JobState, Outcome
from relaymq.records.store import Settle
from relaymq.testing import FakeClock
from tests.contract.test_keys import claim_exactly
from tests.support.jobs import get_job, new_job, retry_job


async def run_attempts(
    backend: Backend, clock: FakeClock, q: str, outcomes: list[Outcome], keep: int = 20
) -> list[tuple[float, float]]:
    """Claim ``q``'s job once per outcome and settle it so (1.5 s after the claim, the handler
    having run 1.25 s); the (claimed, settled) times of each."""
    times = []
    for n, outcome in enumerate(outcomes, 1):
        [job] = await claim_exactly(backend, q, 1)
        claimed = clock()
        clock.advance(1.5)
        failed = outcome not in (Outcome.COMPLETE, Outcome.RELEASE)
        error = f"ValueError: attempt {n} failed" if failed else None
        settle = Settle(job.claim, outcome, result=b"1", error=error, ran_for=1.25, keep=keep)
        assert await backend.settle([settle]) == [True]
        times.append((claimed, clock()))
        clock.advance(10)
    return times


async def test_three_failed_attempts_and_a_success_are_four_entries_in_order(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    await backend.enqueue([new_job(q, "j", max_attempts=4)])
    outcomes = [Outcome.RETRY] * 3 + [Outcome.COMPLETE]
    times = await run_attempts(backend, clock, q, outcomes)
    job = await get_job(backend, q, "j")
    assert job is not None and job.state is JobState.COMPLETED
    errors = [f"ValueError: attempt {n} failed" for n in (1, 2, 3)] + [None]
    assert job.attempt_history == tuple(
        Attempt(n, outcome, claimed, settled, "w", 1.25, error)
        for n, (outcome, (claimed, settled), error) in enumerate(
            zip(outcomes, times, errors, strict=True), 1
        )
    )
    [listed] = await backend.list_jobs(q, JobState.COMPLETED)
    assert listed.attempt_history == job.attempt_history


async def test_the_history_keeps_the_last_attempts_only(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    await backend.enqueue([new_job(q, "j", max_attempts=5)])
    await run_attempts(backend, clock, q, [Outcome.RETRY] * 4 + [Outcome.FAIL], keep=3)
    job = await get_job(backend, q, "j")
    assert job is not None and job.state is JobState.FAILED
    assert [(a.attempt, a.outcome) for a in job.attempt_history] == [
        (3, Outcome.RETRY),
        (4, Outcome.RETRY),
        (5, Outcome.FAIL),
    ]
    assert job.attempt_history[-1].error == "ValueError: attempt 5 failed"


async def test_keep_0_records_nothing_and_a_lost_claim_adds_nothing(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    await backend.enqueue([new_job(q, "j", max_attempts=3)])
    await run_attempts(backend, clock, q, [Outcome.RETRY], keep=0)
    job = await get_job(backend, q, "j")
    assert job is not None and job.attempt_history == ()
    [held] = await claim_exactly(backend, q, 1)
    stale = dataclasses.replace(held.claim, token=held.claim.token - 1)
    assert await backend.settle([Settle(stale, Outcome.FAIL, error="late")]) == [False]
    job = await get_job(backend, q, "j")
    assert job is not None and job.attempt_history == ()


async def test_a_release_is_recorded_and_a_replay_keeps_the_history(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    await backend.enqueue([new_job(q, "j", max_attempts=1)])
    await run_attempts(backend, clock, q, [Outcome.RELEASE, Outcome.FAIL])
    assert await retry_job(backend, q, "j")  # the operator's replay counts from 1 again
    await run_attempts(backend, clock, q, [Outcome.COMPLETE])
    job = await get_job(backend, q, "j")
    assert job is not None
    assert [(a.attempt, a.outcome, a.error is None) for a in job.attempt_history] == [
        (1, Outcome.RELEASE, True),
        (1, Outcome.FAIL, False),
        (1, Outcome.COMPLETE, True),
    ]


async def test_settle_and_claim_records_the_attempt_too(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    await backend.enqueue([new_job(q, "a"), new_job(q, "b")])
    [first] = await claim_exactly(backend, q, 1)
    settle = Settle(first.claim, Outcome.COMPLETE, result=b"1", ran_for=0.5)
    answer = await backend.settle_and_claim([settle], [q], "w", 1)
    assert answer.applied == [True]
    job = await get_job(backend, q, first.id)
    assert job is not None
    assert [(a.attempt, a.outcome, a.worker, a.ran_for) for a in job.attempt_history] == [
        (1, Outcome.COMPLETE, "w", 0.5)
    ]
