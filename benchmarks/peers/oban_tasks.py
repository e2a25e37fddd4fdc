"""The Oban worker the oban bench enqueues (imported by the driver and the worker process, so
both name it ``oban_tasks.Bench``): a no-op, or one Redis INCR per job when
``RELAYMQ_BENCH_SIDE`` is set (the side-effect workload)."""

from __future__ import annotations

import os
from typing import Any

from common import side_key, side_url
from oban import worker

QUEUE = "bench"
SIDE_ENV = "RELAYMQ_BENCH_SIDE"
_side: Any = None


@worker(queue=QUEUE)
class Bench:
    async def process(self, job: Any) -> None:
        global _side
        if os.environ.get(SIDE_ENV):
            if _side is None:
                from redis.asyncio import Redis

                _side = Redis.from_url(side_url())  # once per process: one event loop, no race
            await _side.incr(side_key())
