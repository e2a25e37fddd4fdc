"""The benchmark's jobs: a no-op, so the figures measure the queue, not the work; and one that
makes a single Redis call (INCR), since a no-op handler flatters every queue."""

from __future__ import annotations

import os
from typing import Any

from relaymq import task

SIDE_URL_ENV = "RELAYMQ_BENCH_SIDE_URL"
SIDE_KEY = "relaymq_bench:side"
_client: Any = None


@task(queue="bench")
async def noop() -> None:
    return None


@task(queue="bench")
async def side_effect() -> None:
    """One INCR on Redis (``RELAYMQ_BENCH_SIDE_URL``), with one client per worker process."""
    global _client
    if _client is None:
        from redis.asyncio import Redis

        _client = Redis.from_url(os.environ.get(SIDE_URL_ENV, "redis://127.0.0.1:6379/0"))
    await _client.incr(SIDE_KEY)
