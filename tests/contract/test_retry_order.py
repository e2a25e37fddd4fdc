"""A job a settle puts back in line (a retry without delay, a release) competes at its priority
in the very next claim (RELIABILITY.md I10), on every backend: through a worker, as a user
meets it, and through ``settle_and_claim``, where a backend batches the settle with the claim.

Found on PostgreSQL (issue 36): one worker at ``concurrency=1`` ran a lower-priority job before
a job retried at once."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from relaymq import Queue, Settings, Worker, task
from relaymq.backends.base import Backend
from relaymq.job import JobState
from relaymq.queue import JobHandle
from relaymq.records.store import Outcome, Settle
from tests.conftest import MakeBackend
from tests.contract.test_keys import claim_exactly, state
from tests.contract.test_settle_and_claim import the_rest
from tests.support.jobs import new_job, queue_name

STARTS: dict[str, list[str]] = {}
"""Per test key, the labels of the handlers in the order they started."""

FAST = Settings(heartbeat_interval=0.1, stalled_threshold=5.0, shutdown_timeout=2.0)


@task(queue="tests", retries=1, backoff=0)
async def fails_first(key: str, label: str) -> None:
    """Records its start; its first attempt raises (retried at once: no backoff)."""
    starts = STARTS.setdefault(key, [])
    starts.append(label)
    if starts.count(label) == 1:
        raise RuntimeError(f"first attempt of {label} fails on purpose")


@task(queue="tests")
async def records(key: str, label: str) -> None:
    """Records its start."""
    STARTS.setdefault(key, []).append(label)


async def resume_one_at_a_time(live: Backend, queue: Queue, handles: list[JobHandle[Any]]) -> None:
    """Start a worker at concurrency 1 on the paused ``queue``, resume it, and wait for every
    handle's result; the worker is stopped gracefully either way."""
    worker = Worker(live, [queue.name], settings=FAST, concurrency=1)
    running = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(10):  # the worker registering and starting to claim
            await worker.started.wait()
        await queue.resume()
        for handle in handles:
            await handle.result(timeout=10)
    finally:
        worker.stop()
        async with asyncio.timeout(30):  # the worker finishing its graceful shutdown
            await running


async def test_a_job_retried_at_once_runs_before_lower_priority_jobs(
    make_backend: MakeBackend,
) -> None:
    """The scenario of issue 36, as a user meets it: R fails once and is retried without
    delay; it must run again before B, whose priority is lower (a larger number)."""
    live: Backend = await make_backend()  # the real clock: the worker runs real loops
    queue = Queue(queue_name("retry-order"), live, settings=FAST)
    key = uuid.uuid4().hex
    await queue.pause()
    handles = [
        await queue.add(fails_first.with_options(priority=1).call(key, "R")),
        await queue.add(records.with_options(priority=1).call(key, "A")),
        await queue.add(records.with_options(priority=5).call(key, "B")),
    ]
    await resume_one_at_a_time(live, queue, handles)
    assert STARTS[key] == ["R", "A", "R", "B"]


async def test_a_retry_without_delay_is_claimed_by_the_claim_batched_with_it(
    backend: Backend, q: str
) -> None:
    """The worker's batch at the seam: R's retry and A's completion settled, one job claimed
    in the same call. R waits again at priority 1, ahead of B (priority 5)."""
    await backend.enqueue([new_job(q, "R", priority=1), new_job(q, "A", priority=1)])
    await backend.enqueue([new_job(q, "B", priority=5)])
    r, a = await claim_exactly(backend, q, 2)
    assert (r.id, a.id) == ("R", "A")
    answer = await backend.settle_and_claim(
        [Settle(r.claim, Outcome.RETRY, error="boom"), Settle(a.claim, Outcome.COMPLETE)],
        [q],
        "w",
        1,
    )
    assert answer.applied == [True, True] and answer.batch is not None
    [again] = await the_rest(backend, q, answer.batch.jobs, 1)
    assert (again.id, again.attempts) == ("R", 2)
    assert await state(backend, q, "B") is JobState.WAITING


async def test_a_released_job_is_claimed_by_the_claim_batched_with_it(
    backend: Backend, q: str
) -> None:
    """A release (a worker giving a job back unstarted) keeps the job's place: first in line."""
    await backend.enqueue([new_job(q, "R", priority=1), new_job(q, "B", priority=5)])
    [r] = await claim_exactly(backend, q, 1)
    answer = await backend.settle_and_claim([Settle(r.claim, Outcome.RELEASE)], [q], "w", 1)
    assert answer.applied == [True] and answer.batch is not None
    [again] = await the_rest(backend, q, answer.batch.jobs, 1)
    assert (again.id, again.attempts) == ("R", 1)
    assert await state(backend, q, "B") is JobState.WAITING


async def test_a_delayed_retry_leaves_the_claim_batched_with_it_to_the_others(
    backend: Backend, q: str
) -> None:
    """The other side: a retry with a delay is not eligible yet, so the claim takes B."""
    await backend.enqueue([new_job(q, "R", priority=1), new_job(q, "B", priority=5)])
    [r] = await claim_exactly(backend, q, 1)
    answer = await backend.settle_and_claim(
        [Settle(r.claim, Outcome.RETRY, error="boom", delay=30)], [q], "w", 1
    )
    assert answer.applied == [True] and answer.batch is not None
    [b] = await the_rest(backend, q, answer.batch.jobs, 1)
    assert b.id == "B"
    assert await state(backend, q, "R") is JobState.DELAYED
