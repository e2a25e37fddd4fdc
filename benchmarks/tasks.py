"""The benchmark's jobs: a no-op, so the figures measure the queue, not the work; and one that
makes a single Redis call (INCR), since a no-op handler flatters every queue."""

from __future__ import annotations

import os
from typing import Any

from relaymq import task

SIDE_URL_ENV = "RELAYMQ_BENCH_SIDE_URL"
SIDE_KEY_ENV = "RELAYMQ_BENCH_SIDE_KEY"  # throughput.py gives each run a key of its own
SIDE_KEY = "relaymq_bench:side"
DEFAULT_SIDE_URL = "redis://127.0.0.1:6379/0"
_client: Any = None


@task(queue="bench")
async def noop() -> None:
    return None


@task(queue="bench")
async def side_effect() -> None:
    """One INCR on Redis (``RELAYMQ_BENCH_SIDE_URL``), with one client per worker process.

    The key is read on every call, not with the client: an in-process worker (memory://) runs
    one run after another in the same process, each with its own key."""
    global _client
    if _client is None:
        from redis.asyncio import Redis

        _client = Redis.from_url(os.environ.get(SIDE_URL_ENV, DEFAULT_SIDE_URL))
    await _client.incr(os.environ.get(SIDE_KEY_ENV, SIDE_KEY))
