"""The huey app and its no-op task, imported by both huey_bench.py (the
driver, which enqueues) and ``huey_consumer huey_tasks.huey`` (the worker).

huey names a task after its module, so the task must live in a module that
both processes import under the same name; the Redis URL comes from the
environment because the consumer is started by huey's own command line.
"""

from __future__ import annotations

import os

import redis
from common import side_key, side_url
from huey import RedisHuey

URL_ENV = "RELAYMQ_BENCH_HUEY_URL"

# results=True (the default): the consumer stores each task's return value in
# huey's result hash, and the driver counts completed jobs with
# huey.result_count() (HLEN of that hash).
huey = RedisHuey(
    "relaymq_bench_peer", url=os.environ.get(URL_ENV, "redis://127.0.0.1:6379/9"), results=True
)


# The side-effect workload's client: one per process, made here rather than on first use
# because the consumer's 10 threads could race to make it (redis-py connects lazily, and its
# connection pool is thread-safe).  The key is this run's, from the driver via the environment.
_side = redis.Redis.from_url(side_url())
_side_key = side_key()


@huey.task()
def side_effect(i: int) -> bool:
    """One INCR on Redis, as relaymq's side_effect task makes."""
    _side.incr(_side_key)
    return True


@huey.task()
def noop(i: int) -> bool:
    # Returns True rather than None: huey does not store None results
    # (store_none=False), and a stored result is how completion is counted.
    return True
