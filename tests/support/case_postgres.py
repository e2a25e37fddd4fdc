"""PostgreSQL case: the shared server on 127.0.0.1:5432, database ``relaymq_test`` (created
when missing), one schema per test (search_path on the pool), dropped when the test's last
handle closes. ``RELAYMQ_TEST_POSTGRES`` points at another server."""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg

from relaymq.backends.base import Backend
from relaymq.backends.postgres import PostgresBackend
from relaymq.records.store import Clock
from tests.support.cases import BOGUS_STATE, BackendCase, Damage

SERVER = os.environ.get("RELAYMQ_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
DATABASE = "relaymq_test"
_open: dict[str, int] = {}  # schema -> open handles
_database_ready = False


def schema_for(tmp: Path) -> str:
    return "t_" + hashlib.sha1(str(tmp).encode()).hexdigest()[:16]


def url(tmp: Path) -> str:
    return f"{SERVER}/{DATABASE}?schema={schema_for(tmp)}&migrate=true"


async def ensure_database() -> None:
    global _database_ready
    if _database_ready:
        return
    con = await asyncpg.connect(f"{SERVER}/postgres")
    try:
        exists = await con.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DATABASE)
        if not exists:
            try:
                await con.execute(f'CREATE DATABASE "{DATABASE}"')
            except asyncpg.DuplicateDatabaseError:
                pass
    finally:
        await con.close()
    _database_ready = True


async def drop_schema(schema: str) -> None:
    con = await asyncpg.connect(f"{SERVER}/{DATABASE}")
    try:
        await con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await con.close()


class _TestBackend(PostgresBackend):
    """Drops the test's schema when the last handle on it closes."""

    _closed = False

    def heartbeat_handle(self) -> Backend:
        """A plain handle: the test's clean-up stays with the handles the test made."""
        args, kwargs = self._made_with
        return PostgresBackend(*args, **kwargs)

    async def close(self) -> None:
        await super().close()
        if self._closed:
            return
        self._closed = True
        schema = self.options.schema
        _open[schema] -= 1
        if _open[schema] == 0:
            del _open[schema]
            await drop_schema(schema)


async def make(clock: Clock | None, tmp: Path) -> Backend:
    await ensure_database()
    backend = _TestBackend(url(tmp), clock=clock)
    await backend.connect()
    _open[backend.options.schema] = _open.get(backend.options.schema, 0) + 1
    return backend


async def corrupt(backend: Backend, queue: str, job_id: str, damage: Damage = "field") -> None:
    """A dependency policy nobody knows (``field``: a text column without a CHECK), or an
    unknown state (``state``), written past the state's CHECK constraint, which is dropped
    in the test's own schema first: what a raw-access tool or a broken migration can do."""
    assert isinstance(backend, PostgresBackend)
    con = await asyncpg.connect(f"{SERVER}/{DATABASE}")
    try:  # the test's own damage, not backend code: SQL outside the .sql files
        table = f'"{backend.options.schema}".relaymq_jobs'
        if damage == "state":
            await con.execute(
                f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS relaymq_jobs_state_check"
            )
        column, value = ("dep_policy", "bogus") if damage == "field" else ("state", BOGUS_STATE)
        done = await con.execute(
            f"UPDATE {table} SET {column} = $1 WHERE queue = $2 AND id = $3", value, queue, job_id
        )
        assert done == "UPDATE 1", f"no job {job_id!r} in {queue!r} to corrupt"
    finally:
        await con.close()


def unavailable() -> str | None:
    parts = urlsplit(SERVER)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5432), 2):
            return None
    except OSError as e:
        return f"no PostgreSQL at {SERVER}: {e}"


CASE = BackendCase(name="postgres", make=make, unavailable=unavailable, corrupt=corrupt, url=url)
