"""The MongoDB test server (mongoeco on SQLite) must not fail a write that only waited.

SQLite answers a writer that waited more than its busy timeout for another connection's lock
with "database is locked", which mongoeco passes on as a command error that a real mongod never
gives; late in the whole suite on the 2-core CI machine it failed an enqueue. The launcher
(tests/support/mongoeco_server.py) gives the engine's connections a long busy timeout: here an
outside connection holds the data file's write lock for longer than SQLite's default 5 s, and
an enqueue started meanwhile must complete once the lock is let go.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from relaymq.backends.mongodb import MongoDBBackend
from tests.mongodb.conftest import PYMONGO_SOCKET_LEAK, MongoServer
from tests.support.jobs import get_job, new_job, queue_name

pytestmark = PYMONGO_SOCKET_LEAK

HOLD = 6.0
"""How long the outside connection keeps the write lock: longer than SQLite's default 5 s."""


async def an_enqueue_outlasts_a_held_lock(server: MongoServer, hold: float) -> None:
    """An outside connection holds the data file's write lock for ``hold`` seconds while an
    enqueue runs: the enqueue waits, then completes once the lock is let go."""
    async with MongoDBBackend(server.url, server_selection_timeout=5.0) as backend:
        queue = queue_name()
        await backend.enqueue([new_job(queue)])  # the collections and indexes exist
        holder = sqlite3.connect(server.data, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            job = new_job(queue)
            enqueue = asyncio.create_task(backend.enqueue([job]))
            await asyncio.sleep(hold)  # the fault's length, not a wait for an event
            assert not enqueue.done(), "the enqueue did not wait for the write lock"
            holder.execute("COMMIT")
        finally:
            holder.close()
        async with asyncio.timeout(30):  # the enqueue finishing once the lock is free
            await enqueue
        stored = await get_job(backend, queue, job.id)
        assert stored is not None and stored.id == job.id


async def test_a_write_waits_out_a_lock_held_longer_than_sqlites_default(
    mongo_server: MongoServer,
) -> None:
    await an_enqueue_outlasts_a_held_lock(mongo_server, HOLD)


async def test_a_write_refused_at_once_for_a_lock_is_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no busy timeout at all, SQLite refuses a write at once while another connection
    holds the lock, as it does in the conflicts no timeout covers: the launcher runs the
    command again until the lock is free."""
    monkeypatch.setenv("MONGOECO_BUSY_TIMEOUT_MS", "0")
    server = MongoServer(tmp_path / "mongo.db")
    await server.start()
    try:
        await an_enqueue_outlasts_a_held_lock(server, 1.0)
    finally:
        await server.kill()
