"""A worker process frozen (SIGSTOP) mid-job, its connections still open: another worker
recovers the job and completes it within ``stalled_threshold + stalled_check_interval + 2 s``,
on every backend several processes share; when the frozen worker wakes, its claim writes
nothing. (RELIABILITY F11; on RabbitMQ the replacement delivery must not go back to the frozen
worker, which holds its window full.)"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from relaymq import JobState, Queue, Worker
from relaymq.records.store import Outcome, Settle
from tests import tasks
from tests.chaos.test_kill import THRESHOLDS, _lines, start_worker
from tests.support.cases import BackendCase
from tests.support.jobs import queue_name
from tests.support.waiting import watch
from tests.worker.conftest import FAST

SETTINGS = FAST.replace(
    stalled_threshold=float(THRESHOLDS["RELAYMQ_STALLED_THRESHOLD"]),
    heartbeat_interval=float(THRESHOLDS["RELAYMQ_HEARTBEAT_INTERVAL"]),
    stalled_check_interval=float(THRESHOLDS["RELAYMQ_STALLED_CHECK_INTERVAL"]),
)


@pytest.mark.slow
async def test_a_frozen_workers_job_is_completed_elsewhere_in_time(
    shared_case: BackendCase, tmp_path: Path
) -> None:
    assert shared_case.url is not None
    backend = await shared_case.make(None, tmp_path)
    q = queue_name("freeze")
    marker = tmp_path / "marker"
    queue = Queue(q, backend)
    proc = await start_worker(shared_case.url(tmp_path), q, concurrency=1)
    try:
        async with watch(backend) as w:
            handle = await queue.add(tasks.hang_first_attempt.call(str(marker)))
            await w.state(q, handle.id, JobState.ACTIVE, within=30)
            await w.until(lambda: _lines(marker) == ["1"], "the first attempt's side effect")
        first = await handle.job()
        proc.send_signal(signal.SIGSTOP)
        frozen_at = time.monotonic()
        rescuer = Worker(backend, [q], settings=SETTINGS)
        running = asyncio.create_task(rescuer.run())
        try:
            limit = SETTINGS.stalled_threshold + SETTINGS.stalled_check_interval + 2
            assert await handle.result(timeout=limit) == 2  # the second attempt, run here
            elapsed = time.monotonic() - frozen_at
        finally:
            rescuer.stop()
            await running
        done = await handle.job()
        assert (done.state, done.stalls, done.token > first.token) == (JobState.COMPLETED, 1, True)
        assert rescuer.stats.completed == 1, f"completed after {elapsed:.1f}s, not by the rescuer"
        proc.send_signal(signal.SIGCONT)
        # Awake again, the frozen worker's claim can no longer write.
        assert await backend.settle([Settle(first.claim, Outcome.FAIL, error="late")]) == [False]
        assert (await handle.job()).state is JobState.COMPLETED
        assert _lines(marker) == ["1", "2"]
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            await proc.wait()
        await backend.close()
