"""A heartbeat that gets no answer (its connection hangs: a network cut that TCP has not given
up on, the partition soak's ``blip``) does not hold up the next: after its deadline the next
round goes out at once, on another call; the claims stay renewed, nothing is recovered, the job
runs once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

from relaymq import JobState, Queue
from relaymq.backends.base import Backend
from relaymq.records.store import Beat, BeatResult
from tests import tasks
from tests.conftest import MakeBackend
from tests.support.jobs import get_job
from tests.worker.conftest import FAST, RunWorker


async def test_an_unanswered_heartbeat_does_not_hold_up_the_next(
    live: Backend, queue: Queue, run_worker: RunWorker, make_backend: MakeBackend
) -> None:
    k = uuid.uuid4().hex
    hanging = await make_backend()  # the worker's own connection, one of whose beats hangs
    heartbeat = hanging.heartbeat
    calls = 0
    renewed = asyncio.Event()
    enough = round(3 * FAST.stalled_threshold / FAST.heartbeat_interval)

    async def first_hangs(beats: Sequence[Beat]) -> list[BeatResult]:
        nonlocal calls
        if tasks.started(k).is_set():  # the heartbeats' own (the start check came before)
            calls += 1
            if calls == 1:
                await asyncio.Event().wait()  # no answer, ever: only a cancellation ends it
            if calls >= enough:
                renewed.set()
        return await heartbeat(beats)

    hanging.heartbeat = first_hangs  # type: ignore[method-assign]
    handle = await queue.add(tasks.wait_for_gate.call(k))
    async with run_worker(hanging):
        async with asyncio.timeout(10):
            await tasks.started(k).wait()
        try:
            # 3 thresholds' worth of heartbeats after it; a loaded MongoDB test server
            # answered 25 of them in 10 s, so the deadline is wider than the beats need
            async with asyncio.timeout(30):
                await renewed.wait()
        except TimeoutError:
            raise AssertionError(
                f"{calls} heartbeats: the first, unanswered, held up the rest"
            ) from None
        tasks.gate(k).set()
        assert await handle.result(timeout=10) == k
    job = await get_job(live, queue.name, handle.id)
    assert job is not None and job.state is JobState.COMPLETED
    assert (job.attempts, job.stalls, tasks.LEDGER[k]) == (1, 0, 1)
