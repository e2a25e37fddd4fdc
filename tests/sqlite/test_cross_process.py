"""Several processes on one SQLite file: exclusive claims, events, SIGKILL in a transaction."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from relaymq.backends.sqlite import SQLiteBackend
from relaymq.job import JobState
from tests.sqlite.conftest import Child, child
from tests.support.case_sqlite import url
from tests.support.jobs import get_job, new_job

pytestmark = pytest.mark.slow

CLAIMERS = 4
JOBS = 400


async def test_processes_never_claim_the_same_job(tmp_path: Path, q: str) -> None:
    backend = SQLiteBackend(url(tmp_path))
    await backend.connect()
    try:
        ids = [j.id for j in [new_job(q) for _ in range(JOBS)]]
        await backend.enqueue([new_job(q, i) for i in ids])
        async with AsyncExitStack() as stack:
            children: list[Child] = [
                await stack.enter_async_context(child("claim", url(tmp_path), q))
                for _ in range(CLAIMERS)
            ]
            for c in children:
                await c.expect("READY")
            for c in children:  # all at once, so that they really compete
                await c.send("go")
            claimed = [json.loads(await c.line("claimed ids", 60)) for c in children]
        flat = [i for ids_ in claimed for i in ids_]
        assert len(flat) == len(set(flat)), "a job was claimed twice"
        assert sorted(flat) == sorted(ids), "every job is claimed exactly once"
        assert sum(1 for ids_ in claimed if ids_) >= 2, "the claimers did not overlap"
        counts = await backend.counts(q)
        assert (counts[JobState.COMPLETED], counts[JobState.ACTIVE]) == (JOBS, 0)
    finally:
        await backend.close()


async def test_events_reach_a_subscriber_in_another_process(tmp_path: Path) -> None:
    listener = SQLiteBackend(url(tmp_path))
    await listener.connect()
    sub = await listener.subscribe()
    try:
        async with child("publish", url(tmp_path), "3") as publisher:
            await publisher.expect("READY")
            got = [await asyncio.wait_for(anext(sub), 10) for _ in range(3)]
            await publisher.expect("PUBLISHED")
        assert [json.loads(e) for e in got] == [{"n": 0}, {"n": 1}, {"n": 2}]
    finally:
        await sub.aclose()
        await listener.close()


async def test_sigkill_during_enqueues_loses_no_accepted_job(tmp_path: Path, q: str) -> None:
    accepted: list[str] = []
    async with child("enqueue", url(tmp_path), q) as producer:
        await producer.expect("READY")
        while len(accepted) < 200:  # the child is in its next transaction when it dies
            accepted += json.loads(await producer.line("an accepted batch"))
        producer.kill()
    backend = SQLiteBackend(url(tmp_path))
    await backend.connect()
    try:
        missing = [i for i in accepted if await get_job(backend, q, i) is None]
        assert missing == []
        counts = await backend.counts(q)
        assert counts[JobState.WAITING] >= len(accepted)
        assert counts[JobState.WAITING] % 20 == 0, "a batch was stored in part"
        await backend.enqueue([new_job(q, "after")])  # the file is writable again
        assert await get_job(backend, q, "after") is not None
    finally:
        await backend.close()
    with sqlite3.connect(tmp_path / "relaymq.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


async def test_sigkill_inside_an_open_write_transaction(tmp_path: Path, q: str) -> None:
    async with child("hold", url(tmp_path), q) as holder:
        await holder.expect("READY")
        await holder.expect("IN-TRANSACTION")  # holds the write lock now
        holder.kill()
    backend = SQLiteBackend(url(tmp_path), busy_timeout=5)
    await backend.connect()
    try:
        assert await get_job(backend, q, "accepted") is not None
        assert await get_job(backend, q, "uncommitted") is None  # rolled back
        [job] = (await backend.claim([q], "w", 10)).jobs  # the lock died with the process
        assert job.id == "accepted"
        assert (await backend.counts(q))[JobState.ACTIVE] == 1
    finally:
        await backend.close()
