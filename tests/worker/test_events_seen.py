"""The events a worker and its maintenance publish reach a subscriber in another handle (as
another process would subscribe): ``job:expired`` for a job whose TTL passed before it started,
``job:stalled`` for a job recovered from a dead claim, then the job's end."""

from __future__ import annotations

import asyncio

from relaymq import Queue, Worker, events
from relaymq.backends.base import Backend
from relaymq.instrumented import Instrumented
from relaymq.job import JobState
from relaymq.testing import FakeClock
from tests import tasks
from tests.conftest import MakeBackend
from tests.support.jobs import get_job, new_job, queue_name
from tests.worker.conftest import FAST


async def _events_until(
    subscription: events.Subscription, queue: str, job_id: str, *wanted: str
) -> list[str]:
    """The names of ``job_id``'s events, until each of ``wanted`` was seen. (Events from two
    sources, here the worker and its maintenance, may arrive in either order.)"""
    seen: list[str] = []
    try:
        async with asyncio.timeout(10):  # the job's events reaching the subscriber
            async for event in subscription:
                if event.queue == queue and event.job_id == job_id:
                    seen.append(event.name)
                    if set(wanted) <= set(seen):
                        return seen
    except TimeoutError:
        pass
    raise AssertionError(f"saw {seen} of job {job_id}, not all of {wanted}")


async def _run(backend: Backend, queue: str) -> tuple[Worker, asyncio.Task[None]]:
    worker = Worker(backend, [queue], settings=FAST)
    running = asyncio.create_task(worker.run())
    return worker, running


async def test_a_job_past_its_ttl_is_announced_expired_and_never_run(
    make_backend: MakeBackend,
) -> None:
    clock = FakeClock()
    backend, observer = await make_backend(clock), await make_backend(clock)
    q = queue_name("ev-exp")
    handle = await Queue(q, backend).add(tasks.add.with_options(ttl=5).call(1, 2))
    clock.advance(6)
    subscription = await Instrumented(observer).subscribe()
    worker, running = await _run(backend, q)
    try:
        seen = await _events_until(subscription, q, handle.id, events.JOB_EXPIRED)
    finally:
        await subscription.aclose()
        worker.stop()
        await running
    assert events.JOB_COMPLETED not in seen and worker.stats.expired == 1
    assert (await handle.job()).state is JobState.EXPIRED


async def test_a_job_recovered_from_a_dead_claim_is_announced_stalled_then_runs(
    make_backend: MakeBackend,
) -> None:
    clock = FakeClock()
    backend, observer = await make_backend(clock), await make_backend(clock)
    q = queue_name("ev-stall")
    [stored] = await backend.enqueue(
        [new_job(q, task=tasks.add.name, payload=b'{"args":[2,3],"kwargs":{}}')]
    )
    [dead] = (await backend.claim([q], "a-worker-that-died", 1)).jobs
    clock.advance(FAST.stalled_threshold + 1)
    subscription = await Instrumented(observer).subscribe()
    worker, running = await _run(backend, q)
    try:
        await _events_until(subscription, q, stored.id, events.JOB_STALLED, events.JOB_COMPLETED)
    finally:
        await subscription.aclose()
        worker.stop()
        await running
    done = await get_job(backend, q, stored.id)
    assert done is not None and done.stalls == 1 and done.token > dead.token
