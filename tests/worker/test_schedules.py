"""Schedules in running workers: each worker stores the code-defined schedules of its queues
when it starts, one of them is elected to fire, and every tick becomes one job that runs."""

from __future__ import annotations

import itertools
from datetime import datetime

from relaymq import Queue, Schedules, schedule
from relaymq.app import default_app
from relaymq.backends.base import Backend
from relaymq.job import JobState
from tests import tasks
from tests.support.waiting import poll_until
from tests.worker.conftest import RunWorker

EVERY = 0.3


def tick_of(job_id: str) -> float:
    return datetime.fromisoformat(job_id.rpartition("@")[2].replace("Z", "+00:00")).timestamp()


async def test_two_workers_store_a_code_defined_schedule_and_run_each_tick_once(
    live: Backend, queue: Queue, q: str, run_worker: RunWorker
) -> None:
    s = schedule(tasks.add, id=f"{q}-tick", every=EVERY, args=(1, 2), queue=q)
    try:
        # A stall threshold no pause of a loaded server reaches: a stalled tick runs again, as
        # it may (at least once), which is not what this test is about (seen on the MongoDB
        # test server, whose heartbeats missed a 1 s threshold under CI's load).
        calm = {"stalled_threshold": 30.0, "heartbeat_interval": 1.0}
        async with run_worker(**calm), run_worker(**calm):

            async def six_ran() -> bool:
                return len(await queue.list_jobs(JobState.COMPLETED, limit=100)) >= 6

            # Within the lease of a worker another test may have left behind (10 s).
            await poll_until(six_ran, "six ticks of the schedule run", within=30)
            [state] = [x for x in await Schedules(live).list() if x.id == s.id]
            assert state.schedule == s and not state.paused
        done = await queue.list_jobs(JobState.COMPLETED, limit=1000)
        assert {j.attempts for j in done} == {1} and {j.result_value() for j in done} == {3}
        left = await queue.list_jobs(JobState.WAITING, limit=1000)  # fired as the workers left
        ticks = sorted(tick_of(j.id) for j in done + left)
        gaps = {round(b - a, 3) for a, b in itertools.pairwise(ticks)}
        assert gaps == {EVERY}  # every tick from the first on, none twice, none lost
    finally:
        default_app().schedules.pop(s.id, None)
        await Schedules(live).remove(s.id)
