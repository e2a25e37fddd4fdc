"""The worker on every backend: outcomes, retries, TTL, cancellation, shutdown. Bad input has
its own catalogue: test_bad_input.py."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest

from relaymq import (
    JobCancelledError,
    JobExpiredError,
    JobFailedError,
    JobState,
    Queue,
)
from relaymq.backends.base import Backend
from relaymq.testing import FakeClock
from tests import tasks
from tests.conftest import MakeBackend
from tests.support.jobs import get_job, new_job, remove_job
from tests.support.waiting import poll_until, watch
from tests.worker.conftest import RunWorker


def key() -> str:
    return uuid.uuid4().hex


async def wait_state(
    backend: Backend, queue: str, job_id: str, state: JobState, within: float = 10
) -> None:
    async with watch(backend) as w:
        await w.state(queue, job_id, state, within)


async def test_completes_async_and_plain_functions(queue: Queue, run_worker: RunWorker) -> None:
    async with run_worker():
        h1 = await queue.add(tasks.add.call(2, 3))
        h2 = await queue.add(tasks.multiply.call(4, 5))
        assert await h1.result(timeout=10) == 5
        assert await h2.result(timeout=10) == 20
    job = await h1.job()
    assert (job.state, job.attempts) == (JobState.COMPLETED, 1)


async def test_context_gives_attempt_and_records_progress(
    queue: Queue, run_worker: RunWorker
) -> None:
    async with run_worker():
        handle = await queue.add(tasks.with_context.call("x"))
        result = await handle.result(timeout=10)
    assert result == {"job_id": handle.id, "attempt": 1, "queue": queue.name}


async def test_failure_is_retried_then_succeeds(queue: Queue, run_worker: RunWorker) -> None:
    k = key()
    async with run_worker():
        handle = await queue.add(tasks.fail_once.call(k))
        assert await handle.result(timeout=10) == 2
    job = await handle.job()
    assert job.attempts == 2 and tasks.LEDGER[k] == 2
    assert job.error is not None and "first attempt" in job.error


async def test_exhausted_retries_fail_into_the_dlq(queue: Queue, run_worker: RunWorker) -> None:
    k = key()
    async with run_worker():
        handle = await queue.add(tasks.always_fail.call(k))
        with pytest.raises(JobFailedError, match="always fails"):
            await handle.result(timeout=10)
    assert tasks.LEDGER[k] == 2  # retries=1: two attempts
    assert [j.id for j in await queue.list_jobs(JobState.FAILED)] == [handle.id]


async def test_expired_job_goes_to_the_dlq_without_running(
    backend: Backend,
    clock: FakeClock,
    q: str,
    run_worker: RunWorker,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # ``backend`` (on the test clock) is made before ``run_worker``'s own handle: the case's
    # handles share one state, and the backend's clock is what decides expiry
    queue = Queue(q, backend)
    k = key()
    tasks.gate(k).set()
    handle = await queue.add(tasks.wait_for_gate.with_options(ttl=5).call(k))
    clock.advance(6)  # the TTL passes before any worker claims the job
    async with run_worker(backend=backend):
        with pytest.raises(JobExpiredError):
            await handle.result(timeout=10)
    assert tasks.LEDGER[k] == 0  # the handler never ran
    job = await handle.job()
    assert job.state is JobState.EXPIRED and job.attempts == 1
    assert [j.id for j in await queue.list_jobs(JobState.EXPIRED)] == [handle.id]
    [logged] = [r for r in caplog.records if getattr(r, "job_id", None) == handle.id]
    assert logged.levelno == logging.WARNING and "expired" in logged.getMessage()


async def test_cancelled_waiting_job_never_starts(queue: Queue, run_worker: RunWorker) -> None:
    k = key()
    handle = await queue.add(tasks.wait_for_gate.call(k))
    await queue.cancel(handle.id)
    async with run_worker():
        with pytest.raises(JobCancelledError):
            await handle.result(timeout=10)
        after = await queue.add(tasks.add.call(0, 0))
        await after.result(timeout=10)  # the worker ran later work: it saw and skipped ours
    assert tasks.LEDGER[k] == 0


async def test_cancelling_an_active_job_stops_its_handler(
    queue: Queue, run_worker: RunWorker, caplog: pytest.LogCaptureFixture
) -> None:
    k = key()
    async with run_worker() as worker:
        handle = await queue.add(tasks.wait_for_gate.call(k))
        # the handler running, not the job claimed: cancelled between the claim and the
        # fenced start, a job is never started (a CI run on MongoDB met that window)
        async with asyncio.timeout(10):  # the handler starting
            await tasks.started(k).wait()
        await queue.cancel(handle.id)
        with pytest.raises(JobCancelledError):
            await handle.result(timeout=10)
        async with asyncio.timeout(5):  # the heartbeat telling the worker to stop the handler
            await worker.wait_idle()
    assert tasks.RUNNING[k] == 0 and tasks.LEDGER[k] == 1
    assert (await handle.job()).state is JobState.CANCELLED
    assert worker.stats.cancelled == 1
    [logged] = [r for r in caplog.records if getattr(r, "job_id", None) == handle.id]
    assert logged.levelno == logging.WARNING and "cancelled" in logged.getMessage()


async def test_timeout_counts_as_a_failed_attempt(queue: Queue, run_worker: RunWorker) -> None:
    k = key()
    async with run_worker():
        handle = await queue.add(tasks.too_slow.call(k))
        with pytest.raises(JobFailedError, match="timed out"):
            await handle.result(timeout=10)
    assert tasks.LEDGER[k] == 1


async def test_claims_are_sized_to_free_slots(queue: Queue, run_worker: RunWorker) -> None:
    k = key()
    async with run_worker(concurrency=3), watch(queue.backend) as w:
        handles = await queue.add_bulk([tasks.wait_for_gate.call(k) for _ in range(7)])
        await w.until(lambda: tasks.RUNNING[k] >= 3, "three handlers running")
        counts = await queue.counts()
        assert (counts[JobState.ACTIVE], counts[JobState.WAITING]) == (3, 4)
        tasks.gate(k).set()
        for h in handles:
            await h.result(timeout=10)
    assert tasks.PEAK[k] == 3 and tasks.LEDGER[k] == 7


async def test_jobs_added_one_at_a_time_all_run_once(
    live: Backend, make_backend: MakeBackend, q: str, run_worker: RunWorker
) -> None:
    """Jobs added one call at a time, as web requests add them (from another handle where the
    backend is shared), reach a worker that settles the job before while each arrives: the
    claims made with settles (``settle_and_claim``) and the worker's own claims between them
    leave no job waiting and no slot promised for ever."""
    k = key()
    producer = await make_backend() if live.capabilities.cross_process else live
    queue = Queue(q, producer)
    async with run_worker(concurrency=3) as worker:
        for i in range(100):
            await queue.add(tasks.record_order.call(k, str(i)))
        await worker.until(lambda s: s.completed >= 100, "100 completions", within=30)
    assert sorted(tasks.ORDER[k], key=int) == [str(i) for i in range(100)]


async def test_graceful_shutdown_releases_unfinished_claims(
    queue: Queue, run_worker: RunWorker
) -> None:
    k = key()
    async with run_worker(shutdown_timeout=0.1):
        handle = await queue.add(tasks.wait_for_gate.call(k))
        await wait_state(queue.backend, queue.name, handle.id, JobState.ACTIVE)
    job = await handle.job()
    assert job.state is JobState.WAITING and job.attempts == 0  # runnable again at once
    tasks.gate(k).set()
    async with run_worker():
        assert await handle.result(timeout=10) == k


async def test_stalled_job_of_a_dead_worker_is_recovered_and_completed(
    live: Backend, q: str, run_worker: RunWorker
) -> None:
    await live.enqueue(
        [new_job(q, "orphan", task=tasks.add.name, payload=b'{"args":[20,22],"kwargs":{}}')]
    )
    [job] = (await live.claim([q], "dead-worker", 1)).jobs  # a worker that then died
    async with run_worker():
        await wait_state(live, q, "orphan", JobState.COMPLETED)
    done = await get_job(live, q, "orphan")
    assert done is not None and done.stalls == 1 and done.token == job.token + 1
    assert done.result == b"42"


async def test_lost_claim_stops_the_handler_and_writes_nothing(
    live: Backend, queue: Queue, run_worker: RunWorker
) -> None:
    k = key()
    async with run_worker() as worker:
        handle = await queue.add(tasks.wait_for_gate.call(k))
        await wait_state(live, queue.name, handle.id, JobState.ACTIVE)
        await remove_job(live, queue.name, handle.id)  # the claim is gone from under the worker
        async with asyncio.timeout(5):  # the next heartbeat noticing
            await worker.wait_idle()
    assert await get_job(live, queue.name, handle.id) is None
    assert tasks.RUNNING[k] == 0


async def test_one_worker_serves_several_queues(
    live: Backend, q: str, run_worker: RunWorker
) -> None:
    a, b = Queue(q + "-a", live), Queue(q + "-b", live)
    async with run_worker(queues=[a.name, b.name]):
        ha = await a.add(tasks.add.call(1, 2))
        hb = await b.add(tasks.add.call(3, 4))
        assert (await ha.result(timeout=10), await hb.result(timeout=10)) == (3, 7)


async def test_delayed_job_runs_once_due(queue: Queue, run_worker: RunWorker) -> None:
    async with run_worker():
        handle = await queue.add(tasks.add.with_options(delay=0.3).call(5, 5))
        assert (await handle.job()).state is JobState.DELAYED
        assert await handle.result(timeout=10) == 10


async def test_priority_and_duplicate_job_id(queue: Queue, run_worker: RunWorker) -> None:
    first = await queue.add(tasks.add.with_options(job_id="once").call(1, 1))
    again = await queue.add(tasks.add.with_options(job_id="once").call(2, 2))
    assert (first.duplicate, again.duplicate) == (False, True)
    assert sum((await queue.counts()).values()) == 1
    k = key()
    top = min(200, queue.backend.capabilities.max_priority)
    ordered = [  # enqueued out of order; a one-slot worker must run them by priority, then FIFO
        await queue.add(tasks.record_order.with_options(priority=p).call(k, label))
        for p, label in [(5, "p5-a"), (0, "p0-a"), (top, "top"), (5, "p5-b"), (0, "p0-b")]
    ]
    async with run_worker(concurrency=1):
        assert await again.result(timeout=10) == 2  # the handle of the job that exists
        for handle in ordered:
            await handle.result(timeout=10)
    assert tasks.ORDER[k] == ["p0-a", "p0-b", "p5-a", "p5-b", "top"]


async def test_paused_queue_is_not_worked(queue: Queue, run_worker: RunWorker) -> None:
    await queue.pause()
    async with run_worker() as worker:
        handle = await queue.add(tasks.add.call(9, 9))
        seen = worker.stats.empty_claims
        # two claims made after the job was stored both found nothing: the pause held
        await worker.until(lambda s: s.empty_claims >= seen + 2, "empty claims while paused")
        assert (await handle.job()).state is JobState.WAITING and worker.stats.claimed == 0
        await queue.resume()
        assert await handle.result(timeout=10) == 18


async def test_manual_retry_replays_a_dead_job(queue: Queue, run_worker: RunWorker) -> None:
    k = key()
    async with run_worker():
        handle = await queue.add(tasks.always_fail.call(k))
        with pytest.raises(JobFailedError):
            await handle.result(timeout=10)
        assert await queue.retry_job(handle.id)
        with pytest.raises(JobFailedError):
            await handle.result(timeout=10)
    assert tasks.LEDGER[k] == 4  # two attempts, replayed: two more


async def test_worker_events_reach_subscribers(queue: Queue, run_worker: RunWorker) -> None:
    seen: list[tuple[str, str | None]] = []
    async with watch(queue.backend) as w, run_worker():
        handle = await queue.add(tasks.add.call(1, 2))
        await handle.result(timeout=10)

        async def collect() -> None:
            async for event in w.events:
                assert event.queue == queue.name and event.at > 0
                seen.append((event.name, event.job_id))
                if event.name == "job:completed" and event.job_id == handle.id:
                    return

        await asyncio.wait_for(collect(), 10)
    names = [name for name, job_id in seen if job_id == handle.id]
    # Order holds per publisher: the producer's job:waiting may arrive before or after the
    # worker's events, but the worker's job:active comes before its job:completed.
    assert "job:waiting" in names
    worker_events = [n for n in names if n != "job:waiting"]
    assert worker_events == ["job:active", "job:completed"]


async def test_stop_now_releases_running_jobs_without_waiting(
    queue: Queue, run_worker: RunWorker
) -> None:
    k = key()
    async with run_worker(shutdown_timeout=60) as worker:
        handle = await queue.add(tasks.wait_for_gate.call(k))
        await wait_state(queue.backend, queue.name, handle.id, JobState.ACTIVE)
        worker.stop(now=True)  # the 60 s shutdown_timeout must not be waited out
        async with asyncio.timeout(10):  # the release, far inside the 60 s
            await worker.wait_idle()
    job = await handle.job()
    assert job.state is JobState.WAITING and job.attempts == 0


async def test_plain_functions_run_as_many_at_once_as_the_concurrency(
    queue: Queue, run_worker: RunWorker
) -> None:
    k = key()
    async with run_worker(concurrency=12):  # more than asyncio's default pool (CPU + 4)
        handles = await queue.add_bulk([tasks.meet.call(k, 12) for _ in range(12)])
        # each returns only once all 12 wait on the barrier together (else it breaks in 5 s)
        assert sorted([await h.result(timeout=15) for h in handles]) == list(range(12))


async def test_the_next_attempt_never_starts_while_an_overrunning_thread_runs(
    queue: Queue, run_worker: RunWorker
) -> None:
    k = key()
    async with run_worker():
        handle = await queue.add(tasks.overrun_timeout.call(k, 0.6))  # timeout=0.2
        assert await handle.result(timeout=10) == 2
    spans = {(attempt, what): at for attempt, what, at in tasks.SPANS[k]}
    assert spans[1, "start"] < spans[1, "end"] <= spans[2, "start"]
    job = await handle.job()
    assert job.error is not None and "overran its timeout of 0.2s" in job.error


async def test_shutdown_never_releases_a_job_whose_thread_still_runs(
    queue: Queue, run_worker: RunWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="relaymq.worker")
    k = key()
    async with run_worker(shutdown_timeout=0.1) as worker:
        handle = await queue.add(tasks.block_thread.call(k))
        assert await asyncio.to_thread(tasks.thread_started(k).wait, 10)
        claimed = await handle.job()
        worker.stop()  # past shutdown_timeout the thread still runs: its job stays claimed
        await poll_until(lambda: "waiting for 1 plain handlers" in caplog.text, "the wait")
        job = await handle.job()
        assert (job.state, job.token) == (JobState.ACTIVE, claimed.token)
        assert worker.stopping and worker.stats.released == 0
        before = job.heartbeat_at or 0.0

        async def renewed() -> bool:
            return ((await handle.job()).heartbeat_at or 0.0) > before

        await poll_until(renewed, "a heartbeat renewing the claim while the thread runs")
        tasks.thread_gate(k).set()  # the thread returns: its own outcome is settled
    job = await handle.job()
    assert (job.state, job.attempts, tasks.LEDGER[k]) == (JobState.COMPLETED, 1, 1)


async def test_stop_now_exits_without_releasing_a_job_whose_thread_still_runs(
    queue: Queue, run_worker: RunWorker, caplog: pytest.LogCaptureFixture
) -> None:
    k = key()
    try:
        async with run_worker(shutdown_timeout=60) as worker:
            handle = await queue.add(tasks.block_thread.call(k))
            assert await asyncio.to_thread(tasks.thread_started(k).wait, 10)
            claimed = await handle.job()
            worker.stop(now=True)  # the run_worker exit awaits the worker: it must return
        job = await handle.job()  # still claimed, no longer renewed: recovered as stalled
        assert (job.state, job.token) == (JobState.ACTIVE, claimed.token)
        assert worker.stats.released == 0
        assert "still running in a thread; leaving it claimed" in caplog.text
    finally:
        tasks.thread_gate(k).set()


async def test_progress_of_a_job_shorter_than_a_heartbeat_is_stored(
    queue: Queue, run_worker: RunWorker
) -> None:
    async with run_worker(heartbeat_interval=30, stalled_threshold=120):  # no heartbeat happens
        handle = await queue.add(tasks.with_context.call("quick"))
        await handle.result(timeout=10)
    job = await handle.job()
    assert job.progress is not None
    assert queue.serializer.loads(job.progress) == {"label": "quick", "pct": 50}
