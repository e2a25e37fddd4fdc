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
from relaymq.job import Job, JobState
from relaymq.records.store import Outcome, Settle, Tally, percentile
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
        job = Job("emails", "j", "app:send", b"{}", JobState.ACTIVE, attempts=2)
        for outcome in (Outcome.COMPLETE, Outcome.COMPLETE, Outcome.FAIL, Outcome.CANCEL):
            history.count(job, Settle(job.claim, outcome, ran_for=0.03))
        server.kill()
        with pytest.raises(BackendError):
            await history.flush()
        server.start()
        await poll_until(_writes(history), "the history written once Redis is back", within=20)
        [written] = await Queue("emails", backend).history()
        assert (written.task, totals([written])) == ("app:send", (2, 0, 1))
        assert percentile(written.run_times, 0.5) == pytest.approx(0.03, abs=0.02)
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


async def test_a_worker_writes_each_attempt_and_its_tasks_durations(
    queue: Queue, run_worker: RunWorker
) -> None:
    key = uuid.uuid4().hex
    once, plain = await queue.add_bulk([tasks.fail_once.call(f"{key}-once"), tasks.add.call(1, 2)])
    async with run_worker(history_flush_interval=3600, attempt_history=5):
        await once.result(timeout=20)
        await plain.result(timeout=20)
    job = await queue.get_job(once.id)
    assert job is not None
    assert [(a.attempt, a.outcome) for a in job.attempt_history] == [
        (1, Outcome.RETRY),
        (2, Outcome.COMPLETE),
    ]
    first, second = job.attempt_history
    assert first.error is not None and first.error.endswith("-once fails\n")
    assert first.ran_for is not None and second.ran_for is not None and second.error is None
    assert first.worker == second.worker and first.started_at is not None
    assert first.started_at <= first.ended_at <= (second.started_at or 0) <= second.ended_at
    tallies = await queue.history()  # written at shutdown; per minute (the two runs of
    # fail_once can fall in two), so summed over the minutes

    def total(task: str, field: str) -> int:
        return sum(sum(getattr(t, field)) for t in tallies if t.task == task)

    assert total("tests.tasks:fail_once", "run_times") == 2
    assert total("tests.tasks:fail_once", "pickups") == 1  # the first attempt only
    assert total("tests.tasks:add", "run_times") == 1


async def test_attempt_history_0_keeps_none(queue: Queue, run_worker: RunWorker) -> None:
    handle = await queue.add(tasks.add.call(1, 1))
    async with run_worker(attempt_history=0):
        await handle.result(timeout=20)
    job = await queue.get_job(handle.id)
    assert job is not None and job.attempt_history == ()
