"""Restart survival: the test server is SIGKILLed with jobs waiting, delayed and active.

Afterwards every accepted job is still there in the state it had, the same backend object
works again within 10 s without being rebuilt, stale claims stay rejected, active jobs are
recovered, and subscriptions and waits come back by themselves (RELIABILITY.md: I9, F9).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from relaymq import Queue, Settings, Worker
from relaymq.backends.base import Backend
from relaymq.backends.mongodb import MongoDBBackend
from relaymq.errors import BackendUnavailableError
from relaymq.job import JobState
from relaymq.records.store import Outcome, Settle
from relaymq.testing import FakeClock
from tests import tasks
from tests.mongodb.conftest import PYMONGO_SOCKET_LEAK, MongoServer
from tests.support.jobs import get_job, new_job, queue_name
from tests.support.waiting import watch

pytestmark = [pytest.mark.slow, PYMONGO_SOCKET_LEAK]

T = TypeVar("T")
RECONNECT_DEADLINE = 10.0


async def first_success(call: Callable[[], Awaitable[T]], deadline: float) -> tuple[T, float]:
    """Repeat ``call`` until it stops raising BackendUnavailableError; (result, seconds)."""
    start = time.monotonic()
    while True:
        try:
            return await call(), time.monotonic() - start
        except BackendUnavailableError:
            if time.monotonic() - start > deadline:
                raise
            await asyncio.sleep(0.1)


def backend_on(server: MongoServer, clock: FakeClock | None = None) -> MongoDBBackend:
    return MongoDBBackend(server.url, clock=clock, server_selection_timeout=1.0)


async def test_accepted_jobs_survive_sigkill_and_the_backend_reconnects(
    mongo_server: MongoServer, clock: FakeClock
) -> None:
    q = queue_name()
    async with backend_on(mongo_server, clock) as backend:
        await backend.enqueue([new_job(q, f"w{i}", max_attempts=3) for i in range(10)])
        await backend.enqueue([new_job(q, f"d{i}", delay=30) for i in range(3)])
        active = (await backend.claim([q], "A", 4)).jobs
        await backend.settle([Settle(active[0].claim, Outcome.COMPLETE, result=b"done")])
        before = await backend.counts(q)
        assert before[JobState.ACTIVE] == 3 and before[JobState.COMPLETED] == 1

        await mongo_server.kill()
        with pytest.raises(BackendUnavailableError):
            await backend.counts(q)
        await mongo_server.start()

        after, seconds = await first_success(lambda: backend.counts(q), RECONNECT_DEADLINE)
        assert seconds < RECONNECT_DEADLINE
        assert after == before  # nothing lost, nothing moved
        done = await get_job(backend, q, active[0].id)
        assert done is not None and done.result == b"done"

        # F9: the claims from before the crash are recovered, then stay stale.
        clock.advance(60)
        recovered = await backend.recover_stalled(q, threshold=30, max_stalled=5)
        assert sorted(recovered.requeued) == sorted(j.id for j in active[1:])
        stale = [Settle(j.claim, Outcome.COMPLETE, result=b"late") for j in active[1:]]
        assert await backend.settle(stale) == [False] * 3

        clock.advance(60)  # the delayed jobs fell due during the "outage"
        seen: dict[str, int] = {}
        while batch := (await backend.claim([q], "B", 5)).jobs:
            for job in batch:
                seen[job.id] = job.token
            await backend.settle([Settle(j.claim, Outcome.COMPLETE) for j in batch])
        assert len(seen) == 12  # 13 accepted, 1 completed before the crash
        assert all(seen[j.id] > j.token for j in active[1:])
        assert (await backend.counts(q))[JobState.COMPLETED] == 13


async def test_server_clock_recovery_after_restart(mongo_server: MongoServer) -> None:
    q = queue_name()
    async with backend_on(mongo_server) as backend:
        await backend.enqueue([new_job(q) for _ in range(3)])
        claimed = (await backend.claim([q], "A", 3)).jobs
        await mongo_server.kill()
        await mongo_server.start()

        async def recovered_all() -> list[str]:
            # $$NOW on the restarted server decides staleness (threshold 0.3 s).
            found: list[str] = []
            until = time.monotonic() + RECONNECT_DEADLINE
            while len(found) < 3 and time.monotonic() < until:
                found += (await backend.recover_stalled(q, 0.3, 5)).requeued
                if len(found) < 3:
                    await asyncio.sleep(0.1)
            return found

        requeued, _ = await first_success(recovered_all, RECONNECT_DEADLINE)
        assert sorted(requeued) == sorted(j.id for j in claimed)
        again = (await backend.claim([q], "B", 3)).jobs
        assert {j.id: j.token for j in again} == {j.id: j.token + 1 for j in claimed}


async def test_subscriptions_and_waits_come_back_after_restart(
    mongo_server: MongoServer,
) -> None:
    q = queue_name()
    async with backend_on(mongo_server) as listener, backend_on(mongo_server) as producer:
        sub = await listener.subscribe()
        try:
            await producer.publish([b"before"])
            assert await asyncio.wait_for(anext(sub), 10) == b"before"
            pending = asyncio.ensure_future(anext(sub))  # polling while the server dies
            await mongo_server.kill()
            await mongo_server.start()

            async def publish_and_enqueue() -> None:
                await producer.publish([b"after"])
                await producer.enqueue([new_job(q)])

            await first_success(publish_and_enqueue, RECONNECT_DEADLINE)
            assert await asyncio.wait_for(pending, RECONNECT_DEADLINE) == b"after"
            # A waiter in another client notices the job enqueued after the restart.
            await asyncio.wait_for(listener.wait([q], 30), RECONNECT_DEADLINE)
        finally:
            await sub.aclose()


async def test_a_call_during_the_outage_fails_fast_and_clearly(
    mongo_server: MongoServer,
) -> None:
    backend: Backend = backend_on(mongo_server)
    await backend.connect()
    try:
        await mongo_server.kill()
        start = time.monotonic()
        with pytest.raises(BackendUnavailableError, match="unreachable"):
            await backend.enqueue([new_job(queue_name())])
        assert time.monotonic() - start < 5  # server_selection_timeout=1.0, not 30 s
    finally:
        await backend.close()


async def test_a_running_worker_rides_out_a_server_sigkill(mongo_server: MongoServer) -> None:
    """Jobs waiting and active when the server dies: the worker reconnects by itself within
    10 s of the restart, the active jobs are recovered or finished, and every job completes."""
    q = queue_name("ride")
    key = f"ride-{q}"
    settings = Settings(
        heartbeat_interval=0.1,
        stalled_threshold=1.0,
        stalled_check_interval=0.2,
        shutdown_timeout=2.0,
    )
    async with backend_on(mongo_server) as producer, backend_on(mongo_server) as own:
        queue = Queue(q, producer, settings=settings)
        handles = await queue.add_bulk([tasks.wait_for_gate.call(key) for _ in range(12)])
        worker = Worker(own, [q], concurrency=4, settings=settings)
        running = asyncio.create_task(worker.run())
        try:
            async with watch(producer) as w:
                await w.until(lambda: tasks.RUNNING[key] == 4, "four handlers holding claims")
            await mongo_server.kill()
            await asyncio.sleep(1.5)  # an outage longer than the stall threshold
            await mongo_server.start()
            back = time.monotonic()
            tasks.gate(key).set()
            first = await first_success(
                lambda: handles[0].result(timeout=RECONNECT_DEADLINE), RECONNECT_DEADLINE
            )
            assert first[0] == key
            reconnected = time.monotonic() - back
            assert reconnected < RECONNECT_DEADLINE, f"first job done {reconnected:.1f}s after"
            for handle in handles:
                assert await handle.result(timeout=30) == key
        finally:
            worker.stop()
            await running
        counts = await producer.counts(q)
        assert counts[JobState.COMPLETED] == 12 and sum(counts.values()) == 12
