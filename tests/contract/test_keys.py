"""Deduplication by key on every backend: throttle drops a job while its key is held (by a
pending job, or for a window after an enqueue); debounce replaces the waiting or delayed
holder. Both are part of the enqueue's atomic step, in batch order, per queue."""

from __future__ import annotations

import asyncio

from relaymq.backends.base import Backend
from relaymq.job import Job, JobState, KeyMode, KeyRule
from relaymq.records.store import Enqueued, Outcome, Settle
from relaymq.testing import FakeClock
from tests.conftest import MakeBackend
from tests.support.jobs import cancel, get_job, new_job


def throttled(q: str, job_id: str, window: float = 60.0, key: str = "k") -> object:
    return new_job(q, job_id, rule=KeyRule(key, KeyMode.THROTTLE, window))


def debounced(q: str, job_id: str, delay: float = 5.0, key: str = "k") -> object:
    return new_job(q, job_id, rule=KeyRule(key, KeyMode.DEBOUNCE), delay=delay)


async def claim_exactly(backend: Backend, q: str, n: int) -> list[Job]:
    """Claim ``n`` jobs of ``q`` (a broker may hand them out over a few calls)."""
    got: list[Job] = []
    async with asyncio.timeout(10):  # the broker delivering what the store made eligible
        while len(got) < n:
            got += (await backend.claim([q], "w", n - len(got))).jobs
    return got


async def state(backend: Backend, q: str, job_id: str) -> JobState | None:
    job = await get_job(backend, q, job_id)
    return None if job is None else job.state


async def test_a_throttled_key_is_held_while_its_job_is_pending_and_for_its_window(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    assert await backend.enqueue([throttled(q, "a")]) == [Enqueued("a")]  # type: ignore[list-item]
    assert await backend.enqueue([throttled(q, "b")]) == [Enqueued("a", duplicate=True)]  # type: ignore[list-item]
    clock.advance(61)  # the window has passed, but "a" still waits
    assert await backend.enqueue([throttled(q, "c")]) == [Enqueued("a", duplicate=True)]  # type: ignore[list-item]
    [a] = await claim_exactly(backend, q, 1)
    assert await backend.enqueue([throttled(q, "d")]) == [Enqueued("a", duplicate=True)]  # type: ignore[list-item]
    assert await backend.settle([Settle(a.claim, Outcome.COMPLETE, result=b"1")]) == [True]
    assert await backend.enqueue([throttled(q, "e")]) == [Enqueued("e")]  # type: ignore[list-item]
    # "e" ends at once, but its window holds the key for 60 s from its enqueue.
    await cancel(backend, q, "e")
    clock.advance(59)
    assert await backend.enqueue([throttled(q, "f")]) == [Enqueued("e", duplicate=True)]  # type: ignore[list-item]
    clock.advance(2)
    assert await backend.enqueue([throttled(q, "g")]) == [Enqueued("g")]  # type: ignore[list-item]
    assert [await state(backend, q, i) for i in "bcdf"] == [None] * 4  # nothing was stored


async def test_a_debounced_job_replaces_its_waiting_or_delayed_holder(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    assert await backend.enqueue([debounced(q, "a")]) == [Enqueued("a")]  # type: ignore[list-item]
    clock.advance(3)
    assert await backend.enqueue([debounced(q, "b")]) == [Enqueued("b", replaced="a")]  # type: ignore[list-item]
    assert await state(backend, q, "a") is None
    counts = await backend.counts(q)
    assert (counts[JobState.DELAYED], counts[JobState.WAITING]) == (1, 0)
    clock.advance(4)  # 7 s after "a", 4 s after "b": the restarted delay has not passed
    assert (await backend.claim([q], "w", 10)).jobs == []
    clock.advance(1)
    [b] = await claim_exactly(backend, q, 1)
    assert b.id == "b"
    # A running holder is not replaced: the new job is stored beside it.
    assert await backend.enqueue([debounced(q, "c", delay=0.5)]) == [Enqueued("c")]  # type: ignore[list-item]
    assert await state(backend, q, "b") is JobState.ACTIVE
    # A plain (undelayed) holder that waits is replaced too.
    assert await backend.enqueue([debounced(q, "d", delay=1)]) == [Enqueued("d", replaced="c")]  # type: ignore[list-item]


async def test_keys_apply_in_batch_order_per_queue_after_the_job_id(
    backend: Backend, q: str
) -> None:
    other = q + "-other"
    answers = await backend.enqueue(
        [
            throttled(q, "a"),
            throttled(q, "b"),
            throttled(other, "a"),
            throttled(q, "c", key="k2"),
            debounced(q, "d", key="k3"),
            debounced(q, "e", key="k3"),
        ]
    )  # type: ignore[list-item]
    assert answers == [
        Enqueued("a"),
        Enqueued("a", duplicate=True),
        Enqueued("a"),
        Enqueued("c"),
        Enqueued("d"),
        Enqueued("e", replaced="d"),
    ]
    # A repeated job id is a duplicate first: it replaces nothing and takes no key.
    assert await backend.enqueue([debounced(q, "e", key="k3")]) == [  # type: ignore[list-item]
        Enqueued("e", duplicate=True)
    ]
    assert await state(backend, q, "e") is JobState.DELAYED


async def test_concurrent_throttled_enqueues_store_one_job(
    make_backend: MakeBackend, q: str
) -> None:
    handles = [await make_backend() for _ in range(3)]
    answers = await asyncio.gather(
        *(h.enqueue([throttled(q, f"j{i}-{n}")]) for n in range(4) for i, h in enumerate(handles))  # type: ignore[list-item]
    )
    stored = [a for [a] in answers if not a.duplicate]
    assert len(stored) == 1
    assert {a.id for [a] in answers} == {stored[0].id}  # every duplicate names the holder
    assert (await handles[0].counts(q))[JobState.WAITING] == 1


async def test_obliterate_forgets_the_keys(backend: Backend, q: str) -> None:
    await backend.enqueue([throttled(q, "a"), debounced(q, "b", key="d")])  # type: ignore[list-item]
    await backend.obliterate(q)
    assert await backend.enqueue([throttled(q, "c"), debounced(q, "e", key="d")]) == [  # type: ignore[list-item]
        Enqueued("c"),
        Enqueued("e"),
    ]


async def test_pruning_forgets_only_keys_that_hold_nothing(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    await backend.enqueue(
        [
            throttled(q, "a", window=10, key="done"),  # type: ignore[list-item]
            throttled(q, "b", window=10, key="waits"),
            debounced(q, "c", delay=500, key="later"),
        ]
    )
    claimed = {j.id: j for j in await claim_exactly(backend, q, 2)}  # a and b: c is delayed
    await backend.settle([Settle(claimed["a"].claim, Outcome.COMPLETE, result=b"1")])
    assert await backend.prune_keys(q, 60) == 0  # every window is open or ended too lately
    clock.advance(100)
    # "done": its window ended 90 s ago and its job completed. "waits" holds: b is active.
    # "later": its job is delayed, so a new debounce must still find it to replace it.
    assert await backend.prune_keys(q, 60) == 1
    assert await backend.prune_keys(q, 60) == 0
    assert await backend.enqueue([throttled(q, "d", key="waits")]) == [  # type: ignore[list-item]
        Enqueued("b", duplicate=True)
    ]
    assert await backend.enqueue([debounced(q, "e", key="later")]) == [  # type: ignore[list-item]
        Enqueued("e", replaced="c")
    ]
    assert await backend.enqueue([throttled(q, "f", key="done")]) == [Enqueued("f")]  # type: ignore[list-item]
