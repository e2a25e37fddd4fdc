"""Enqueue in the caller's transaction, through each driver, on real PostgreSQL and SQLite: a
job exists if and only if the caller's transaction commits, with its events and wake-ups."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest

import relaymq
from relaymq import JobState
from relaymq.backends.postgres import PostgresBackend
from relaymq.backends.postgres.notify import wake_channel
from relaymq.serializers import DEFAULT_SERIALIZER
from relaymq.testing import drain
from tests.support import case_postgres
from tests.transactions.conftest import Env
from tests.transactions.drivers import Asyncpg


class Boom(Exception):
    pass


async def test_a_committed_job_runs_once(env: Env) -> None:
    d = env.driver
    await d.begin()
    await d.write(1)
    handle = await env.add(1)
    assert await env.queue.get_job(handle.id) is None  # not before the commit
    await d.commit()
    job = await env.queue.get_job(handle.id)
    assert job is not None and job.state is JobState.WAITING
    assert await env.orders() == [1]
    ran = await drain(env.app, [env.queue.name])
    assert ran.completed == 1 and env.ran == [1]


@asynccontextmanager
async def heard(env: Env) -> AsyncIterator[tuple[list[relaymq.Event], list[str]]]:
    """Every event, and every PostgreSQL wake-up (a queue's name), from now until the block
    has ended and a sentinel job of another queue, enqueued and committed last, was heard:
    anything the block sent would have come before it."""
    seen: list[relaymq.Event] = []
    woken: list[str] = []
    sentinel = relaymq.Queue(env.queue.name + "-sentinel", env.app)
    sentinel_woke = asyncio.Event()

    def wake(*heard: object) -> None:
        woken.append(str(heard[3]))
        if heard[3] == sentinel.name:
            sentinel_woke.set()

    subscription = await env.app.ops.subscribe()
    listener = None
    if isinstance(env.backend, PostgresBackend):
        listener = await asyncpg.connect(f"{case_postgres.SERVER}/{case_postgres.DATABASE}")
        await listener.add_listener(wake_channel(env.backend.options.schema), wake)
    else:
        sentinel_woke.set()  # SQLite has no wake-ups: its workers poll
    try:
        yield seen, woken
        done = await sentinel.add(env.task.call(0))
        async with asyncio.timeout(10):
            async for event in subscription:
                seen.append(event)
                if event.job_id == done.id:
                    break
            await sentinel_woke.wait()
    finally:
        await subscription.aclose()
        if listener is not None:
            await listener.close()


@pytest.mark.parametrize("how", ["exception", "explicit"])
async def test_a_rolled_back_job_never_was(env: Env, how: str) -> None:
    d = env.driver
    async with heard(env) as (seen, woken):
        if how == "exception":
            with pytest.raises(Boom):
                async with d.transaction():
                    await d.write(2)
                    handle = await env.add(2)
                    raise Boom
        else:
            await d.begin()
            await d.write(2)
            handle = await env.add(2)
            await d.rollback()
    assert await env.queue.get_job(handle.id) is None
    assert sum((await env.queue.counts()).values()) == 0
    assert await env.orders() == []
    assert [e for e in seen if e.job_id == handle.id] == []
    assert env.queue.name not in woken  # no worker was woken for it


async def test_a_job_and_its_events_come_with_the_commit(env: Env) -> None:
    d = env.driver
    async with heard(env) as (seen, woken):
        async with d.transaction():
            await d.write(3)
            handle = await env.add(3)
    assert [e.name for e in seen if e.job_id == handle.id] == ["job:waiting"]
    if isinstance(env.backend, PostgresBackend):
        assert env.queue.name in woken


async def test_a_savepoint_rolled_back_takes_its_job_with_it(env: Env) -> None:
    d = env.driver
    if not d.savepoints:
        pytest.skip(f"{d.name}: SQLAlchemy's SQLite savepoints need the driver's own BEGIN")
    await d.begin()
    await d.write(4)
    await d.savepoint()
    gone = await env.add(40)
    await d.rollback_to()
    kept = await env.add(41)
    await d.commit()
    assert await env.queue.get_job(gone.id) is None
    job = await env.queue.get_job(kept.id)
    assert job is not None and job.state is JobState.WAITING
    assert await env.orders() == [4]


async def test_a_job_id_is_deduplicated_inside_the_transaction(env: Env) -> None:
    before = await env.queue.add(env.task.with_options(job_id="committed").call(0))
    d = env.driver
    await d.begin()
    first = await env.add(5, job_id="once")
    again = await env.add(6, job_id="once")
    old = await env.add(7, job_id="committed")
    await d.commit()
    assert not first.duplicate and again.duplicate and old.duplicate
    assert old.id == before.id
    counts = await env.queue.counts()
    assert counts[JobState.WAITING] == 2
    job = await env.queue.get_job("once")
    assert job is not None and DEFAULT_SERIALIZER.loads(job.payload)["args"] == [5]


async def test_keys_and_dependencies_are_written_in_the_transaction(env: Env) -> None:
    d = env.driver
    await d.begin()
    parent = await env.add(8)
    child = await env.add(9, depends_on=[parent])  # the parent is only in this transaction
    held = await env.add(10, throttle=("k", 60))
    dropped = await env.add(11, throttle=("k", 60))
    await d.commit()
    job = await env.queue.get_job(child.id)
    assert job is not None and job.state is JobState.BLOCKED
    assert dropped.duplicate and dropped.id == held.id
    await drain(env.app, [env.queue.name])
    assert sorted(env.ran) == [8, 9, 10]


async def test_without_a_transaction(env: Env) -> None:
    """A connection with no transaction open: refused (nothing stored, the connection as it
    was), unless its driver opens one by itself, which the caller then commits."""
    d = env.driver
    if not d.opens_transactions:
        with pytest.raises(relaymq.ConfigError, match="no transaction is open"):
            await env.add(12)
        assert sum((await env.queue.counts()).values()) == 0
        await d.write(12)  # the connection is as it was: still usable, still autocommit
        assert await env.orders() == [12]
        return
    handle = await env.add(12)
    await d.commit()
    job = await env.queue.get_job(handle.id)
    assert job is not None and job.state is JobState.WAITING


@pytest.mark.parametrize("driver_class", [Asyncpg], ids=["asyncpg"])
async def test_the_callers_search_path_is_left_alone(env: Env) -> None:
    """relaymq names its tables in the backend's schema; the caller's own settings stay."""
    con = env.driver.connection
    async with con.transaction():
        await con.execute("SET LOCAL search_path TO pg_catalog")
        await env.add(13)
        assert await con.fetchval("SHOW search_path") == "pg_catalog"
    assert (await env.queue.counts())[JobState.WAITING] == 1
