"""The Dramatiq broker and its no-op actor, imported by both dramatiq_bench.py (the driver,
which enqueues) and ``dramatiq dramatiq_tasks`` (the worker).

Dramatiq keeps no job state and has no completion count, so the actor counts itself: one
Redis INCR per job (relaymq, for its part, stores each job's result in its metadata store).
URLs come from the environment because the worker is started by Dramatiq's own command line.
"""

from __future__ import annotations

import os

import dramatiq
import redis
from dramatiq.brokers.rabbitmq import RabbitmqBroker

AMQP_ENV = "RELAYMQ_BENCH_DRAMATIQ_AMQP"
REDIS_ENV = "RELAYMQ_BENCH_DRAMATIQ_REDIS"
QUEUE = "relaymq_bench_peer"
DONE_KEY = "relaymq_bench_peer:dramatiq:done"

broker = RabbitmqBroker(url=os.environ.get(AMQP_ENV, "amqp://guest:guest@127.0.0.1:5672/"))
dramatiq.set_broker(broker)
counter = redis.Redis.from_url(os.environ.get(REDIS_ENV, "redis://127.0.0.1:6379/9"))


@dramatiq.actor(queue_name=QUEUE, max_retries=0)
def noop(i: int) -> None:
    counter.incr(DONE_KEY)
