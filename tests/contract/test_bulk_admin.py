"""Bulk admin: the batch calls of the contract (get_jobs, cancel_jobs, retry_jobs,
remove_jobs) and Queue's bulk actions over them, on every backend."""

from __future__ import annotations

import asyncio

import pytest

from relaymq import Queue, events
from relaymq.backends.base import Backend
from relaymq.bulk import Selection, apply
from relaymq.errors import ConfigError
from relaymq.instrumented import Instrumented
from relaymq.job import Job, JobState
from relaymq.records.store import Beat, Outcome, Settle
from relaymq.testing import FakeClock
from tests.support.jobs import new_job


async def one_of_each(backend: Backend, q: str) -> dict[str, Job]:
    """Jobs named after their states: waiting, delayed, active, completed, failed, expired,
    cancelled (and a second waiting job, so the active one is not the only claimable)."""
    await backend.enqueue(
        [new_job(q, n) for n in ("active", "completed", "failed", "expired", "cancelled")]
        + [new_job(q, "waiting"), new_job(q, "delayed", delay=60)]
    )
    claimed = {j.id: j for j in (await backend.claim([q], "w", 5)).jobs}
    assert set(claimed) == {"active", "completed", "failed", "expired", "cancelled"}
    await backend.settle(
        [
            Settle(claimed["completed"].claim, Outcome.COMPLETE, result=b"1"),
            Settle(claimed["failed"].claim, Outcome.FAIL, error="boom"),
            Settle(claimed["expired"].claim, Outcome.EXPIRE, error="ttl"),
            Settle(claimed["cancelled"].claim, Outcome.CANCEL, error="asked"),
        ]
    )
    return claimed


async def states(backend: Backend, q: str, ids: list[str]) -> list[JobState | None]:
    return [None if j is None else j.state for j in await backend.get_jobs(q, ids)]


ALL = ["waiting", "delayed", "active", "completed", "failed", "expired", "cancelled"]


async def test_get_jobs_answers_in_the_order_asked(backend: Backend, q: str) -> None:
    await one_of_each(backend, q)
    assert await states(backend, q, ["failed", "missing", "waiting", "active"]) == [
        JobState.FAILED,
        None,
        JobState.WAITING,
        JobState.ACTIVE,
    ]
    assert await backend.get_jobs(q, []) == []
    assert await backend.get_jobs(q + "-none", ["waiting"]) == [None]


async def test_cancel_jobs_cancels_live_jobs_only(backend: Backend, q: str) -> None:
    claimed = await one_of_each(backend, q)
    done = await backend.cancel_jobs(q, [*ALL, "missing"])
    assert done == [True, True, True, False, False, False, False, False]
    assert await states(backend, q, ALL) == [
        JobState.CANCELLED,
        JobState.CANCELLED,
        JobState.CANCELLED,
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.EXPIRED,
        JobState.CANCELLED,
    ]
    # The active job's claim is lost; its worker hears that it was cancelled.
    [beat] = await backend.heartbeat([Beat(claimed["active"].claim)])
    assert (beat.held, beat.cancel_requested) == (False, True)
    assert not (await backend.settle([Settle(claimed["active"].claim, Outcome.COMPLETE)]))[0]
    counts = await backend.counts(q)
    assert (counts[JobState.CANCELLED], counts[JobState.WAITING], counts[JobState.ACTIVE]) == (
        4,
        0,
        0,
    )
    assert await backend.cancel_jobs(q, []) == []


async def test_retry_jobs_replays_ended_jobs_in_the_order_given(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    await one_of_each(backend, q)
    replayed_at = clock.advance(30)
    asked = ["cancelled", "completed", "expired", "waiting", "failed", "active", "missing"]
    assert await backend.retry_jobs(q, asked) == [True, False, True, False, True, False, False]
    again = await backend.get_jobs(q, ["cancelled", "expired", "failed"])
    assert all(j is not None and j.state is JobState.WAITING and j.attempts == 0 for j in again)
    assert all(j is not None and j.created_at == pytest.approx(replayed_at) for j in again)
    counts = await backend.counts(q)
    assert (counts[JobState.WAITING], counts[JobState.FAILED], counts[JobState.EXPIRED]) == (
        4,
        0,
        0,
    )
    # They joined the back of the line, after the job that was already waiting, as asked.
    claimed = (await backend.claim([q], "w2", 4)).jobs
    assert [j.id for j in claimed] == ["waiting", "cancelled", "expired", "failed"]
    assert await backend.retry_jobs(q, []) == []


async def test_remove_jobs_deletes_in_any_state(backend: Backend, q: str) -> None:
    await one_of_each(backend, q)
    assert await backend.remove_jobs(q, ["missing", "active", "failed", "waiting"]) == [
        False,
        True,
        True,
        True,
    ]
    assert await states(backend, q, ["active", "failed", "waiting", "delayed"]) == [
        None,
        None,
        None,
        JobState.DELAYED,
    ]
    counts = await backend.counts(q)
    assert sum(counts.values()) == 4 and counts[JobState.ACTIVE] == 0
    assert await backend.remove_jobs(q, ["active"]) == [False]


async def failed_jobs(backend: Backend, q: str, ids: list[str], task: str) -> None:
    await backend.enqueue([new_job(q, i, task=task) for i in ids])
    claimed = (await backend.claim([q], "w", len(ids))).jobs
    assert len(claimed) == len(ids)
    await backend.settle([Settle(j.claim, Outcome.FAIL, error="boom") for j in claimed])


async def test_paging_reaches_every_selected_job(backend: Backend, q: str) -> None:
    # Pages of 3 over 8 failed jobs of which only some match: acted-on jobs leave the state,
    # the others stay, and the pass must neither skip nor repeat any.
    await failed_jobs(backend, q, [f"a{i}" for i in range(5)], "mod:a")
    await failed_jobs(backend, q, [f"b{i}" for i in range(3)], "mod:b")
    ops = Instrumented(backend)
    selection = Selection.of(state=JobState.FAILED, task="mod:a")
    changed = await apply(backend, q, selection, (), lambda ids: ops.retry_jobs(q, ids), page=3)
    assert changed == 5
    failed = await backend.list_jobs(q, JobState.FAILED)
    assert sorted(j.id for j in failed) == ["b0", "b1", "b2"]
    waiting = await backend.list_jobs(q, JobState.WAITING)
    assert sorted(j.id for j in waiting) == [f"a{i}" for i in range(5)]


async def test_queue_bulk_actions_select_by_state_task_age_and_ids(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    queue = Queue(q, backend)
    await failed_jobs(backend, q, ["old1", "old2"], "mod:x")
    clock.advance(100)
    await failed_jobs(backend, q, ["new1"], "mod:x")
    await failed_jobs(backend, q, ["other"], "mod:y")
    # Age: only the jobs that failed more than 50 s ago.
    assert await queue.retry_jobs(older_than=50, now=clock.now) == 2
    assert await states(backend, q, ["old1", "old2", "new1"]) == [
        JobState.WAITING,
        JobState.WAITING,
        JobState.FAILED,
    ]
    # Task: only mod:y's job; then explicit ids narrowed by state.
    assert await queue.retry_jobs(task="mod:y", now=clock.now) == 1
    assert await queue.cancel_jobs(["old1", "new1", "missing"], state=JobState.WAITING) == 1
    assert await states(backend, q, ["old1", "new1"]) == [JobState.CANCELLED, JobState.FAILED]
    # Cancel with no selection: every live job (old2 and other are waiting).
    assert await queue.cancel_jobs() == 2
    assert await queue.remove_jobs(state=[JobState.CANCELLED, JobState.FAILED]) == 4
    assert sum((await backend.counts(q)).values()) == 0
    with pytest.raises(ConfigError):
        await queue.remove_jobs()
    with pytest.raises(ConfigError):
        await queue.retry_jobs(older_than=-1)


async def test_listing_narrowed_by_task_and_age(backend: Backend, q: str, clock: FakeClock) -> None:
    queue = Queue(q, backend)
    await backend.enqueue([new_job(q, f"x{i}", task="m:x") for i in range(4)])
    clock.advance(60)
    await backend.enqueue([new_job(q, "y", task="m:y"), new_job(q, "x4", task="m:x")])
    listed = await queue.list_jobs(JobState.WAITING, 1, 2, task="m:x")
    assert [j.id for j in listed] == ["x1", "x2"]
    old = await queue.list_jobs(JobState.WAITING, task="m:x", older_than=30, now=clock.now)
    assert [j.id for j in old] == ["x0", "x1", "x2", "x3"]


async def test_bulk_actions_announce_one_event_per_changed_job(backend: Backend, q: str) -> None:
    queue = Queue(q, backend)
    await failed_jobs(backend, q, ["f1", "f2"], "mod:x")
    await backend.enqueue([new_job(q, "w1")])
    subscription = await Instrumented(backend).subscribe()
    try:
        assert await queue.retry_jobs(["f1", "f2", "w1"]) == 2
        assert await queue.cancel_jobs(["f1"]) == 1
        assert await queue.remove_jobs(["f2", "gone"]) == 1
        seen: list[tuple[str, str | None]] = []
        async with asyncio.timeout(10):
            async for event in subscription:
                if event.queue == q:
                    seen.append((event.name, event.job_id))
                if len(seen) == 4:
                    break
    finally:
        await subscription.aclose()
    assert seen == [
        (events.JOB_WAITING, "f1"),
        (events.JOB_WAITING, "f2"),
        (events.JOB_CANCELLED, "f1"),
        (events.JOB_REMOVED, "f2"),
    ]
