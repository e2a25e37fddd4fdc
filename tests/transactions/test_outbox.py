"""The outbox: an app whose backend cannot write in the caller's transaction (Redis, MongoDB,
RabbitMQ) writes each transactional enqueue into its outbox, in the application's own
database (PostgreSQL or SQLite), and its workers' elected relay moves the jobs on once the
transaction committed: a job runs once, and never when the transaction rolled back; a relay
killed between a move and its delete stores each job once all the same."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

import relaymq
from relaymq import JobState, Settings, Worker
from relaymq.backends.base import Backend
from relaymq.instrumented import Instrumented
from relaymq.outbox import Relay
from relaymq.records import outbox
from tests.conftest import require
from tests.support import case_postgres
from tests.support.jobs import queue_name
from tests.support.waiting import watch
from tests.transactions.conftest import case_named, create_orders, orders
from tests.transactions.drivers import Asyncpg, Driver, Sqlite3, Where

MAINS = ["redis", "mongodb", "rabbitmq_redis"]
FAST = Settings(heartbeat_interval=0.2, stalled_threshold=0.5, stalled_check_interval=0.1)


@dataclass
class Box:
    main: Backend
    app: relaymq.App
    queue: relaymq.Queue
    task: relaymq.Task[Any, Any]
    driver: Driver
    where: Where
    box: Instrumented
    ran: list[int]

    async def add(self, n: int) -> relaymq.JobHandle[Any]:
        call = self.task.with_options(queue=self.queue.name).call(n)
        if self.driver.sync:
            [handle] = self.app.enqueue_bulk_sync([call], connection=self.driver.connection)
            return handle
        return await self.queue.add(call, connection=self.driver.connection)


PAIRS = [(m, o) for m in MAINS for o in ("postgres", "sqlite")]


@pytest_asyncio.fixture(params=PAIRS, ids=[f"{m}-outbox_{o}" for m, o in PAIRS])
async def box(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Box]:
    main_name, outbox_kind = request.param
    main_case, outbox_case = case_named(main_name), case_named(outbox_kind)
    if main_case is None or outbox_case is None:
        pytest.skip(f"RELAYMQ_TEST_BACKENDS leaves out {main_name} or {outbox_kind}")
    require(main_case)
    require(outbox_case)
    if outbox_kind == "postgres":
        await case_postgres.ensure_database()
        url = case_postgres.url(tmp_path / "outbox")
        schema = case_postgres.schema_for(tmp_path / "outbox")
        w = Where(dsn=f"{case_postgres.SERVER}/{case_postgres.DATABASE}", schema=schema)
        driver: Driver = Asyncpg(w)
    else:
        w = Where(path=str(tmp_path / "app.db"))
        url = f"sqlite:///{w.path}"
        driver = Sqlite3(w)
    main = await main_case.make(None, tmp_path)
    ran: list[int] = []
    app = relaymq.App(backend=main, settings=FAST, outbox=url)

    @app.task(name="tests.transactions:relayed")
    async def relayed(n: int) -> None:
        ran.append(n)

    try:
        box = await app.connect_outbox()  # prepares the outbox's tables in the app's database
        assert box is not None
        await create_orders(w)
        await driver.open()
        try:
            q = relaymq.Queue(queue_name("out"), app)
            yield Box(main, app, q, relayed, driver, w, box, ran)
        finally:
            await driver.close()
    finally:
        await app.close()
        await main.close()
        if outbox_kind == "postgres":
            await case_postgres.drop_schema(schema)


async def test_a_committed_job_is_relayed_and_runs_once(box: Box) -> None:
    d = box.driver
    await d.begin()
    await d.write(1)
    rolled_back = await box.add(1)
    await d.rollback()
    await d.begin()
    await d.write(2)
    handle = await box.add(2)
    await d.commit()
    worker = Worker(box.app, [box.queue.name])
    async with watch(box.main) as w:
        running = asyncio.create_task(worker.run())
        try:
            await w.state(box.queue.name, handle.id, JobState.COMPLETED, within=30)
        finally:
            worker.stop()
            await running
    assert box.ran == [2]
    assert await box.queue.get_job(rolled_back.id) is None
    assert await orders(box.where) == [2]
    assert sum((await box.box.counts(outbox.QUEUE)).values()) == 0  # the envelope is gone


async def test_a_relay_killed_mid_move_stores_each_job_once(box: Box) -> None:
    d = box.driver
    handles = []
    for n in (1, 2, 3):
        await d.begin()
        handles.append(await box.add(n))
        await d.commit()
    parked = asyncio.Event()

    async def crash_here() -> None:
        parked.set()
        await asyncio.Event().wait()  # until cancelled: the relay dies here

    first = Relay(box.app, box.app.ops, "relay-1", FAST, between=crash_here)
    dying = asyncio.create_task(first.relay_for(30))
    await asyncio.wait_for(parked.wait(), 30)  # moved, not yet deleted
    dying.cancel()
    with pytest.raises(asyncio.CancelledError):
        await dying
    assert (await box.box.counts(outbox.QUEUE))[JobState.ACTIVE] == 3  # claimed by the dead
    second = Relay(box.app, box.app.ops, "relay-2", FAST)
    async with asyncio.timeout(30):  # the envelopes come back once stalled, and move again
        while sum((await box.box.counts(outbox.QUEUE)).values()):
            await second.relay_for(0.2)
    ids = sorted(j.id for j in await box.queue.list_jobs(JobState.WAITING))
    assert ids == sorted(h.id for h in handles)
    assert (await box.queue.counts())[JobState.WAITING] == 3
