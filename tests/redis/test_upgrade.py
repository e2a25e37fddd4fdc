"""Schedules stored by a relaymq before the meta store are carried into it on connect."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

from relaymq.records.store import StoredSchedule
from relaymq.schedules import store
from tests.redis import support
from tests.support.case_redis import URL


async def test_old_schedules_are_carried_into_the_meta_store(tmp_path: Path) -> None:
    reason = support.unavailable(URL)
    if reason:
        pytest.skip(reason)
    prefix = support.test_prefix(tmp_path)
    g = f"{prefix}:{{{prefix}:global}}"
    client = Redis.from_url(URL)
    try:  # as relaymq stored them before: a hash per schedule and the set of their ids
        await client.hset(
            g + ":schedule:nightly",
            mapping={"spec": b'{"v":1}', "next_ms": 1700000000000, "paused": "1"},
        )
        await client.hset(
            g + ":schedule:hourly",
            mapping={"spec": b'{"v":2}', "next_ms": 1700000060000, "paused": "0"},
        )
        await client.sadd(g + ":schedules", "nightly", "hourly")
        b = await support.make(URL, None, tmp_path)
        try:
            assert await store.load(b) == [
                StoredSchedule("hourly", b'{"v":2}', 1_700_000_060_000),
                StoredSchedule("nightly", b'{"v":1}', 1_700_000_000_000, paused=True),
            ]
            assert await client.exists(g + ":schedules", g + ":schedule:nightly") == 0
            assert await store.advance(b, "hourly", 1_700_000_060_000, 1_700_000_120_000)
        finally:
            await b.close()
    finally:
        await client.aclose()
