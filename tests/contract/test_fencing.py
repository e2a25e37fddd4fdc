"""Every transition after a claim, and that a stale claim changes nothing (RELIABILITY F1-F13)."""

from __future__ import annotations

import dataclasses

import pytest

from relaymq.backends.base import Backend
from relaymq.job import DLQ_STATES, Claim, Job, JobState
from relaymq.records.store import Beat, BeatResult, CancelResult, Outcome, Settle
from relaymq.testing import FakeClock
from tests.support.jobs import cancel, get_job, new_job, remove_job


async def claim_one(backend: Backend, q: str, **options: object) -> Job:
    await backend.enqueue([new_job(q, **options)])  # type: ignore[arg-type]
    [job] = (await backend.claim([q], "w", 1)).jobs
    return job


def stale(claim: Claim) -> Claim:
    return dataclasses.replace(claim, token=claim.token - 1)


async def test_complete_stores_result(backend: Backend, q: str) -> None:
    job = await claim_one(backend, q)
    assert await backend.settle([Settle(job.claim, Outcome.COMPLETE, result=b'"ok"')]) == [True]
    stored = await get_job(backend, q, job.id)
    assert stored is not None
    assert (stored.state, stored.result) == (JobState.COMPLETED, b'"ok"')
    assert stored.finished_at is not None
    counts = await backend.counts(q)
    assert (counts[JobState.ACTIVE], counts[JobState.COMPLETED]) == (0, 1)


@pytest.mark.parametrize("outcome", [Outcome.FAIL, Outcome.EXPIRE])
async def test_fail_and_expire_go_to_the_dlq(backend: Backend, q: str, outcome: Outcome) -> None:
    job = await claim_one(backend, q)
    assert await backend.settle([Settle(job.claim, outcome, error="boom")]) == [True]
    stored = await get_job(backend, q, job.id)
    assert stored is not None and stored.state in DLQ_STATES and stored.error == "boom"
    listed = await backend.list_jobs(q, stored.state)
    assert [j.id for j in listed] == [job.id]


async def test_retry_with_delay_makes_job_delayed_then_claimable(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    job = await claim_one(backend, q, max_attempts=3)
    assert await backend.settle([Settle(job.claim, Outcome.RETRY, error="e1", delay=10)]) == [True]
    stored = await get_job(backend, q, job.id)
    assert stored is not None
    assert (stored.state, stored.error, stored.attempts) == (JobState.DELAYED, "e1", 1)
    assert (await backend.claim([q], "w", 1)).jobs == []
    clock.advance(11)
    [again] = (await backend.claim([q], "w", 1)).jobs
    assert (again.id, again.token, again.attempts) == (job.id, 2, 2)


async def test_retry_without_delay_is_waiting_at_once(backend: Backend, q: str) -> None:
    job = await claim_one(backend, q, max_attempts=2)
    assert await backend.settle([Settle(job.claim, Outcome.RETRY, error="e")]) == [True]
    [again] = (await backend.claim([q], "w", 1)).jobs
    assert again.id == job.id and again.token == job.token + 1


async def test_release_returns_job_at_once_and_gives_back_the_attempt(
    backend: Backend, q: str
) -> None:
    job = await claim_one(backend, q)
    assert await backend.settle([Settle(job.claim, Outcome.RELEASE)]) == [True]
    stored = await get_job(backend, q, job.id)
    assert stored is not None and stored.state is JobState.WAITING and stored.attempts == 0
    [again] = (await backend.claim([q], "w", 1)).jobs
    assert again.id == job.id and again.attempts == 1 and again.token == job.token + 1


async def test_release_keeps_the_jobs_place_in_line(backend: Backend, q: str) -> None:
    await backend.enqueue([new_job(q, "first"), new_job(q, "second")])
    [first] = (await backend.claim([q], "w", 1)).jobs
    assert await backend.settle([Settle(first.claim, Outcome.RELEASE)]) == [True]
    assert [j.id for j in (await backend.claim([q], "w", 2)).jobs] == ["first", "second"]


@pytest.mark.parametrize("outcome", list(Outcome))
async def test_stale_token_changes_nothing_and_is_reported(
    backend: Backend, q: str, outcome: Outcome
) -> None:
    job = await claim_one(backend, q, max_attempts=5)
    before = await get_job(backend, q, job.id)
    s = Settle(stale(job.claim), outcome, result=b"1", error="late", delay=1)
    assert await backend.settle([s]) == [False]
    assert await get_job(backend, q, job.id) == before


async def test_batch_settle_answers_each_claim(backend: Backend, q: str) -> None:
    await backend.enqueue([new_job(q) for _ in range(3)])
    a, b, c = (await backend.claim([q], "w", 3)).jobs
    answers = await backend.settle(
        [
            Settle(a.claim, Outcome.COMPLETE, result=b"1"),
            Settle(stale(b.claim), Outcome.COMPLETE, result=b"1"),
            Settle(c.claim, Outcome.FAIL, error="x"),
        ]
    )
    assert answers == [True, False, True]
    states = [(await get_job(backend, q, j.id)).state for j in (a, b, c)]  # type: ignore[union-attr]
    assert states == [JobState.COMPLETED, JobState.ACTIVE, JobState.FAILED]


async def test_f1_old_claim_cannot_complete_after_reclaim(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    job_a = await claim_one(backend, q)
    clock.advance(60)
    recovered = await backend.recover_stalled(q, threshold=30, max_stalled=5)
    assert recovered.requeued == [job_a.id]
    [job_b] = (await backend.claim([q], "B", 1)).jobs
    assert job_b.token > job_a.token
    assert await backend.settle([Settle(job_a.claim, Outcome.COMPLETE, result=b"A")]) == [False]
    assert await backend.settle([Settle(job_b.claim, Outcome.COMPLETE, result=b"B")]) == [True]
    stored = await get_job(backend, q, job_a.id)
    assert stored is not None and stored.result == b"B"


@pytest.mark.parametrize("call", ["settle", "settle_and_claim"])
@pytest.mark.parametrize("old_first", [True, False], ids=["old-first", "new-first"])
async def test_f1_old_claim_in_the_same_batch_as_the_new_one(
    backend: Backend, q: str, clock: FakeClock, call: str, old_first: bool
) -> None:
    """A worker cut off from the server recovers its own stale job once healed and claims it
    again, while the old claim's outcome still waits to be written (the settles failed during
    the cut): the two outcomes go in one batch. The old one is refused, each answered by its
    own token (a PostgreSQL batch once answered both by the job's id: the old one 'applied',
    and the worker never learnt its claim had been lost)."""
    job_a = await claim_one(backend, q)
    clock.advance(60)
    assert (await backend.recover_stalled(q, threshold=30, max_stalled=5)).requeued == [job_a.id]
    [job_b] = (await backend.claim([q], "w", 1)).jobs
    old = Settle(job_a.claim, Outcome.COMPLETE, result=b'"A"')
    new = Settle(job_b.claim, Outcome.COMPLETE, result=b'"B"')
    settles = [old, new] if old_first else [new, old]
    if call == "settle":
        answers = await backend.settle(settles)
    else:
        answers = (await backend.settle_and_claim(settles, [q], "w", 1)).applied
    assert answers == ([False, True] if old_first else [True, False])
    stored = await get_job(backend, q, job_a.id)
    assert stored is not None
    assert (stored.state, stored.token, stored.result) == (JobState.COMPLETED, job_b.token, b'"B"')


@pytest.mark.parametrize("outcome", [Outcome.RETRY, Outcome.FAIL])
async def test_f2_old_claim_cannot_retry_or_fail(
    backend: Backend, q: str, clock: FakeClock, outcome: Outcome
) -> None:
    job_a = await claim_one(backend, q, max_attempts=3)
    clock.advance(60)
    await backend.recover_stalled(q, threshold=30, max_stalled=5)
    [job_b] = (await backend.claim([q], "B", 1)).jobs
    assert await backend.settle([Settle(job_a.claim, outcome, error="A", delay=5)]) == [False]
    stored = await get_job(backend, q, job_a.id)
    assert stored is not None
    assert (stored.state, stored.token, stored.attempts) == (JobState.ACTIVE, job_b.token, 2)
    assert (await backend.counts(q))[JobState.FAILED] == 0


async def test_f3_heartbeat_reports_lost_claim(backend: Backend, q: str, clock: FakeClock) -> None:
    job = await claim_one(backend, q)
    assert await backend.heartbeat([Beat(job.claim)]) == [BeatResult(held=True)]
    clock.advance(60)
    await backend.recover_stalled(q, threshold=30, max_stalled=5)
    [result] = await backend.heartbeat([Beat(job.claim)])
    assert not result.held
    stored = await get_job(backend, q, job.id)
    assert stored is not None and stored.state is JobState.WAITING


async def test_f4_old_claim_cannot_complete_a_requeued_job(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    job = await claim_one(backend, q)
    clock.advance(60)
    await backend.recover_stalled(q, threshold=30, max_stalled=5)
    assert await backend.settle([Settle(job.claim, Outcome.COMPLETE, result=b"1")]) == [False]
    stored = await get_job(backend, q, job.id)
    assert stored is not None and stored.state is JobState.WAITING and stored.result is None


async def test_f13_repeating_a_terminal_transition_is_idempotent(backend: Backend, q: str) -> None:
    job = await claim_one(backend, q)
    done = Settle(job.claim, Outcome.COMPLETE, result=b"1")
    assert await backend.settle([done]) == [True]
    before = await get_job(backend, q, job.id)
    assert await backend.settle([done]) == [True]
    assert await get_job(backend, q, job.id) == before
    # ...but a different outcome with the same token is not a repeat.
    assert await backend.settle([Settle(job.claim, Outcome.FAIL, error="x")]) == [False]
    assert (await backend.counts(q))[JobState.COMPLETED] == 1


async def test_heartbeat_renews_and_stores_progress(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    job = await claim_one(backend, q)
    clock.advance(20)
    [result] = await backend.heartbeat([Beat(job.claim, progress=b"50")])
    assert result.held and not result.cancel_requested
    stored = await get_job(backend, q, job.id)
    assert stored is not None and stored.progress == b"50"
    assert stored.heartbeat_at is not None and stored.heartbeat_at >= job.claimed_at + 19  # type: ignore[operator]
    clock.advance(20)  # 40 s after the claim but 20 s after the heartbeat: not stalled
    assert (await backend.recover_stalled(q, threshold=30, max_stalled=5)).requeued == []


async def test_stale_heartbeat_changes_nothing(backend: Backend, q: str) -> None:
    job = await claim_one(backend, q)
    before = await get_job(backend, q, job.id)
    [result] = await backend.heartbeat([Beat(stale(job.claim), progress=b"9")])
    assert not result.held
    assert await get_job(backend, q, job.id) == before


async def test_cancel_waiting_and_delayed_jobs(backend: Backend, q: str, clock: FakeClock) -> None:
    await backend.enqueue([new_job(q, "w1"), new_job(q, "d1", delay=10)])
    assert await cancel(backend, q, "w1") is CancelResult.CANCELLED
    assert await cancel(backend, q, "d1") is CancelResult.CANCELLED
    clock.advance(20)
    assert (await backend.claim([q], "w", 10)).jobs == []
    counts = await backend.counts(q)
    assert (counts[JobState.CANCELLED], counts[JobState.WAITING], counts[JobState.DELAYED]) == (
        2,
        0,
        0,
    )


async def test_cancel_active_job_loses_its_claim(backend: Backend, q: str) -> None:
    job = await claim_one(backend, q)
    assert await cancel(backend, q, job.id) is CancelResult.CANCELLED
    [beat] = await backend.heartbeat([Beat(job.claim)])
    assert (beat.held, beat.cancel_requested) == (False, True)
    assert await backend.settle([Settle(job.claim, Outcome.COMPLETE, result=b"1")]) == [False]
    assert await backend.settle([Settle(job.claim, Outcome.RETRY, error="x")]) == [False]
    # The worker acknowledging the cancellation is a repeat of the same terminal state.
    assert await backend.settle([Settle(job.claim, Outcome.CANCEL)]) == [True]
    stored = await get_job(backend, q, job.id)
    assert stored is not None and stored.state is JobState.CANCELLED and stored.result is None


async def test_f7_cancel_after_terminal_is_a_clear_no_op(backend: Backend, q: str) -> None:
    job = await claim_one(backend, q)
    await backend.settle([Settle(job.claim, Outcome.COMPLETE, result=b"1")])
    assert await cancel(backend, q, job.id) is CancelResult.ALREADY_TERMINAL
    assert await cancel(backend, q, "missing") is CancelResult.NOT_FOUND
    stored = await get_job(backend, q, job.id)
    assert stored is not None and stored.state is JobState.COMPLETED


async def test_worker_cancel_outcome(backend: Backend, q: str) -> None:
    job = await claim_one(backend, q)
    assert await backend.settle([Settle(job.claim, Outcome.CANCEL, error="asked")]) == [True]
    stored = await get_job(backend, q, job.id)
    assert stored is not None and stored.state is JobState.CANCELLED


async def test_terminal_states_absorb_recovery(backend: Backend, q: str, clock: FakeClock) -> None:
    await backend.enqueue([new_job(q) for _ in range(3)])
    a, b, c = (await backend.claim([q], "w", 3)).jobs
    await backend.settle(
        [
            Settle(a.claim, Outcome.COMPLETE, result=b"1"),
            Settle(b.claim, Outcome.FAIL, error="x"),
        ]
    )
    await cancel(backend, q, c.id)
    clock.advance(3600)
    recovered = await backend.recover_stalled(q, threshold=30, max_stalled=5)
    assert recovered.requeued == [] and recovered.failed == []
    states = [(await get_job(backend, q, j.id)).state for j in (a, b, c)]  # type: ignore[union-attr]
    assert states == [JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED]


async def test_removed_active_job_loses_its_claim(backend: Backend, q: str) -> None:
    job = await claim_one(backend, q)
    assert await remove_job(backend, q, job.id)
    assert await backend.settle([Settle(job.claim, Outcome.COMPLETE, result=b"1")]) == [False]
    [beat] = await backend.heartbeat([Beat(job.claim)])
    assert not beat.held
    assert await get_job(backend, q, job.id) is None
