"""Broker restart survival: a private RabbitMQ node is SIGKILLed and started again while jobs
are waiting (on the broker and in the worker's prefetch) and active (in handlers).

Afterwards nothing is lost, the consumer comes back by itself within 10 s, jobs enqueued during
the outage are delivered, and the broker's redeliveries are deduplicated by token: every job
completes once and, as no worker crashed, every handler ran exactly once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from relaymq import JobState, Queue, Settings, Worker, task
from relaymq.backends import from_url
from relaymq.backends.rabbitmq import RabbitMQBackend
from relaymq.errors import BackendUnavailableError
from tests.rabbitmq import node, support
from tests.redis.server import PrivateRedis
from tests.support import case_sqlite
from tests.support.jobs import queue_name
from tests.support.waiting import watch

LEDGER: dict[str, Path] = {}


@task(queue="rmq-restart")
async def record(ledger: str, n: int) -> int:
    with Path(ledger).open("a") as f:  # noqa: ASYNC230 - the side effect, one short line
        f.write(f"{n}\n")
    await asyncio.sleep(0.2)
    return n


@pytest.fixture
def private_node() -> node.PrivateNode:
    reason = node.unavailable() or support.broker_unavailable()
    if reason:
        pytest.skip(reason)
    n = node.PrivateNode()
    try:
        n.start()
    except BaseException:
        n.stop()
        raise
    yield n  # type: ignore[misc]
    n.stop()


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_broker_crash_loses_nothing_and_consumers_come_back(
    private_node: node.PrivateNode, tmp_path: Path
) -> None:
    url = support.url(tmp_path, case_sqlite.url(tmp_path), amqp_url=node.URL)
    backend = from_url(url)
    await backend.connect()
    q = queue_name("restart")
    ledger = tmp_path / "ledger"
    queue = Queue(q, backend)
    settings = Settings(
        concurrency=4, heartbeat_interval=0.2, stalled_threshold=5, stalled_check_interval=0.5
    )
    worker = Worker(backend, [q], settings=settings)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.started.wait(), 10)
        before = await queue.add_bulk([record.call(str(ledger), n) for n in range(40)])
        async with watch(backend) as w:
            await w.until(lambda: _ran(ledger) >= 6, "a few jobs to have run", within=30)
        counts = await backend.counts(q)
        assert counts[JobState.WAITING] > 0 and counts[JobState.ACTIVE] > 0, counts

        await asyncio.to_thread(private_node.kill)
        during = await queue.add_bulk([record.call(str(ledger), n) for n in range(40, 50)])
        assert backend.unpublished == 10  # stored, their deliveries wait for the broker
        await asyncio.to_thread(private_node.start)
        back = time.monotonic()
        after = await queue.add(record.call(str(ledger), 50))

        assert await after.result(timeout=10) == 50  # consumers back within 10 s
        assert time.monotonic() - back < 10
        for handle in [*before, *during]:
            assert await handle.result(timeout=60) is not None
    finally:
        worker.stop()
        await running
        await backend.delete_broker_queues()
        await backend.close()
    runs = Counter(int(line) for line in ledger.read_text().split())
    assert sorted(runs) == list(range(51))
    assert set(runs.values()) == {1}, {n: c for n, c in runs.items() if c > 1}
    counts = await _counts(url, q)
    assert counts[JobState.COMPLETED] == 51 and sum(counts.values()) == 51, counts


def _ran(ledger: Path) -> int:
    return len(ledger.read_text().split()) if ledger.exists() else 0


async def _counts(url: str, q: str) -> dict[JobState, int]:
    backend = from_url(url)
    await backend.connect()
    try:
        return await backend.counts(q)
    finally:
        await backend.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_a_job_stalled_across_a_broker_crash_is_recovered_and_runs_once_more(
    private_node: node.PrivateNode, tmp_path: Path
) -> None:
    """A worker claims a job and dies (its handle never settles) while the broker crashes; once
    the broker is back, its redelivery of the old token is dropped as stale and recovery's
    replacement delivery runs the job on another worker."""
    url = support.url(tmp_path, case_sqlite.url(tmp_path), amqp_url=node.URL)
    dead, rescuer_handle = from_url(url), from_url(url)
    await dead.connect()
    await rescuer_handle.connect()
    q = queue_name("restart-stall")
    ledger = tmp_path / "ledger"
    queue = Queue(q, rescuer_handle)
    try:
        handle = await queue.add(record.call(str(ledger), 7))
        [first] = (await dead.claim([q], "a-worker-that-dies", 1)).jobs
        await asyncio.to_thread(private_node.kill)
        await dead.close()  # the worker is gone: nothing it held is settled
        await asyncio.to_thread(private_node.start)
        settings = Settings(
            heartbeat_interval=0.2, stalled_threshold=1.0, stalled_check_interval=0.2
        )
        worker = Worker(rescuer_handle, [q], settings=settings)
        running = asyncio.create_task(worker.run())
        try:
            assert await handle.result(timeout=30) == 7
        finally:
            worker.stop()
            await running
        done = await handle.job()
        assert (done.state, done.stalls, done.token > first.token) == (JobState.COMPLETED, 1, True)
        assert ledger.read_text().split() == ["7"]  # the dead claim never ran it
    finally:
        assert isinstance(rescuer_handle, RabbitMQBackend)
        await rescuer_handle.delete_broker_queues()
        await rescuer_handle.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_metadata_store_crash_loses_nothing(tmp_path: Path) -> None:
    """The Redis holding the job metadata is SIGKILLed and started again while jobs wait and run;
    the worker and the producer reconnect by themselves and every job completes once."""
    if reason := support.broker_unavailable():
        pytest.skip(reason)
    store = PrivateRedis(tmp_path / "store")
    store.start()
    url = support.url(tmp_path, f"{store.url}?prefix=rmq-store-crash")
    backend = from_url(url)
    await backend.connect()
    q = queue_name("store-crash")
    ledger = tmp_path / "ledger"
    queue = Queue(q, backend)
    settings = Settings(
        concurrency=4, heartbeat_interval=0.2, stalled_threshold=5, stalled_check_interval=0.5
    )
    worker = Worker(backend, [q], settings=settings)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.started.wait(), 10)
        before = await queue.add_bulk([record.call(str(ledger), n) for n in range(30)])
        async with watch(backend) as w:
            await w.until(lambda: _ran(ledger) >= 4, "a few jobs to have run", within=30)
        store.kill()
        store.start()
        after = await _add_when_back(queue, record.call(str(ledger), 30))
        for h in [*before, after]:
            assert await h.result(timeout=60) is not None
    finally:
        worker.stop()
        await running
        assert isinstance(backend, RabbitMQBackend)
        await backend.delete_broker_queues()
        await backend.close()
        store.kill()
    runs = Counter(int(line) for line in ledger.read_text().split())
    assert sorted(runs) == list(range(31))
    assert set(runs.values()) == {1}, {n: c for n, c in runs.items() if c > 1}


async def _add_when_back(queue: Queue, call: Any) -> Any:
    """Enqueue once the store answers again (the first tries may meet a closed connection)."""
    async with asyncio.timeout(10):  # the producer's reconnect
        while True:
            try:
                return await queue.add(call)
            except BackendUnavailableError:
                await asyncio.sleep(0.1)
