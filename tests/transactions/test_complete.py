"""A handler completes its job in its own transaction (``JobContext.complete_in``), on real
PostgreSQL (asyncpg, async handler) and SQLite (sqlite3, plain handler): its writes and the
completion commit together or not at all, fenced by the attempt's claim."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

import relaymq
from relaymq import ClaimLostError, JobContext, JobState, Settings, Worker
from relaymq.backends.base import Backend
from relaymq.backends.memory import InMemoryBackend
from relaymq.backends.postgres import PostgresBackend
from relaymq.job import Outcome
from relaymq.testing import FakeClock, drain
from tests.conftest import require
from tests.support.jobs import queue_name
from tests.support.waiting import watch
from tests.transactions.conftest import Where, case_named, create_orders, orders, where

QUIET = Settings(heartbeat_interval=30, stalled_threshold=60, enable_stalled_check=False)
"""No heartbeat and no recovery of the workers' own while a test moves the clock."""


@dataclass
class Handler:
    """What the task does in attempt ``n``: write order ``n`` and complete with ``n`` in one
    transaction; ``fail_after`` raises after complete_in (the transaction rolls back);
    ``hold`` (an attempt number) waits for ``go`` before writing."""

    where: Where
    fail_after: set[int] = field(default_factory=set)
    hold: int = 0
    held: threading.Event = field(default_factory=threading.Event)
    go: threading.Event = field(default_factory=threading.Event)
    errors: list[BaseException] = field(default_factory=list)

    async def run_pg(self, ctx: JobContext) -> str:
        await self._wait(ctx)
        con = await asyncpg.connect(self.where.dsn)
        try:
            async with con.transaction():
                await con.execute(f"INSERT INTO {self.where.orders} (n) VALUES ($1)", ctx.attempt)
                await self._complete(ctx.complete_in(con, result=ctx.attempt))
                if ctx.attempt in self.fail_after:
                    raise RuntimeError("after complete_in")
        finally:
            await con.close()
        return "not stored"

    def run_sqlite(self, ctx: JobContext) -> str:
        if ctx.attempt == self.hold:
            self.held.set()
            assert self.go.wait(30)
        conn = sqlite3.connect(self.where.path, isolation_level=None, timeout=30)
        try:
            conn.execute("BEGIN IMMEDIATE")
            with conn:
                conn.execute("INSERT INTO orders (n) VALUES (?)", (ctx.attempt,))
                try:
                    ctx.complete_in_sync(conn, result=ctx.attempt)
                except ClaimLostError as e:
                    self.errors.append(e)
                    raise
                if ctx.attempt in self.fail_after:
                    raise RuntimeError("after complete_in")
        finally:
            conn.close()
        return "not stored"

    async def _wait(self, ctx: JobContext) -> None:
        if ctx.attempt == self.hold:
            self.held.set()
            await asyncio.to_thread(self.go.wait, 30)

    async def _complete(self, completing: Any) -> None:
        try:
            await completing
        except ClaimLostError as e:
            self.errors.append(e)
            raise


@dataclass
class Setup:
    backend: Backend
    app: relaymq.App
    queue: relaymq.Queue
    task: relaymq.Task[Any, Any]
    handler: Handler
    clock: FakeClock


@pytest_asyncio.fixture(params=["postgres", "sqlite"])
async def setup(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Setup]:
    case = case_named(request.param)
    if case is None:
        pytest.skip(f"RELAYMQ_TEST_BACKENDS leaves out {request.param}")
    require(case)
    clock = FakeClock()
    backend = await case.make(clock, tmp_path)
    try:
        w = where(backend)
        await create_orders(w)
        handler = Handler(w)
        app = relaymq.App(backend=backend, settings=QUIET)
        pg = isinstance(backend, PostgresBackend)
        fn = handler.run_pg if pg else handler.run_sqlite
        task = app.task(name="tests.transactions:complete", retries=1, backoff=0)(fn)
        yield Setup(backend, app, relaymq.Queue(queue_name("done"), app), task, handler, clock)
    finally:
        await backend.close()


async def test_the_handlers_writes_and_the_completion_commit_together(setup: Setup) -> None:
    handle = await setup.queue.add(setup.task.call())
    async with watch(setup.backend) as w:
        ran = await drain(setup.app, [setup.queue.name])
        await w.state(setup.queue.name, handle.id, JobState.COMPLETED)
    job = await setup.queue.get_job(handle.id)
    assert job is not None and job.state is JobState.COMPLETED
    assert await handle.result(timeout=5) == 1  # complete_in's result, not the return value
    assert await orders(setup.handler.where) == [1]
    assert ran.completed == 1 and job.attempts == 1
    [attempt] = job.attempt_history  # written by complete_in's settle, like any other
    assert attempt.outcome is Outcome.COMPLETE and attempt.attempt == 1
    assert attempt.ran_for is not None and attempt.ran_for >= 0


async def test_a_rolled_back_completion_is_a_failed_attempt(setup: Setup) -> None:
    setup.handler.fail_after = {1}
    handle = await setup.queue.add(setup.task.call())
    ran = await drain(setup.app, [setup.queue.name])
    assert await handle.result(timeout=5) == 2
    assert await orders(setup.handler.where) == [2]  # attempt 1's row rolled back with it
    assert ran.retried == 1 and ran.completed == 1


async def test_a_stale_claim_cannot_complete(setup: Setup) -> None:
    """Attempt 1 waits in its handler while the job is recovered as stalled and run to its end
    by another worker; then it tries to complete: refused, its row never written."""
    h = setup.handler
    h.hold = 1
    handle = await setup.queue.add(setup.task.call())
    first = Worker(setup.app, [setup.queue.name], concurrency=1)
    running = asyncio.create_task(first.run())
    try:
        await asyncio.to_thread(h.held.wait, 30)
        setup.clock.advance(120)
        recovered = await setup.app.ops.recover_stalled(setup.queue.name, 60, 5)
        assert recovered.requeued == [handle.id]
        ran = await drain(setup.app, [setup.queue.name])  # another worker: attempt 2
        assert ran.completed == 1
        async with watch(setup.backend) as w:
            h.go.set()
            await w.until(lambda: bool(h.errors), "attempt 1's complete_in to be refused")
    finally:
        h.go.set()
        first.stop()
        await running
    assert isinstance(h.errors[0], ClaimLostError)
    assert await orders(h.where) == [2]
    job = await setup.queue.get_job(handle.id)
    assert job is not None and job.state is JobState.COMPLETED and job.attempts == 2
    assert await handle.result(timeout=5) == 2


async def test_a_backend_that_cannot_says_so() -> None:
    memory = InMemoryBackend()
    await memory.connect()
    app = relaymq.App(backend=memory, settings=QUIET)
    seen: list[BaseException] = []

    @app.task(name="tests.transactions:memory")
    async def complete(ctx: JobContext) -> None:
        try:
            await ctx.complete_in(object(), result=1)
        except relaymq.ConfigError as e:
            seen.append(e)

    await relaymq.Queue("q", app).add(complete.call())
    await drain(app, ["q"])
    assert "cannot complete a job in your transaction" in str(seen[0])
    await memory.close()
