"""The trace context stored with a job (``NewJob.traceparent``) comes back unchanged from every
read: claims (plain and delayed), listings, lookups, retries; absent, it stays None."""

from __future__ import annotations

from relaymq.backends.base import Backend
from relaymq.job import JobState
from relaymq.records.store import Outcome, Settle
from relaymq.testing import FakeClock
from tests.support.jobs import get_job, new_job

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
OTHER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"


async def test_a_traceparent_round_trips_through_every_read(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    traced, plain, later = (
        new_job(q, traceparent=TRACEPARENT),
        new_job(q),
        new_job(q, traceparent=OTHER, delay=5),
    )
    await backend.enqueue([traced, plain, later])
    assert (await get_job(backend, q, traced.id)).traceparent == TRACEPARENT  # type: ignore[union-attr]
    assert (await get_job(backend, q, plain.id)).traceparent is None  # type: ignore[union-attr]
    listed = {j.id: j.traceparent for j in await backend.list_jobs(q, JobState.WAITING, 0, 10)}
    assert listed == {traced.id: TRACEPARENT, plain.id: None}
    [delayed] = await backend.list_jobs(q, JobState.DELAYED, 0, 10)
    assert delayed.traceparent == OTHER

    claimed = {j.id: j for j in (await backend.claim([q], "w", 10)).jobs}
    assert {i: j.traceparent for i, j in claimed.items()} == {
        traced.id: TRACEPARENT,
        plain.id: None,
    }
    # a retry keeps it: every attempt joins the same trace
    await backend.settle([Settle(claimed[traced.id].claim, Outcome.RETRY, error="x")])
    clock.advance(6)
    again = {j.id: j.traceparent for j in (await backend.claim([q], "w", 10)).jobs}
    assert again == {traced.id: TRACEPARENT, later.id: OTHER}


async def test_a_duplicate_enqueue_keeps_the_first_traceparent(backend: Backend, q: str) -> None:
    first = new_job(q, "same", traceparent=TRACEPARENT)
    await backend.enqueue([first])
    [answer] = await backend.enqueue([new_job(q, "same", traceparent=OTHER)])
    assert answer.duplicate
    assert (await get_job(backend, q, "same")).traceparent == TRACEPARENT  # type: ignore[union-attr]
