"""Sequences with running workers, on every backend that keeps them: two workers of several
slots each run the jobs of each sequence one at a time, in enqueue order, and jobs of other
sequences beside them."""

from __future__ import annotations

import time

import pytest

from relaymq import Queue
from tests import tasks
from tests.support.jobs import queue_name
from tests.worker.conftest import RunWorker


async def test_two_workers_run_each_sequence_in_order_one_job_at_a_time(
    queue: Queue, run_worker: RunWorker
) -> None:
    if not queue.ops.backend.capabilities.sequences:
        pytest.skip("the backend does not keep sequences (it refuses them)")
    keys = [queue_name("seq") for _ in range(3)]
    handles = []
    for n in range(8):  # interleaved: s0-0, s1-0, s2-0, s0-1, ...
        for key in keys:
            step = tasks.sequence_step.with_options(queue=queue.name, sequence=key)
            handles.append(await queue.add(step.call(key, f"{n}")))
    started = time.monotonic()
    async with run_worker(concurrency=4), run_worker(concurrency=4):
        for h in handles:
            await h.result(timeout=30)
    elapsed = time.monotonic() - started
    for key in keys:
        assert tasks.ORDER[key] == [f"{n}" for n in range(8)]
        assert tasks.PEAK[key] == 1
    # A worker that ends a sequence's job takes the next at once or within a short poll.
    assert elapsed < 10, elapsed
