"""Workers write the history the dashboard draws: every applied outcome counted per queue and
minute, written every ``history_flush_interval`` seconds and at shutdown; a write that fails
keeps its counts for the next one."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from relaymq import Queue
from relaymq.backends import connect
from relaymq.errors import BackendError
from relaymq.instrumented import Instrumented
from relaymq.records.store import Outcome, Tally
from relaymq.worker.history import History
from tests import tasks
from tests.redis.server import PrivateRedis
from tests.support.waiting import poll_until
from tests.worker.conftest import RunWorker


def totals(history: list[Tally]) -> tuple[int, int, int]:
    return (
        sum(t.completed for t in history),
        sum(t.retried for t in history),
        sum(t.failed for t in history),
    )


async def test_a_workers_outcomes_reach_the_stored_history(
    queue: Queue, run_worker: RunWorker
) -> None:
    key = uuid.uuid4().hex
    handles = await queue.add_bulk(
        [
            *(tasks.add.call(i, 1) for i in range(3)),
            tasks.fail_once.call(f"{key}-once"),  # a retry, then completed
            tasks.always_fail.call(f"{key}-never"),  # a retry, then failed for good
        ]
    )
    async with run_worker(history_flush_interval=0.1):
        for h in handles[:4]:
            await h.result(timeout=20)

        async def written() -> bool:
            return totals(await queue.history()) == (4, 2, 1)

        await poll_until(written, "the outcomes in the stored history", within=20)


async def test_counts_left_at_shutdown_are_written_then(
    queue: Queue, run_worker: RunWorker
) -> None:
    async with run_worker(history_flush_interval=3600):  # never on its timer in this test
        assert await (await queue.add(tasks.add.call(1, 1))).result(timeout=20) == 2
    assert totals(await queue.history()) == (1, 0, 0)


async def test_history_off_writes_nothing(queue: Queue, run_worker: RunWorker) -> None:
    async with run_worker(history_flush_interval=0):
        await (await queue.add(tasks.add.call(1, 1))).result(timeout=20)
    assert await queue.history() == []


async def test_a_failed_write_keeps_the_counts_for_the_next(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path / "redis")
    server.start()
    backend = await connect(f"{server.url}?prefix=history-down")
    try:
        history = History(Instrumented(backend), interval=1.0)
        for outcome in (Outcome.COMPLETE, Outcome.COMPLETE, Outcome.FAIL, Outcome.CANCEL):
            history.count("emails", outcome)
        server.kill()
        with pytest.raises(BackendError):
            await history.flush()
        server.start()
        await poll_until(_writes(history), "the history written once Redis is back", within=20)
        assert totals(await Queue("emails", backend).history()) == (2, 0, 1)
    finally:
        await backend.close()
        server.kill()


def _writes(history: History) -> Callable[[], Awaitable[bool]]:
    async def wrote() -> bool:
        try:
            await history.flush()
        except BackendError:
            return False
        return True

    return wrote
