"""A claim whose answer comes back late (a network that held the reply up: the partition soak,
tests/hosts, found it) is as old as the call that made it, not as the answer: the worker checks
it with the backend before starting the job, and a job taken from it meanwhile never runs there
(RELIABILITY F12)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

from relaymq import Queue
from relaymq.backends.base import Backend
from relaymq.records.store import ClaimBatch
from tests import tasks
from tests.conftest import MakeBackend
from tests.support.jobs import get_job, remove_job
from tests.worker.conftest import FAST, RunWorker


async def test_a_claim_answered_late_is_checked_and_a_lost_one_never_runs(
    live: Backend, queue: Queue, run_worker: RunWorker, make_backend: MakeBackend
) -> None:
    k = uuid.uuid4().hex
    held_up = await make_backend()  # the worker's own connection, whose claim replies come late
    claim = held_up.claim
    answered = asyncio.Event()

    async def late(queues: Sequence[str], worker_id: str, limit: int) -> ClaimBatch:
        batch = await claim(queues, worker_id, limit)
        if batch.jobs and not answered.is_set():
            for job in batch.jobs:  # taken from the worker while its reply is on the way
                await remove_job(live, job.queue, job.id)
            await asyncio.sleep(FAST.heartbeat_interval * 3)  # the reply held up: the fault
            answered.set()
        return batch

    held_up.claim = late  # type: ignore[method-assign]
    handle = await queue.add(tasks.record_order.call(k, "ran"))
    async with run_worker(held_up) as worker:
        async with asyncio.timeout(10):  # the late reply reaching the worker
            await answered.wait()
        async with asyncio.timeout(10):  # the worker done with the job it was handed
            await worker.wait_idle()
    assert k not in tasks.ORDER, "a job whose claim was lost before its reply came ran"
    assert await get_job(live, queue.name, handle.id) is None
