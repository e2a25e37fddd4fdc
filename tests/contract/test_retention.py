"""Retention on every backend: the elected maintenance deletes the finished jobs a queue's
policy no longer keeps, every state by its own window, and nothing else; a purged job's id is
free again, and reading its result says it may have been purged."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from relaymq.backends.base import Backend
from relaymq.errors import ConfigError, JobNotFoundError
from relaymq.instrumented import Instrumented
from relaymq.job import JobState
from relaymq.queue import Queue
from relaymq.records.retention import Retention
from relaymq.records.store import Outcome, Settle
from relaymq.recovery import Maintenance
from relaymq.settings import Settings
from relaymq.testing import FakeClock
from tests.conftest import MakeBackend
from tests.support.jobs import cancel, get_job, new_job

SETTINGS = Settings(stalled_threshold=3600, retention_interval=1e-6)
"""Nothing is stalled here, and every pass is a retention pass."""


async def _maintain(backend: Backend, q: str) -> None:
    await Maintenance(Instrumented(backend), [q], SETTINGS, "retainer").run_once()


async def _finish(backend: Backend, q: str, job_id: str, outcome: Outcome) -> None:
    await backend.enqueue([new_job(q, job_id)])
    [job] = (await backend.claim([q], "w", 1)).jobs
    assert job.id == job_id
    await backend.settle(
        [
            Settle(
                job.claim,
                outcome,
                b"1" if outcome is Outcome.COMPLETE else None,
                error=None if outcome is Outcome.COMPLETE else "boom",
            )
        ]
    )


async def test_finished_jobs_go_after_their_window_and_nothing_else_does(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    queue = Queue(q, backend)
    stored = await queue.set_retention(completed=1, cancelled=1, failed=dt.timedelta(seconds=30))
    assert stored == Retention(completed=1, cancelled=1, failed=30)
    assert await queue.retention() == stored
    await _finish(backend, q, "done", Outcome.COMPLETE)
    await _finish(backend, q, "dead", Outcome.FAIL)
    await backend.enqueue([new_job(q, "gone")])
    assert (await cancel(backend, q, "gone")).name == "CANCELLED"
    await backend.enqueue([new_job(q, "running")])
    [running] = (await backend.claim([q], "w", 1)).jobs
    await backend.enqueue(
        [
            new_job(q, "waiting"),
            new_job(q, "later", delay=3600),
            new_job(q, "blocked", depends_on=("running",)),
        ]
    )
    clock.advance(0.5)
    await _maintain(backend, q)
    assert await get_job(backend, q, "done") is not None  # half its window: kept
    clock.advance(1)
    await _maintain(backend, q)
    assert await get_job(backend, q, "done") is None
    assert await get_job(backend, q, "gone") is None
    assert await get_job(backend, q, "dead") is not None  # the DLQ keeps its own window
    clock.advance(30)
    await _maintain(backend, q)
    assert await get_job(backend, q, "dead") is None
    counts = await backend.counts(q)
    assert {s: n for s, n in counts.items() if n} == {
        JobState.WAITING: 1,
        JobState.DELAYED: 1,
        JobState.ACTIVE: 1,
        JobState.BLOCKED: 1,
    }
    assert running.id == "running"


async def test_a_zero_window_keeps_that_state_for_ever(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    await Queue(q, backend).set_retention(completed=0, failed=1)
    await _finish(backend, q, "done", Outcome.COMPLETE)
    await _finish(backend, q, "dead", Outcome.FAIL)
    clock.advance(400 * 86400)
    await _maintain(backend, q)
    assert await get_job(backend, q, "done") is not None
    assert await get_job(backend, q, "dead") is None


async def test_a_purged_job_frees_its_id_and_its_read_names_retention(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    queue = Queue(q, backend)
    await queue.set_retention(completed=1)
    await _finish(backend, q, "once", Outcome.COMPLETE)
    clock.advance(2)
    await _maintain(backend, q)
    with pytest.raises(JobNotFoundError, match="retention"):
        await queue.handle("once").result(timeout=5)
    [again] = await backend.enqueue([new_job(q, "once")])
    assert not again.duplicate  # the id is free again
    stored = await get_job(backend, q, "once")
    assert stored is not None and stored.state is JobState.WAITING


async def test_max_finished_keeps_the_newest_of_each_state(
    make_backend: MakeBackend, q: str
) -> None:
    # The count is applied through clean's age on this process's clock: a test clock that
    # ends near the real time, with finishes ten seconds apart.
    clock = FakeClock(time.time() - 100)
    backend = await make_backend(clock)
    await Queue(q, backend).set_retention(completed=0, max_finished=2)
    for i in range(5):
        await _finish(backend, q, f"c{i}", Outcome.COMPLETE)
        clock.advance(10)
    await _finish(backend, q, "dead", Outcome.FAIL)
    clock.now = time.time() + 1  # a backend clock one second ahead: within the gaps
    await _maintain(backend, q)
    kept = [j.id for j in await backend.list_jobs(q, JobState.COMPLETED)]
    assert kept == ["c3", "c4"]
    assert await get_job(backend, q, "dead") is not None  # one, within its count


async def test_without_a_policy_a_queue_has_the_defaults(backend: Backend, q: str) -> None:
    queue = Queue(q, backend)
    expected = Retention() if backend.retention is None else Retention(*[backend.retention] * 3)
    assert await queue.retention() == expected
    await queue.set_retention(completed=5)
    await queue.obliterate()  # forgets the queue's policy with the queue
    assert await queue.retention() == expected


@pytest.mark.parametrize(
    "bad",
    [
        {"completed": -1},
        {"failed": dt.timedelta(seconds=-5)},
        {"cancelled": "24h"},
        {"completed": True},
        {"completed": float("nan")},
        {"failed": float("inf")},
        {"max_finished": 0},
        {"max_finished": 2.5},
    ],
)
async def test_bad_retention_is_refused_and_nothing_is_stored(
    backend: Backend, q: str, bad: dict[str, object]
) -> None:
    queue = Queue(q, backend)
    before = await queue.retention()
    with pytest.raises(ConfigError, match="retention"):
        await queue.set_retention(**bad)  # type: ignore[arg-type]
    assert await queue.retention() == before
