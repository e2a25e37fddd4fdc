"""An outcome the backend refuses for good (MongoDB: a document over its 16 MiB limit, when a
user set ``max_result_bytes`` above it) fails the attempt with the refusal as its reason,
retried by the task's policy; it is never written again and again while the job stays active
(RELIABILITY: every attempt ends in an outcome). The other outcomes of the same batch are
written as they are.

The MongoDB test server does not enforce 16 MiB itself, so the refusal here is the driver's
own, for a result over its 48 MB message limit: a real write of a real document, refused."""

from __future__ import annotations

import asyncio

import pytest

from relaymq import JobFailedError, JobState, Queue, Worker, task
from relaymq.backends.base import Backend
from relaymq.instrumented import Instrumented
from relaymq.records.store import Outcome, Settle
from relaymq.worker.running import Claims, RunningJob
from relaymq.worker.settling import Settler
from tests.support.jobs import get_job, new_job, queue_name
from tests.support.notes import Notes
from tests.worker.conftest import FAST

HUGE = 50 * 1024 * 1024
"""Over the driver's 48 MB message limit: refused before it reaches the server."""


@task(queue="tests", retries=1, backoff=0.01)
async def huge_result() -> str:
    return "x" * HUGE


async def test_a_result_the_backend_refuses_fails_the_attempt_with_the_reason(
    backend: Backend,
) -> None:
    q = queue_name("refused")
    queue = Queue(q, backend, settings=FAST)
    worker = Worker(backend, [q], settings=FAST.replace(max_result_bytes=64 * 1024 * 1024))
    running = asyncio.create_task(worker.run())
    try:
        handle = await queue.add(huge_result.call())
        with pytest.raises(JobFailedError, match="over MongoDB's document size limit"):
            await handle.result(timeout=30)
    finally:
        worker.stop()
        async with asyncio.timeout(30):  # the worker finishing its graceful shutdown
            await running
    job = await handle.job()
    assert job.state is JobState.FAILED and job.result is None
    assert job.attempts == 2  # retried by the task's policy (retries=1), then failed
    assert job.error is not None and "refused" in job.error


async def test_a_refused_outcome_does_not_hold_up_the_others_of_its_batch(
    backend: Backend,
) -> None:
    q = queue_name("refused")
    await backend.enqueue(
        [
            new_job(q, "small"),
            new_job(q, "huge"),
            new_job(q, "huge-again", max_attempts=2),
        ]
    )
    jobs = (await backend.claim([q], "w", 3)).jobs
    assert len(jobs) == 3
    claims, recorded = Claims(), []
    settler = Settler(
        Instrumented(backend), claims, Notes(lambda r, s, ok: recorded.append((r, ok)))
    )
    running: list[RunningJob] = []
    for job in jobs:
        r = claims.add(job)
        claims.handler_ended(r)
        running.append(r)
        result = b'"small"' if job.id == "small" else b'"' + b"x" * HUGE + b'"'
        settler.add(r, Settle(r.claim, Outcome.COMPLETE, result=result))
    async with asyncio.timeout(60):  # the batch, then each outcome alone, written
        await settler.flush()
    assert len(settler) == 0 and len(claims) == 0
    assert sorted((r.job.id, ok) for r, ok in recorded) == [
        ("huge", True),
        ("huge-again", True),
        ("small", True),
    ]
    small = await get_job(backend, q, "small")
    assert small is not None and small.state is JobState.COMPLETED and small.result == b'"small"'
    huge = await get_job(backend, q, "huge")  # its only attempt: failed for good
    assert huge is not None and huge.state is JobState.FAILED and huge.result is None
    assert huge.error is not None and "over MongoDB's document size limit" in huge.error
    again = await get_job(backend, q, "huge-again")  # one attempt left: retried
    assert again is not None and again.state in (JobState.DELAYED, JobState.WAITING)
    assert again.error is not None and "over MongoDB's document size limit" in again.error
