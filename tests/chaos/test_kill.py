"""A worker process SIGKILLed mid-job; another worker recovers the job after
``stalled_threshold`` and completes it; the dead worker's claim can no longer write."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from relaymq import JobState, Queue, Settings, Worker
from relaymq.backends.base import Backend, Outcome, Settle
from tests import tasks
from tests.support.cases import BackendCase
from tests.support.jobs import queue_name
from tests.support.waiting import watch

ROOT = Path(__file__).resolve().parents[2]
THRESHOLDS = {
    "RELAYMQ_STALLED_THRESHOLD": "1.0",
    "RELAYMQ_HEARTBEAT_INTERVAL": "0.2",
    "RELAYMQ_STALLED_CHECK_INTERVAL": "0.2",
}


async def start_worker(url: str, queue: str, concurrency: int = 2) -> asyncio.subprocess.Process:
    env = {**os.environ, **THRESHOLDS, "PYTHONPATH": str(ROOT), "RELAYMQ_LOG_LEVEL": "WARNING"}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "relaymq", "worker", "tests.tasks", "-q", queue,
        "-c", str(concurrency), "--backend", url, cwd=ROOT, env=env,
    )  # fmt: skip


@pytest.mark.slow
async def test_sigkilled_worker_job_is_recovered_and_completed(
    shared_case: BackendCase, tmp_path: Path
) -> None:
    case = shared_case
    assert case.url is not None
    backend: Backend = await case.make(None, tmp_path)
    try:
        await _kill_and_recover(backend, case.url(tmp_path), tmp_path)
    finally:
        await backend.close()


async def _kill_and_recover(backend: Backend, url: str, tmp_path: Path) -> None:
    q = queue_name("kill")
    marker = tmp_path / "marker"
    queue = Queue(q, backend)
    proc = await start_worker(url, q)
    try:
        async with watch(backend) as w:
            handle = await queue.add(tasks.hang_first_attempt.call(str(marker)))
            await w.state(q, handle.id, JobState.ACTIVE, within=30)
            # the line itself, not the file: the file exists a moment before its line does
            await w.until(lambda: _lines(marker) == ["1"], "the first attempt's side effect")
        first = await handle.job()
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

    settings = Settings(stalled_threshold=1.0, heartbeat_interval=0.2, stalled_check_interval=0.2)
    rescuer = Worker(backend, [q], settings=settings)
    running = asyncio.create_task(rescuer.run())
    try:
        assert await handle.result(timeout=30) == 2
    finally:
        rescuer.stop()
        await running
    done = await handle.job()
    assert (done.state, done.stalls, done.attempts) == (JobState.COMPLETED, 1, 2)
    assert done.token > first.token
    assert _lines(marker) == ["1", "2"]  # two executions, the first explained
    # The dead worker's claim can no longer write.
    assert await backend.settle([Settle(first.claim, Outcome.FAIL, error="late")]) == [False]
    assert (await handle.job()).state is JobState.COMPLETED


def _lines(marker: Path) -> list[str]:
    return marker.read_text().split() if marker.exists() else []
