"""The worker's pieces on the in-memory backend and a test clock, without a running worker: the
rule linking running jobs and held claims, batched settling, heartbeats, the thread pool."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from concurrent.futures import CancelledError
from typing import Any

import pytest

from relaymq import events
from relaymq.backends.memory import InMemoryBackend
from relaymq.errors import BackendUnavailableError
from relaymq.instrumented import Instrumented
from relaymq.job import Job, JobState
from relaymq.records.store import Outcome, Settle
from relaymq.task import JobContext
from relaymq.testing import FakeClock
from relaymq.worker.heartbeats import Heartbeats
from relaymq.worker.running import Claims, RunningJob, StopReason
from relaymq.worker.settling import Settler
from relaymq.worker.threads import ThreadPool
from tests.support.jobs import cancel, get_job, new_job, remove_job
from tests.support.notes import Notes


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def backend(clock: FakeClock) -> InMemoryBackend:
    return InMemoryBackend(clock=clock)


async def claim(backend: InMemoryBackend, n: int, queue: str = "q") -> list[Job]:
    await backend.enqueue([new_job(queue) for _ in range(n)])
    return (await backend.claim([queue], "w1", n)).jobs


async def noop() -> None:
    pass


def active(job_id: str, token: int = 1) -> Job:
    return Job("q", job_id, "t", b"", JobState.ACTIVE, token=token, claimed_at=float(token))


def test_running_jobs_are_a_subset_of_held_claims() -> None:
    claims = Claims()
    a, b = claims.add(active("a")), claims.add(active("b"))
    assert (claims.running, len(claims), claims.idle.is_set()) == (2, 2, False)
    claims.handler_ended(a)  # a's outcome waits to be settled: still held, no slot
    claims.handler_ended(a)  # twice is once
    assert (claims.running, len(claims), claims.slot_free.is_set()) == (1, 2, True)
    assert claims.running_jobs() == [b] and claims.holds(a)
    claims.drop(b)  # lost: no longer held, and its slot is free
    assert (claims.running, len(claims), claims.idle.is_set()) == (0, 1, True)
    claims.drop(a)
    assert len(claims) == 0 and not claims.holds(a)


def test_the_same_job_claimed_again_is_a_second_claim() -> None:
    """This worker's first claim was recovered as stalled and the job came back to it."""
    claims = Claims()
    old, new = claims.add(active("a", token=1)), claims.add(active("a", token=2))
    assert (claims.running, len(claims)) == (2, 2)
    claims.drop(old)  # the stale claim's end leaves the new claim held
    assert claims.holds(new) and not claims.holds(old) and claims.to_renew() == [new]
    assert claims.running == 1


def test_stop_keeps_the_first_reason_and_marks_the_context() -> None:
    job = active("a")
    r = RunningJob(job, job.claim)
    r.ctx = JobContext("a", "q", "t", 1, lambda value: None)
    r.stop(StopReason.CANCELLED)
    r.stop(StopReason.SHUTDOWN)  # a shutdown after the cancel: the cancel is acknowledged
    assert r.stop_reason is StopReason.CANCELLED and r.ctx.cancelled


async def test_a_failed_settle_keeps_every_outcome_for_the_next_try(
    backend: InMemoryBackend,
) -> None:
    jobs = await claim(backend, 2)
    claims, recorded = Claims(), []
    settler = Settler(
        Instrumented(backend), claims, Notes(lambda r, s, ok: recorded.append((r, ok)))
    )
    running = [claims.add(j) for j in jobs]
    original, calls = backend.settle, 0

    async def flaky(settles: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise BackendUnavailableError("the server went away")
        return await original(settles)

    backend.settle = flaky  # type: ignore[method-assign]
    for r in running:
        claims.handler_ended(r)
        settler.add(r, Settle(r.claim, Outcome.COMPLETE, b"1"))
    assert all(r.settling for r in running) and claims.to_renew() == running
    with pytest.raises(BackendUnavailableError):
        await settler.flush()
    assert len(settler) == 2 and len(claims) == 2  # kept, still held
    await settler.flush()
    assert len(settler) == 0 and len(claims) == 0
    assert [ok for _, ok in recorded] == [True, True]
    for j in jobs:
        assert (await get_job(backend, "q", j.id)).state is JobState.COMPLETED  # type: ignore[union-attr]


async def test_a_settle_of_a_lost_claim_is_recorded_as_not_applied(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    [job] = await claim(backend, 1)
    claims, recorded = Claims(), []
    settler = Settler(Instrumented(backend), claims, Notes(lambda r, s, ok: recorded.append(ok)))
    r = claims.add(job)
    clock.advance(100)
    await backend.recover_stalled("q", threshold=10, max_stalled=5)
    claims.handler_ended(r)
    settler.add(r, Settle(r.claim, Outcome.COMPLETE, b"1"))
    await settler.flush()
    assert recorded == [False] and len(claims) == 0


async def test_an_outcome_queued_behind_a_slow_settle_keeps_its_claim(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    """A settle call that hangs (a backend reconnecting) holds up the outcomes that end after
    it: their claims are renewed meanwhile, so recovery does not run those jobs again."""
    first, second = await claim(backend, 2)
    claims, recorded = Claims(), []
    ops = Instrumented(backend)
    settler = Settler(ops, claims, Notes(lambda r, s, ok: recorded.append((r.job.id, ok))))
    a, b = claims.add(first), claims.add(second)
    entered, gate, original = asyncio.Event(), asyncio.Event(), backend.settle

    async def slow(settles: Any) -> Any:
        entered.set()
        await gate.wait()
        return await original(settles)

    backend.settle = slow  # type: ignore[method-assign]
    claims.handler_ended(a)
    settler.add(a, Settle(a.claim, Outcome.COMPLETE, b"1"))
    in_flight = asyncio.create_task(settler.flush())
    async with asyncio.timeout(5):  # the first settle call reaching the backend
        await entered.wait()
    claims.handler_ended(b)
    settler.add(b, Settle(b.claim, Outcome.COMPLETE, b"2"))  # queued behind the first
    for _ in range(3):
        clock.advance(6)
        await Heartbeats(ops, claims, 1.0, noop).beat()
    recovered = await backend.recover_stalled("q", threshold=10, max_stalled=5)
    assert (recovered.requeued, recovered.failed) == ([], [])
    gate.set()
    await in_flight
    await settler.flush()
    assert recorded == [(first.id, True), (second.id, True)]


async def test_heartbeats_renew_held_claims_and_stop_lost_and_cancelled_ones(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    kept, removed, cancelled, settling = await claim(backend, 4)
    claims = Claims()
    running = {j.id: claims.add(j) for j in (kept, removed, cancelled, settling)}
    running[settling.id].settling = True  # renewed, but its own write says how it went
    await remove_job(backend, "q", removed.id)
    await cancel(backend, "q", cancelled.id)
    await remove_job(backend, "q", settling.id)
    renewed: list[int] = []
    original = backend.heartbeat

    async def counting(beats: Any) -> Any:
        renewed.append(len(beats))
        return await original(beats)

    backend.heartbeat = counting  # type: ignore[method-assign]
    ops = Instrumented(backend)
    subscription = await Instrumented(backend).subscribe()
    try:
        await Heartbeats(ops, claims, 1.0, noop).beat()
        await ops.flush()
        async with asyncio.timeout(5):  # the batched events reaching the subscriber
            lost = await anext(subscription)
    finally:
        await subscription.aclose()
    assert (lost.name, lost.job_id) == (events.JOB_CLAIM_LOST, removed.id)  # not the cancelled
    assert renewed == [4]
    assert running[kept.id].stop_reason is None
    assert running[removed.id].stop_reason is StopReason.LOST
    assert running[cancelled.id].stop_reason is StopReason.CANCELLED
    assert running[settling.id].stop_reason is None


async def test_the_fenced_start_check_stops_a_lost_claim_without_interrupting_it(
    backend: InMemoryBackend,
) -> None:
    held, lost = await claim(backend, 2)
    claims = Claims()
    a, b = claims.add(held), claims.add(lost)
    await remove_job(backend, "q", lost.id)
    beats = Heartbeats(Instrumented(backend), claims, 1.0, noop)
    assert await beats.check(a) is True and a.stop_reason is None
    assert await beats.check(b) is False and b.stop_reason is StopReason.LOST


class CountingBackend(InMemoryBackend):
    """The in-memory backend, counting its heartbeat round trips."""

    heartbeats = 0

    async def heartbeat(self, beats: Any) -> Any:
        self.heartbeats += 1
        return await super().heartbeat(beats)


async def test_start_checks_asked_in_one_loop_turn_share_one_round_trip(clock: FakeClock) -> None:
    backend = CountingBackend(clock=clock)
    jobs = await claim(backend, 3)
    await cancel(backend, "q", jobs[2].id)
    claims = Claims()
    running = [claims.add(j) for j in jobs]
    beats = Heartbeats(Instrumented(backend), claims, 1.0, noop)
    answers = await asyncio.gather(*(beats.check(r) for r in running))
    assert answers == [True, True, False] and backend.heartbeats == 1
    assert running[2].stop_reason is StopReason.CANCELLED


def test_the_thread_pool_runs_size_calls_at_once_and_queues_the_rest() -> None:
    pool = ThreadPool(3)
    gate, barrier = threading.Event(), threading.Barrier(3, timeout=5)
    running = [pool.submit(lambda: (barrier.wait(), gate.wait(5))[1]) for _ in range(3)]
    queued = pool.submit(lambda: True)
    assert not queued.done()  # three threads, all busy: nothing for a fourth call yet
    gate.set()
    assert all(f.result(timeout=5) for f in running) and queued.result(timeout=5)
    pool.shutdown()


def test_a_thread_pool_shut_down_without_waiting_cancels_queued_calls() -> None:
    pool = ThreadPool(1)
    gate = threading.Event()
    busy = pool.submit(gate.wait, 5)
    queued = pool.submit(lambda: True)
    pool.shutdown(wait=False, cancel_futures=True)
    with pytest.raises(CancelledError):
        queued.result(timeout=5)
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(lambda: True)
    gate.set()
    assert busy.result(timeout=5)


def test_a_handler_that_never_returns_does_not_keep_the_process_alive() -> None:
    code = (
        "import time\n"
        "from relaymq.worker.threads import ThreadPool\n"
        "pool = ThreadPool(2)\n"
        "pool.submit(time.sleep, 60)\n"
        "pool.shutdown(wait=False, cancel_futures=True)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=20)  # not the 60 s sleep


class ClaimFailsOnce(InMemoryBackend):
    """Fault injection: the first claim raises what no backend should (a bug, a driver's own
    error that was not translated)."""

    failed = False

    async def claim(self, queues: Any, worker_id: str, limit: int) -> Any:
        if not self.failed:
            self.failed = True
            raise RuntimeError("Connection was not opened")
        return await super().claim(queues, worker_id, limit)


async def test_an_unexpected_claim_error_is_logged_and_the_worker_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from relaymq import Queue, Settings, Worker
    from tests import tasks

    backend = ClaimFailsOnce()
    handle = await Queue("q", backend).add(tasks.add.call(2, 2))
    worker = Worker(backend, ["q"], settings=Settings(concurrency=1))
    running = asyncio.create_task(worker.run())
    try:
        assert await handle.result(timeout=10) == 4
    finally:
        worker.stop()
        await running
    assert backend.failed and "claim failed; retrying" in caplog.text
