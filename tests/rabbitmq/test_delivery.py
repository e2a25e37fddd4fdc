"""RabbitMQ delivery: no worker holds a delivery it cannot start, replacement deliveries that
the broker does not confirm are published again, an incompatible queue stores nothing.

Real broker (127.0.0.1:5672), SQLite metadata store, a queue prefix per test.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import pytest_asyncio

from relaymq import Queue, Worker
from relaymq.backends import connect, from_url
from relaymq.backends.base import Backend
from relaymq.backends.rabbitmq import RabbitMQBackend
from relaymq.errors import ConfigError
from relaymq.job import JobState
from relaymq.testing import FakeClock
from tests import tasks
from tests.rabbitmq import support
from tests.support import case_sqlite
from tests.support.jobs import get_job, new_job, queue_name, remove_job
from tests.support.waiting import poll_until
from tests.worker.conftest import FAST


@pytest.fixture(autouse=True)
def _broker() -> None:
    reason = support.broker_unavailable()
    if reason:
        pytest.skip(reason)


Handles = Callable[..., Any]


@pytest_asyncio.fixture
async def handles(tmp_path: Path) -> AsyncIterator[Handles]:
    """``await handles(clock=None)``: another RabbitMQ handle (its own connection) on this
    test's broker queues and SQLite store, as another worker process would have."""
    made: list[RabbitMQBackend] = []

    async def make(clock: FakeClock | None = None) -> RabbitMQBackend:
        store = from_url(case_sqlite.url(tmp_path), clock=clock)
        backend = support.TestRabbitMQBackend(
            support.url(tmp_path, case_sqlite.url(tmp_path)), store=store, clock=clock
        )
        await backend.connect()
        made.append(backend)
        return backend

    yield make
    for backend in reversed(made):
        await backend.close()


async def test_a_busy_worker_holds_no_delivery_and_short_jobs_run_elsewhere(
    handles: Handles, q: str
) -> None:
    busy_handle, idle_handle = await handles(), await handles()
    queue = Queue(q, busy_handle)
    gate = f"busy-{q}"
    long_job = await queue.add(tasks.wait_for_gate.call(gate))
    busy = Worker(busy_handle, [q], settings=FAST.replace(concurrency=1))
    idle = Worker(idle_handle, [q], settings=FAST.replace(concurrency=1))
    runs = [asyncio.create_task(busy.run())]
    try:
        async with asyncio.timeout(10):
            await tasks.started(gate).wait()
        runs.append(asyncio.create_task(idle.run()))
        short = [await queue.add(tasks.add.call(i, i)) for i in range(20)]
        for i, handle in enumerate(short):  # while the long job still runs on the busy worker
            assert await handle.result(timeout=10) == 2 * i
        assert (await long_job.job()).state is JobState.ACTIVE
        assert (busy.stats.claimed, idle.stats.completed) == (1, 20)
        inbox = busy_handle._inbox
        assert inbox is not None and (inbox.held, inbox.room) == (1, 0)
    finally:
        tasks.gate(gate).set()
        for w in (busy, idle):
            w.stop()
        await asyncio.gather(*runs)
    assert await long_job.result(timeout=10) == gate


async def test_a_lost_claim_gives_its_delivery_back_to_the_window(handles: Handles, q: str) -> None:
    rmq: RabbitMQBackend = await handles()
    await rmq.enqueue([new_job(q, "gone"), new_job(q, "next")])
    [job] = (await rmq.claim([q], "w", 1)).jobs
    assert rmq._inbox is not None and rmq._inbox.held == 1
    await remove_job(rmq, q, job.id)
    [beat] = await rmq.heartbeat([_beat(job)])
    assert not beat.held and rmq._inbox.held == 0  # acknowledged: the worker writes nothing
    [again] = (await rmq.claim([q], "w", 1)).jobs
    assert again.id == "next"


async def test_a_replacement_delivery_the_broker_refuses_is_published_again(
    handles: Handles, q: str
) -> None:
    clock = FakeClock()
    rmq: RabbitMQBackend = await handles(clock)
    await rmq.enqueue([new_job(q, "stalled")])
    [first] = (await rmq.claim([q], "w1", 1)).jobs
    clock.advance(31)
    faults = _fail_next_publish(rmq, ConnectionResetError("connection reset by peer"))
    found = await rmq.recover_stalled(q, 30, 5)
    assert found.requeued == ["stalled"]  # reported, so job:stalled goes out
    assert faults == [1] and rmq._broker.failures == 1  # the first publish failed, and was
    await poll_until(lambda: rmq.unpublished == 0, "the kept delivery to be published again")
    [again] = (await rmq.claim([q], "w2", 1)).jobs
    assert again.id == "stalled" and again.token > first.token


async def test_a_replacement_no_worker_took_is_published_again_after_a_threshold(
    handles: Handles, q: str
) -> None:
    clock = FakeClock()
    frozen, rescuer = await handles(clock), await handles(clock)
    await frozen.enqueue([new_job(q, "held")])
    [first] = (await frozen.claim([q], "frozen", 2)).jobs  # a window of 2: one slot left free
    clock.advance(11)
    assert (await rescuer.recover_stalled(q, 10, 5)).requeued == ["held"]
    # The only consumer is the frozen worker's, with a free slot: the broker pushed the
    # replacement there, where nothing will start it.
    assert frozen._inbox is not None
    await poll_until(lambda: frozen._inbox.room == 0, "the replacement to reach the frozen worker")
    clock.advance(9)
    await rescuer.recover_stalled(q, 10, 5)  # within the threshold: not yet
    assert (await rescuer.claim([q], "rescuer", 1)).jobs == []
    clock.advance(2)  # (22 s in all: well before reconciliation's 60 s)
    await rescuer.recover_stalled(q, 10, 5)  # untaken for a threshold: published again
    [again] = (await rescuer.claim([q], "rescuer", 1)).jobs
    assert again.id == "held" and again.token > first.token


async def test_an_incompatible_queue_fails_the_enqueue_before_anything_is_stored(
    tmp_path: Path,
) -> None:
    store = quote(case_sqlite.url(tmp_path), safe="")
    base = f"{support.AMQP_URL}?prefix={support.prefix(tmp_path)}&store={store}"
    q = queue_name()
    first = await connect(f"{base}&max_priority=5")
    other = await connect(f"{base}&max_priority=9")
    try:
        await first.enqueue([new_job(q, "fits")])
        with pytest.raises(ConfigError, match="already exists with arguments"):
            await other.enqueue([new_job(q, "refused")])
        assert await get_job(other, q, "refused") is None  # a producer retry makes no duplicate
        assert (await other.counts(q))[JobState.WAITING] == 1
    finally:
        await other.close()
        assert isinstance(first, RabbitMQBackend)
        await first.delete_broker_queues()
        await first.close()


async def test_reconciliation_of_an_incompatible_queue_says_what_to_do(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = quote(case_sqlite.url(tmp_path), safe="")
    base = f"{support.AMQP_URL}?prefix={support.prefix(tmp_path)}&store={store}"
    q = queue_name()
    first = await connect(f"{base}&max_priority=5")
    other = await connect(f"{base}&max_priority=9&reconcile_after=0")
    try:
        await first.enqueue([new_job(q)])
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            with pytest.raises(ConfigError, match="Delete and recreate the queue"):
                await other.recover_stalled(q, 30, 5)
            await _settled(other)
        assert "never retrieved" not in caplog.text
    finally:
        await other.close()
        assert isinstance(first, RabbitMQBackend)
        await first.delete_broker_queues()
        await first.close()


def _beat(job: Any) -> Any:
    from relaymq.records.store import Beat

    return Beat(job.claim)


def _fail_next_publish(rmq: RabbitMQBackend, error: Exception) -> list[int]:
    """Fault injection: the next broker publish of ``rmq`` raises ``error`` (counted)."""
    broker = rmq._broker
    real = broker._publish_now
    faults: list[int] = []

    async def failing(todo: Any) -> Any:
        if not faults:
            faults.append(1)
            raise error
        return await real(todo)

    broker._publish_now = failing  # type: ignore[method-assign]
    return faults


async def _settled(backend: Backend) -> None:
    """Let background tasks of ``backend`` end (their errors would be logged by asyncio)."""
    for _ in range(3):
        await asyncio.sleep(0)
