"""SQLite: every test gets its own database file under its tmp dir (two handles, one file)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from relaymq.backends.base import Backend
from relaymq.backends.sqlite import SQLiteBackend
from relaymq.records.store import Clock
from tests.support.cases import BOGUS_STATE, BackendCase, Damage


def url(tmp: Path) -> str:
    # sqlite:/// + an absolute path (which starts with "/") is the SQLAlchemy-style absolute URL.
    return f"sqlite:///{(tmp / 'relaymq.db').resolve()}"


async def make(clock: Clock | None, tmp: Path) -> Backend:
    backend = SQLiteBackend(url(tmp), clock=clock)
    await backend.connect()
    return backend


async def corrupt(backend: Backend, queue: str, job_id: str, damage: Damage = "field") -> None:
    """Write text into the job's fencing token (``field``) or an unknown state (``state``)."""
    assert isinstance(backend, SQLiteBackend)
    column, value = ("token", "garbage") if damage == "field" else ("state", BOGUS_STATE)
    with sqlite3.connect(backend.path, timeout=30) as conn:
        # The test's own damage, not backend code: the one SQL string outside the .sql files.
        cur = conn.execute(
            f"UPDATE jobs SET {column} = ? WHERE queue = ? AND id = ?", (value, queue, job_id)
        )
        assert cur.rowcount == 1, f"no job {job_id!r} in {queue!r} to corrupt"
    conn.close()


def unavailable() -> str | None:
    if sqlite3.sqlite_version_info < (3, 35, 0):
        return f"SQLite {sqlite3.sqlite_version} is older than 3.35 (no RETURNING)"
    return None


CASE = BackendCase(name="sqlite", make=make, unavailable=unavailable, corrupt=corrupt, url=url)
