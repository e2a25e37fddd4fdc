"""The MongoDB case: a MongoDB-protocol server (mongoeco in CI), one database per test.

The server is started by ``make test`` (scripts/services.d/mongodb.sh) on 127.0.0.1:27017;
``RELAYMQ_MONGODB_URL`` points elsewhere. Every test gets a database of its own, named after
its tmp dir, and the database is dropped when the test's last handle closes.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections import Counter
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

from bson import Binary
from pymongo import AsyncMongoClient

from relaymq.backends.base import Backend
from relaymq.backends.mongodb import MongoDBBackend
from relaymq.records.store import Clock
from tests.support.cases import BOGUS_STATE, BackendCase, Damage

SERVER = os.environ.get("RELAYMQ_MONGODB_URL", "mongodb://127.0.0.1:27017").rstrip("/")

_handles: Counter[str] = Counter()


def database_for(tmp: Path) -> str:
    return "relaymq_test_" + hashlib.sha1(str(tmp).encode()).hexdigest()[:16]


def url(tmp: Path) -> str:
    return f"{SERVER}/{database_for(tmp)}"


class _TestBackend(MongoDBBackend):
    """Drops its test database when the last handle on it closes."""

    def heartbeat_handle(self) -> Backend:
        """A plain handle: the test's clean-up stays with the handles the test made."""
        args, kwargs = self._made_with
        return MongoDBBackend(*args, **kwargs)

    async def close(self) -> None:
        _handles[self.database_name] -= 1
        if _handles[self.database_name] <= 0 and self._client is not None:
            del _handles[self.database_name]
            try:
                await self._client.drop_database(self.database_name)
            finally:
                await super().close()
            return
        await super().close()


async def make(clock: Clock | None, tmp: Path) -> Backend:
    backend = _TestBackend(url(tmp), clock=clock)
    await backend.connect()
    _handles[backend.database_name] += 1
    return backend


@cache
def unavailable() -> str | None:
    parts = urlsplit(SERVER)
    host, port = parts.hostname or "127.0.0.1", parts.port or 27017
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError as e:
        return f"no MongoDB-protocol server at {host}:{port} ({e}); run 'make services'"
    return None


async def corrupt(backend: Backend, queue: str, job_id: str, damage: Damage = "field") -> None:
    """Give the job's payload and creation time the wrong BSON types (``field``), or a state
    relaymq does not know (``state``)."""
    assert isinstance(backend, MongoDBBackend)
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(SERVER)
    change: dict[str, object] = (
        {"payload": "not binary", "created_at": Binary(b"not a date")}
        if damage == "field"
        else {"state": BOGUS_STATE}
    )
    try:
        done = await client[backend.database_name]["jobs"].update_one(
            {"queue": queue, "id": job_id}, {"$set": change}
        )
        assert done.matched_count == 1, f"no job {job_id!r} in {queue!r} to corrupt"
    finally:
        await client.close()


CASE = BackendCase(name="mongodb", make=make, unavailable=unavailable, corrupt=corrupt, url=url)
