"""The Dramatiq broker and its no-op actor, imported by both dramatiq_bench.py (the driver,
which enqueues) and ``dramatiq dramatiq_tasks`` (the worker).

Dramatiq keeps no job state and has no completion count, so the actor counts itself: one
Redis INCR per job (relaymq, for its part, stores each job's result in its metadata store).
The side-effect workload's actor makes its one INCR on the side key instead, and that key is
the count, so its handler makes one Redis call, not two.  URLs and the side key come from the
environment because the worker is started by Dramatiq's own command line.
"""

from __future__ import annotations

import os

import dramatiq
import redis
from common import side_key, side_url
from dramatiq.brokers.rabbitmq import RabbitmqBroker

AMQP_ENV = "RELAYMQ_BENCH_DRAMATIQ_AMQP"
REDIS_ENV = "RELAYMQ_BENCH_DRAMATIQ_REDIS"
QUEUE = "relaymq_bench_peer"
DONE_KEY = "relaymq_bench_peer:dramatiq:done"

broker = RabbitmqBroker(url=os.environ.get(AMQP_ENV, "amqp://guest:guest@127.0.0.1:5672/"))
dramatiq.set_broker(broker)
counter = redis.Redis.from_url(os.environ.get(REDIS_ENV, "redis://127.0.0.1:6379/9"))
# One sync client per process, made at import (it connects lazily; its pool is thread-safe).
side = redis.Redis.from_url(side_url())
SIDE_KEY = side_key()


@dramatiq.actor(queue_name=QUEUE, max_retries=0)
def noop(i: int) -> None:
    counter.incr(DONE_KEY)


@dramatiq.actor(queue_name=QUEUE, max_retries=0)
def side_effect(i: int) -> None:
    side.incr(SIDE_KEY)
