"""One test environment per driver: a backend (PostgreSQL or SQLite, on the test's own schema
or file), an app over it with a task, the application's ``orders`` table beside the jobs, and
the driver's connection (``tests.transactions.drivers``)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

import relaymq
from relaymq.backends.base import Backend
from relaymq.backends.postgres import PostgresBackend
from relaymq.backends.sqlite import SQLiteBackend
from tests.conftest import CASES, require
from tests.support import case_postgres
from tests.support.cases import BackendCase
from tests.support.jobs import queue_name
from tests.transactions.drivers import DRIVERS, Driver, Where


def case_named(name: str) -> BackendCase | None:
    return next((c for c in CASES if c.name == name), None)


def where(backend: Backend) -> Where:
    if isinstance(backend, PostgresBackend):
        dsn = f"{case_postgres.SERVER}/{case_postgres.DATABASE}"
        return Where(dsn=dsn, schema=backend.options.schema)
    assert isinstance(backend, SQLiteBackend)
    return Where(path=backend.path)


async def create_orders(w: Where) -> None:
    """The application's own table, in the database of the backend's jobs."""
    if w.schema:
        con = await asyncpg.connect(w.dsn)
        try:
            await con.execute(f"CREATE TABLE {w.orders} (n int)")
        finally:
            await con.close()
    else:
        with sqlite3.connect(w.path) as conn:
            conn.execute("CREATE TABLE orders (n integer)")
        conn.close()


async def orders(w: Where) -> list[int]:
    """The committed order rows, read on a connection of their own."""
    if w.schema:
        con = await asyncpg.connect(w.dsn)
        try:
            return [r["n"] for r in await con.fetch(f"SELECT n FROM {w.orders} ORDER BY n")]
        finally:
            await con.close()
    conn = sqlite3.connect(w.path)
    try:
        return [n for (n,) in conn.execute("SELECT n FROM orders ORDER BY n")]
    finally:
        conn.close()


@dataclass
class Env:
    backend: Backend
    app: relaymq.App
    queue: relaymq.Queue
    where: Where
    driver: Driver
    task: relaymq.Task[Any, Any]
    ran: list[int] = field(default_factory=list)

    async def add(self, n: int, **options: Any) -> relaymq.JobHandle[Any]:
        """Enqueue ``task(n)`` in the driver's open transaction, as its kind of code would."""
        call = self.task.with_options(queue=self.queue.name, **options).call(n)
        if self.driver.sync:
            [handle] = self.app.enqueue_bulk_sync([call], connection=self.driver.connection)
            return handle
        return await self.queue.add(call, connection=self.driver.connection)

    async def orders(self) -> list[int]:
        return await orders(self.where)


def make_app(backend: Backend, ran: list[int]) -> tuple[relaymq.App, relaymq.Task[Any, Any]]:
    app = relaymq.App(backend=backend, settings=relaymq.Settings())

    @app.task(name="tests.transactions:record")
    async def record(n: int) -> int:
        ran.append(n)
        return n

    return app, record


@pytest.fixture(params=DRIVERS, ids=[d.__name__ for d in DRIVERS])
def driver_class(request: pytest.FixtureRequest) -> type[Driver]:
    cls: type[Driver] = request.param
    return cls


@pytest_asyncio.fixture
async def env(driver_class: type[Driver], tmp_path: Path) -> AsyncIterator[Env]:
    case = case_named(driver_class.kind)
    if case is None:
        pytest.skip(f"RELAYMQ_TEST_BACKENDS leaves out {driver_class.kind}")
    require(case)
    backend = await case.make(None, tmp_path)
    try:
        w = where(backend)
        await create_orders(w)
        ran: list[int] = []
        app, task = make_app(backend, ran)
        driver = driver_class(w)
        await driver.open()
        try:
            queue = relaymq.Queue(queue_name("tx"), app)
            yield Env(backend, app, queue, w, driver, task, ran)
        finally:
            await driver.close()
    finally:
        await backend.close()
