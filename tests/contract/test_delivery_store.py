"""DeliveryStore: the extra contract of a backend that holds a broker's job metadata."""

from __future__ import annotations

import pytest

from relaymq.backends.base import Backend, DeliveryStore
from relaymq.job import JobState
from relaymq.records.limits import Limits
from relaymq.records.store import Outcome, Settle
from relaymq.testing import FakeClock
from tests.support.jobs import cancel, new_job


@pytest.fixture
def store(backend: Backend) -> DeliveryStore:
    if not backend.capabilities.delivery_store:
        pytest.skip("capability delivery_store is false")
    assert isinstance(backend, DeliveryStore)
    return backend


async def test_delivery_claims_only_with_the_published_token(
    store: DeliveryStore, backend: Backend, q: str
) -> None:
    await backend.enqueue([new_job(q, "a"), new_job(q, "b"), new_job(q, "c")])
    batch, stale = await store.claim_delivered(q, [("b", 0), ("c", 7), ("nope", 0)], "w")
    assert [j.id for j in batch.jobs] == ["b"]
    assert (batch.jobs[0].token, batch.jobs[0].attempts, batch.jobs[0].worker_id) == (1, 1, "w")
    assert sorted(stale) == ["c", "nope"]
    # a redelivery of the same message is stale now: the token moved on
    again, stale = await store.claim_delivered(q, [("b", 0)], "w2")
    assert again.jobs == [] and stale == ["b"]
    counts = await backend.counts(q)
    assert (counts[JobState.ACTIVE], counts[JobState.WAITING]) == (1, 2)


async def test_delivery_of_a_finished_or_cancelled_job_is_stale(
    store: DeliveryStore, backend: Backend, q: str
) -> None:
    await backend.enqueue([new_job(q, "done"), new_job(q, "off")])
    [done] = (await store.claim_delivered(q, [("done", 0)], "w"))[0].jobs
    await backend.settle([Settle(done.claim, Outcome.COMPLETE, result=b"1")])
    await cancel(backend, q, "off")
    batch, stale = await store.claim_delivered(q, [("done", 1), ("off", 0)], "w")
    assert batch.jobs == [] and sorted(stale) == ["done", "off"]


async def test_recovered_job_is_claimable_by_its_replacement_delivery_only(
    store: DeliveryStore, backend: Backend, q: str, clock: FakeClock
) -> None:
    await backend.enqueue([new_job(q, "j")])
    [first] = (await store.claim_delivered(q, [("j", 0)], "w"))[0].jobs
    clock.advance(60)
    assert (await backend.recover_stalled(q, 30, 5)).requeued == ["j"]
    batch, stale = await store.claim_delivered(q, [("j", 0), ("j", first.token)], "w")
    assert [j.token for j in batch.jobs] == [first.token + 1] and stale == ["j"]


async def test_paused_queue_keeps_deliveries_for_later(
    store: DeliveryStore, backend: Backend, q: str
) -> None:
    await backend.enqueue([new_job(q, "p")])
    await backend.pause(q)
    batch, stale = await store.claim_delivered(q, [("p", 0)], "w")
    assert batch.jobs == [] and stale == []
    await backend.resume(q)
    assert [j.id for j in (await store.claim_delivered(q, [("p", 0)], "w"))[0].jobs] == ["p"]


async def test_promote_due_returns_the_promoted_jobs(
    store: DeliveryStore, backend: Backend, q: str, clock: FakeClock
) -> None:
    await backend.enqueue([new_job(q, "d1", delay=5), new_job(q, "d2", delay=6)])
    await backend.enqueue([new_job(q, "d3", delay=50)])
    assert await store.promote_due(q, 10) == []
    clock.advance(10)
    promoted = await store.promote_due(q, 10)
    assert [(j.id, j.state, j.token) for j in promoted] == [
        ("d1", JobState.WAITING, 0),
        ("d2", JobState.WAITING, 0),
    ]
    assert (await backend.counts(q))[JobState.DELAYED] == 1


async def test_delivered_jobs_beyond_the_limits_are_kept(
    store: DeliveryStore, backend: Backend, q: str
) -> None:
    await backend.set_limits(q, Limits(max_active=2))
    await backend.enqueue([new_job(q, i) for i in "abcd"])
    batch, stale = await store.claim_delivered(q, [("a", 0), ("gone", 0), ("b", 0), ("c", 0)], "w")
    assert [j.id for j in batch.jobs] == ["a", "b"]
    assert stale == ["gone"]  # "c" is in neither list: the caller keeps it
    assert batch.limited == {q: None}
    again, stale = await store.claim_delivered(q, [("c", 0), ("d", 0)], "w")
    assert again.jobs == [] and stale == [] and again.limited == {q: None}
    assert (await backend.counts(q))[JobState.ACTIVE] == 2


async def test_delivered_jobs_of_a_key_that_used_its_window_are_kept(
    store: DeliveryStore, backend: Backend, q: str
) -> None:
    await backend.set_limits(q, Limits(key_rate=1, key_per=3600))
    await backend.enqueue(
        [
            new_job(q, "a1", limit_key="a"),
            new_job(q, "a2", limit_key="a"),
            new_job(q, "b1", limit_key="b"),
        ]
    )
    batch, stale = await store.claim_delivered(q, [("a1", 0), ("a2", 0), ("b1", 0)], "w")
    assert [j.id for j in batch.jobs] == ["a1", "b1"]
    assert stale == [] and list(batch.limited) == [q]  # "a2" is kept by the caller
    again, stale = await store.claim_delivered(q, [("a2", 0)], "w")
    assert again.jobs == [] and stale == [] and list(again.limited) == [q]


@pytest.mark.parametrize("limits", [None, Limits(key_max_active=5)], ids=["plain", "keyed"])
async def test_delivered_jobs_of_a_sequence_start_only_as_its_head_and_are_kept_meanwhile(
    store: DeliveryStore, backend: Backend, q: str, limits: Limits | None
) -> None:
    if not store.delivers_sequences:
        pytest.skip("the store does not keep sequences in claim_delivered")
    if limits is not None:
        await backend.set_limits(q, limits)
    seqs = {"a1": "a", "a2": "a", "b1": "b", "n1": None, "b2": "b"}
    await backend.enqueue([new_job(q, i, sequence=s, limit_key=s) for i, s in seqs.items()])
    deliveries = [("a2", 0), ("b2", 0), ("a1", 0), ("b1", 0), ("n1", 0), ("gone", 0)]
    batch, stale = await store.claim_delivered(q, deliveries, "w")
    assert sorted(j.id for j in batch.jobs) == ["a1", "b1", "n1"]
    assert stale == ["gone"]  # a2 and b2 are in neither list: the caller keeps them
    assert batch.limited == {q: None}  # until the active jobs of their sequences end
    again, stale = await store.claim_delivered(q, [("a2", 0), ("b2", 0)], "w")
    assert again.jobs == [] and stale == [] and again.limited == {q: None}
    a1 = next(j for j in batch.jobs if j.id == "a1")
    await backend.settle([Settle(a1.claim, Outcome.COMPLETE, result=b"1")])
    then, stale = await store.claim_delivered(q, [("b2", 0), ("a2", 0)], "w")
    assert [j.id for j in then.jobs] == ["a2"] and stale == [] and then.limited == {q: None}
    assert [j.id for j in await backend.list_jobs(q, JobState.WAITING)] == ["b2"]
