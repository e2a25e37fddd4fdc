"""Schedules stored by a relaymq before the meta store are carried into it on connect."""

from __future__ import annotations

from pathlib import Path

from bson import Binary
from pymongo import AsyncMongoClient

from relaymq.records.store import StoredSchedule
from relaymq.schedules import store
from tests.conftest import require
from tests.support import case_mongodb


async def test_old_schedules_are_carried_into_the_meta_store(tmp_path: Path) -> None:
    require(case_mongodb.CASE)
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(case_mongodb.SERVER)
    try:  # as relaymq stored them before: a document per schedule
        old = client[case_mongodb.database_for(tmp_path)]["schedules"]
        await old.insert_many(
            [
                {
                    "_id": "nightly",
                    "spec": Binary(b'{"v":1}'),
                    "next_ms": 1_700_000_000_000,
                    "paused": True,
                },
                {
                    "_id": "hourly",
                    "spec": Binary(b'{"v":2}'),
                    "next_ms": 1_700_000_060_000,
                    "paused": False,
                },
            ]
        )
        b = await case_mongodb.CASE.make(None, tmp_path)
        try:
            assert await store.load(b) == [
                StoredSchedule("hourly", b'{"v":2}', 1_700_000_060_000),
                StoredSchedule("nightly", b'{"v":1}', 1_700_000_000_000, paused=True),
            ]
            assert await old.count_documents({}) == 0
            assert await store.advance(b, "hourly", 1_700_000_060_000, 1_700_000_120_000)
        finally:
            await b.close()
    finally:
        await client.close()
