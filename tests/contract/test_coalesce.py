"""Concurrent enqueues through one facade (``relaymq.coalesce``): on a backend that coalesces
them, the calls made while one is in flight are one backend call (or a few, of ``BATCH_JOBS``
jobs), and each caller gets its own answers and its own error, exactly as separate calls made
in the same order would have; elsewhere each caller gets its own answers too, the calls racing
as they always did."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from relaymq.backends.base import Backend
from relaymq.coalesce import BATCH_JOBS
from relaymq.errors import BackendError, ConfigError
from relaymq.instrumented import Instrumented
from relaymq.job import JobState, KeyMode, KeyRule, NewJob
from relaymq.records.store import Enqueued
from tests.support.jobs import get_job, new_job


class Counted:
    """Counts the facade's calls of the backend's ``enqueue_announced`` (the real one runs)."""

    def __init__(self, backend: Backend) -> None:
        self.batches: list[list[str]] = []
        real = backend.enqueue_announced

        async def counted(jobs: Sequence[NewJob], at: float) -> list[Enqueued]:
            self.batches.append([j.id for j in jobs])
            return await real(jobs, at)

        backend.enqueue_announced = counted  # type: ignore[method-assign]


async def together(ops: Instrumented, calls: Sequence[Sequence[NewJob]]) -> list[Any]:
    """Each list of jobs enqueued by a coroutine of its own, all started in one loop turn."""
    return await asyncio.gather(*(ops.enqueue(jobs) for jobs in calls), return_exceptions=True)


async def test_concurrent_enqueues_are_one_call_and_each_caller_gets_its_own_answers(
    backend: Backend, q: str
) -> None:
    ops = Instrumented(backend)
    await ops.enqueue([new_job(q, "old")])
    counted = Counted(backend)
    calls = [[new_job(q, f"c{i}-{k}") for k in range(i % 3 + 1)] for i in range(60)]
    calls[7] = [new_job(q, "old"), new_job(q, "c7-new")]  # a duplicate of an earlier enqueue
    answers = await together(ops, calls)
    for jobs, got in zip(calls, answers, strict=True):
        assert got == [Enqueued(j.id, duplicate=j.id == "old") for j in jobs]
    if backend.capabilities.coalesce_enqueues:  # in order: the first call, then the others
        assert [i for batch in counted.batches for i in batch] == [j.id for c in calls for j in c]
        assert counted.batches[0] == [j.id for j in calls[0]]
        assert len(counted.batches) == 3 and all(len(b) <= BATCH_JOBS for b in counted.batches)
    for jobs in calls:
        for j in jobs:
            stored = await get_job(backend, q, j.id)
            assert stored is not None and stored.state is JobState.WAITING


async def test_the_same_id_from_two_concurrent_callers_is_stored_once_for_the_first(
    backend: Backend, q: str
) -> None:
    ops = Instrumented(backend)
    first, second = await together(ops, [[new_job(q, "same")], [new_job(q, "same")]])
    if backend.capabilities.coalesce_enqueues:  # one batch, in the callers' order
        assert (first, second) == ([Enqueued("same")], [Enqueued("same", duplicate=True)])
    else:  # two calls at once, in an order the backend decides: one stores it
        assert sorted([first, second], key=lambda e: e[0].duplicate) == [
            [Enqueued("same")],
            [Enqueued("same", duplicate=True)],
        ]


def _refused(backend: Backend, q: str) -> NewJob:
    """A job this backend refuses with its own error (the core's checks let it through)."""
    if backend.url.startswith(("postgres", "postgresql")):
        return new_job(q, "bad\x00id")  # PostgreSQL text holds no NUL
    return new_job(q, "bad", traceparent="two words")  # Redis: one word per head field


async def test_a_bad_job_among_concurrent_enqueues_fails_alone(backend: Backend, q: str) -> None:
    if not backend.capabilities.coalesce_enqueues:
        pytest.skip("the backend does not coalesce: every call is its own already")
    ops = Instrumented(backend)
    bad = _refused(backend, q)
    with pytest.raises((ConfigError, BackendError)) as alone:
        await ops.enqueue([bad])
    counted = Counted(backend)
    calls = [[new_job(q, "a1"), new_job(q, "a2")], [new_job(q, "b1"), bad], [new_job(q, "c1")]]
    a, b, c = await together(ops, calls)
    assert a == [Enqueued("a1"), Enqueued("a2")] and c == [Enqueued("c1")]
    assert type(b) is type(alone.value) and str(b) == str(alone.value)  # as when sent alone
    assert await get_job(backend, q, "b1") is None  # nothing of the refused call's batch
    for job_id in ("a1", "a2", "c1"):
        assert await get_job(backend, q, job_id) is not None
    # the whole, refused; then each caller's jobs on their own, in order
    # the first call straight through, the others refused together, then each on its own
    whole = ["b1", bad.id, "c1"]
    assert counted.batches == [["a1", "a2"], whole, ["b1", bad.id], ["c1"]]


async def test_key_rules_among_concurrent_enqueues_apply_in_the_callers_order(
    backend: Backend, q: str
) -> None:
    if not backend.capabilities.coalesce_enqueues:
        pytest.skip("calls made at once race where the backend does not coalesce them")
    ops = Instrumented(backend)
    throttle = KeyRule("t", KeyMode.THROTTLE, 60.0)
    debounce = KeyRule("d", KeyMode.DEBOUNCE)
    calls = [
        [new_job(q, "t1", rule=throttle)],
        [new_job(q, "d1", rule=debounce, delay=5.0)],
        [new_job(q, "t2", rule=throttle), new_job(q, "plain")],
        [new_job(q, "d2", rule=debounce, delay=5.0)],
        [new_job(q, "t3", rule=throttle)],
    ]
    answers = await together(ops, calls)
    assert answers == [
        [Enqueued("t1")],
        [Enqueued("d1")],
        [Enqueued("t1", duplicate=True), Enqueued("plain")],
        [Enqueued("d2", replaced="d1")],
        [Enqueued("t1", duplicate=True)],
    ]
    assert await get_job(backend, q, "d1") is None
    d2 = await get_job(backend, q, "d2")
    assert d2 is not None and d2.state is JobState.DELAYED


async def test_an_enqueue_cancelled_while_it_waits_for_its_batch_stores_nothing(
    backend: Backend, q: str
) -> None:
    ops = Instrumented(backend)
    first = asyncio.ensure_future(ops.enqueue([new_job(q, "first")]))
    second = asyncio.ensure_future(ops.enqueue([new_job(q, "second")]))
    await asyncio.sleep(0)  # both have started: "first" is on its way
    if backend.capabilities.coalesce_enqueues:  # "second" waits for it, so it can be cancelled
        second.cancel()
        assert await first == [Enqueued("first")]
        with pytest.raises(asyncio.CancelledError):
            await second
        assert await ops.enqueue([new_job(q, "third")]) == [Enqueued("third")]
        assert await get_job(backend, q, "second") is None
    else:
        await asyncio.gather(first, second)
