"""A handler that blocks the worker's event loop keeps its job: heartbeats go on from the loop
watch's own thread and handle, the worker warns naming the job, and stalled recovery running
elsewhere meanwhile finds nothing to take. Past ``max_blocked`` (or with the watch off) the
same recovery does take the job: the control that shows these tests can fail."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from pathlib import Path

import pytest

from relaymq import Queue
from relaymq.backends import from_url
from tests import tasks
from tests.support.cases import BackendCase
from tests.support.jobs import get_job
from tests.worker.conftest import RunWorker

SETTINGS = {"heartbeat_interval": 0.1, "stalled_threshold": 0.6}
BLOCK = 1.5
"""Seconds the handler blocks the loop: two and a half stalled thresholds."""


class Rescuer:
    """Another party, on its own thread and event loop with its own backend (from ``url``):
    once the handler has started, it runs stalled recovery on the queue every 50 ms for
    ``BLOCK`` seconds, then lets the handler return. Without a URL (in-memory state, which no
    other party can reach) it only waits."""

    def __init__(self, url: str | None, queue: str, key: str) -> None:
        self.url = url
        self.queue = queue
        self.key = key
        self.requeued: list[str] = []
        self.blocked = (float("inf"), float("inf"))
        """Wall-clock times (as log records' ``created``) the handler held the loop between."""
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="test-rescuer")

    def __enter__(self) -> Rescuer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        tasks.thread_gate(self.key).set()  # never leave the handler blocked
        self._thread.join(30)
        assert not self._thread.is_alive(), "the rescuer did not end within 30 s"
        if self.error is not None:
            raise self.error

    def _main(self) -> None:
        try:
            asyncio.run(self._rescue())
        except BaseException as e:
            self.error = e
        finally:
            tasks.thread_gate(self.key).set()
            self.blocked = (self.blocked[0], time.time())

    async def _rescue(self) -> None:
        assert tasks.thread_started(self.key).wait(15), "the blocking handler never started"
        self.blocked = (time.time(), float("inf"))
        end = time.monotonic() + BLOCK
        if self.url is None:
            await asyncio.sleep(BLOCK)  # the outage itself: the loop stays blocked this long
            return
        async with from_url(self.url) as other:
            while time.monotonic() < end:
                done = await other.recover_stalled(
                    self.queue, SETTINGS["stalled_threshold"], max_stalled=5
                )
                self.requeued += done.requeued
                await asyncio.sleep(0.05)


def warnings_about(
    caplog: pytest.LogCaptureFixture, text: str, between: tuple[float, float] | None = None
) -> list[str]:
    """The messages logged with ``text`` in them, ``between`` two wall-clock times if given."""
    low, high = between or (-float("inf"), float("inf"))
    return [
        r.getMessage()
        for r in caplog.records
        if text in r.getMessage() and low <= r.created <= high
    ]


def url_of(case: BackendCase, tmp_path: Path) -> str | None:
    return case.url(tmp_path) if case.url is not None else None


async def test_a_handler_blocking_the_loop_keeps_its_job(
    queue: Queue,
    run_worker: RunWorker,
    caplog: pytest.LogCaptureFixture,
    case: BackendCase,
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.WARNING, logger="relaymq.worker")
    key = uuid.uuid4().hex
    async with run_worker(**SETTINGS) as worker:
        with Rescuer(url_of(case, tmp_path), queue.name, key) as rescuer:
            handle = await queue.add(tasks.block_loop.call(key))
            assert await handle.result(timeout=20) == key
        await worker.until(lambda s: s.loop_blocked >= 1, "the loop running again")
    assert rescuer.requeued == []
    job = await get_job(queue.backend, queue.name, handle.id)
    assert job is not None and job.attempts == 1 and job.stalls == 0
    assert tasks.LEDGER[key] == 1
    # One warning names the job that blocked; a loaded machine may stall the loop once more.
    warnings = warnings_about(caplog, "event loop is blocked")
    assert any(
        f"job {queue.name}/{handle.id}" in w and tasks.block_loop.name in w for w in warnings
    ), warnings
    assert worker.stats.loop_blocked >= 1 and worker.stats.lost == 0
    if queue.backend.heartbeat_handle() is not None:
        assert worker._watch is not None and worker._watch.renewed >= 1


async def test_past_max_blocked_the_job_is_recovered(
    queue: Queue,
    run_worker: RunWorker,
    caplog: pytest.LogCaptureFixture,
    case: BackendCase,
    tmp_path: Path,
) -> None:
    url = url_of(case, tmp_path)
    if url is None:
        pytest.skip("in-memory state: no other party can run recovery beside a blocked loop")
    caplog.set_level(logging.WARNING, logger="relaymq.worker")
    key = uuid.uuid4().hex
    async with run_worker(max_blocked=0.3, **SETTINGS) as worker:
        with Rescuer(url, queue.name, key) as rescuer:
            handle = await queue.add(tasks.block_loop.call(key))
            assert await handle.result(timeout=20) == key  # its second run, not blocked
    assert rescuer.requeued == [handle.id]
    assert tasks.LEDGER[key] == 2 and worker.stats.lost == 1
    # One error for the handler's block, however many ticks it lasted; a loaded machine may
    # stall the loop past max_blocked once more outside it.
    assert len(warnings_about(caplog, "past max_blocked", rescuer.blocked)) == 1
