"""What the worker logs: one line per outcome (with the job's fields for a JSON formatter) and
paused queues, once each."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest

from relaymq import JobFailedError, Queue
from relaymq.worker import worker as worker_module
from tests import tasks
from tests.support.jobs import remove_job
from tests.worker.conftest import RunWorker


def about(caplog: pytest.LogCaptureFixture, job_id: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "job_id", None) == job_id]


async def test_each_failure_retry_and_final_failure_is_logged_with_the_job_fields(
    queue: Queue, run_worker: RunWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="relaymq.worker")
    async with run_worker():
        handle = await queue.add(tasks.always_fail.call(uuid.uuid4().hex))  # retries=1
        with pytest.raises(JobFailedError):
            await handle.result(timeout=10)
        done = await queue.add(tasks.add.call(1, 2))
        await done.result(timeout=10)
    records = about(caplog, handle.id)
    fields = {(r.task, r.queue) for r in records}  # type: ignore[attr-defined]
    assert fields == {(tasks.always_fail.name, queue.name)}
    [retry] = [r for r in records if r.levelno == logging.WARNING]
    [final] = [r for r in records if r.levelno == logging.ERROR]
    assert retry.attempt == 1 and "retrying" in retry.getMessage()  # type: ignore[attr-defined]
    assert "ValueError" in retry.getMessage()
    assert final.attempt == 2 and "DLQ" in final.getMessage()  # type: ignore[attr-defined]
    assert "Traceback" in final.getMessage() and "always fails" in final.getMessage()
    ok = [r.getMessage() for r in about(caplog, done.id) if r.levelno == logging.DEBUG]
    assert any("started" in m for m in ok) and any("completed" in m for m in ok)


async def test_a_lost_claim_is_logged(
    queue: Queue, run_worker: RunWorker, caplog: pytest.LogCaptureFixture
) -> None:
    k = uuid.uuid4().hex
    async with run_worker() as worker:
        handle = await queue.add(tasks.wait_for_gate.call(k))
        # the handler running: removed between the claim and the fenced start, the job is
        # never started (nothing to stop, no "lost the claim"), as a CI run once met
        async with asyncio.timeout(10):  # the handler starting
            await tasks.started(k).wait()
        await remove_job(queue.backend, queue.name, handle.id)
        await worker.wait_idle()  # the next heartbeat stops the handler
    [lost] = [r for r in about(caplog, handle.id) if "lost the claim" in r.getMessage()]
    assert lost.levelno == logging.WARNING and lost.attempt == 1  # type: ignore[attr-defined]


async def test_a_paused_queue_is_logged_at_start_and_when_resumed(
    queue: Queue, run_worker: RunWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="relaymq.worker")
    await queue.pause()
    async with run_worker():
        assert f"queue {queue.name} is paused" in caplog.text  # before the worker claims
        await queue.resume()
        handle = await queue.add(tasks.add.call(1, 1))
        assert await handle.result(timeout=10) == 2
        assert f"queue {queue.name} was resumed" in caplog.text
    assert caplog.text.count(f"queue {queue.name} is paused") == 1


async def test_a_queue_paused_while_the_worker_idles_is_logged_once(
    queue: Queue,
    run_worker: RunWorker,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_module, "PAUSE_CHECK_INTERVAL", 0.0)
    async with run_worker() as worker:
        await queue.pause()
        seen = worker.stats.empty_claims
        await worker.until(lambda s: s.empty_claims >= seen + 3, "empty claims while paused")
    assert caplog.text.count(f"queue {queue.name} is paused") == 1
