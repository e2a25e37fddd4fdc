"""A worker process SIGKILLed mid-job; another worker recovers the job after
``stalled_threshold`` and completes it; the dead worker's claim can no longer write."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from relaymq import JobHandle, JobState, Queue, Settings, Worker
from relaymq.backends.base import Backend
from relaymq.records.store import Outcome, Settle
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


async def start_worker(
    url: str, queue: str, concurrency: int = 2, heartbeat_interval: float | None = None
) -> asyncio.subprocess.Process:
    """A worker process on the short thresholds (``heartbeat_interval``: its own, with a
    stalled threshold twice as long, as the settings require)."""
    env = {**os.environ, **THRESHOLDS, "PYTHONPATH": str(ROOT), "RELAYMQ_LOG_LEVEL": "WARNING"}
    if heartbeat_interval is not None:
        env["RELAYMQ_HEARTBEAT_INTERVAL"] = str(heartbeat_interval)
        env["RELAYMQ_STALLED_THRESHOLD"] = str(2 * heartbeat_interval)
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relaymq",
        "worker",
        "tests.tasks",
        "-q",
        queue,
        "-c",
        str(concurrency),
        "--backend",
        url,
        cwd=ROOT,
        env=env,
    )


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

    assert await rescued(backend, q, handle) == 2
    done = await handle.job()
    assert (done.state, done.stalls, done.attempts) == (JobState.COMPLETED, 1, 2)
    assert done.token > first.token
    assert _lines(marker) == ["1", "2"]  # two executions, the first explained
    # The dead worker's claim can no longer write.
    assert await backend.settle([Settle(first.claim, Outcome.FAIL, error="late")]) == [False]
    assert (await handle.job()).state is JobState.COMPLETED


RESCUE = Settings(stalled_threshold=1.0, heartbeat_interval=0.2, stalled_check_interval=0.2)


async def rescued(backend: Backend, q: str, handle: JobHandle[Any], within: float = 30) -> Any:
    """Run a worker on ``q`` (short thresholds: it recovers what stalled) until ``handle``'s
    job ends; its result."""
    rescuer = Worker(backend, [q], settings=RESCUE)
    running = asyncio.create_task(rescuer.run())
    try:
        return await handle.result(timeout=within)
    finally:
        rescuer.stop()
        await running


def _lines(marker: Path) -> list[str]:
    return marker.read_text().split() if marker.exists() else []


@pytest.mark.slow
async def test_a_worker_killed_before_its_first_heartbeat_is_recovered_from_its_claim(
    shared_case: BackendCase, tmp_path: Path
) -> None:
    """Killed right after the claim, before any heartbeat: only ``claimed_at`` says how old the
    claim is, and recovery must go by it (the spec's active-claim timestamp)."""
    case = shared_case
    assert case.url is not None
    backend: Backend = await case.make(None, tmp_path)
    q = queue_name("kill-early")
    marker = tmp_path / "marker"
    queue = Queue(q, backend)
    # heartbeats far apart: the kill comes long before the first one
    proc = await start_worker(case.url(tmp_path), q, heartbeat_interval=30.0)
    try:
        async with watch(backend) as w:
            handle = await queue.add(tasks.hang_first_attempt.call(str(marker)))
            await w.until(lambda: _lines(marker) == ["1"], "the first attempt's side effect")
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        first = await handle.job()
        # no heartbeat of the 30 s timer came: the claim set both times, and at most the fenced
        # start check renewed it once when the handler started late (START_CHECK_AFTER, which a
        # loaded machine passes)
        assert first.state is JobState.ACTIVE, first
        assert first.claimed_at is not None and first.heartbeat_at is not None, first
        assert 0 <= first.heartbeat_at - first.claimed_at < 5.0, first
        assert await rescued(backend, q, handle) == 2
        done = await handle.job()
        assert (done.state, done.stalls, done.token > first.token) == (JobState.COMPLETED, 1, True)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await backend.close()
