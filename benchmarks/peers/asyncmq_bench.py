"""asyncmq 0.10.1 on Redis, PostgreSQL or RabbitMQ: throughput for N no-op jobs.

Run inside benchmarks/.venvs/asyncmq (run.py does that):

    python benchmarks/peers/asyncmq_bench.py --backend redis    --jobs 10000
    python benchmarks/peers/asyncmq_bench.py --backend postgres --jobs 1000
    python benchmarks/peers/asyncmq_bench.py --backend rabbitmq --jobs 10000

Choices:
* Enqueue: ``Queue.add_bulk()``, asyncmq's bulk API.  In 0.10.1 it routes
  every job through ``Queue.add()`` (one backend enqueue per job, by design,
  so per-job semantics hold), so it is effectively a tight loop.
* ``--single``: one ``Queue.add()`` per job (the same backend calls, without
  add_bulk's wrapper).  ``--workload side-effect``: the task ``side_effect``,
  one INCR with a redis.asyncio client made once per worker process.
* Worker: this script re-run with ``--role worker``: one process running
  ``Queue(name, backend, concurrency=10).run()`` -- the same ``run_worker``
  loop that ``asyncmq worker start QUEUE --concurrency 10`` runs, i.e. up to
  10 jobs in flight in one asyncio event loop.
* Completion, polled every 20 ms:
  - redis: HLEN of asyncmq's per-queue result hash (``jobs:<queue>:results``),
    which the worker's completion script fills in for every completed job;
  - postgres: ``count(*)`` of rows with status 'completed' in asyncmq's own
    jobs table;
  - rabbitmq: asyncmq keeps no cheap count there (job metadata is one Redis
    key per job), so the worker subscribes to asyncmq's own ``job:completed``
    event and INCRs a counter key in the metadata Redis db -- one extra Redis
    round trip per job on this backend only.
* The RabbitMQ backend is marked beta by asyncmq; it publishes jobs to a
  durable AMQP queue and keeps all job metadata in a job store, here the
  default ``RabbitMQJobStore`` on Redis (``--redis-url``, default db 9).
  In 0.10.1 the worker calls ``resolve_dependency()`` after every completed
  job, and on this backend that loads every job of the queue from the
  metadata store (``all_jobs()``), as does the delayed-job scanner once a
  second: the cost per job grows with the number of jobs, so the run time
  is quadratic in N (measured here: 300 jobs ~18 s, 500 jobs ~71 s).  The
  default is therefore 200 jobs; 10,000 would take hours.
* PostgreSQL: end-to-end throughput also falls as N grows (measured here:
  ~190 jobs/s at 200 jobs, ~150 at 300, ~60-80 at 1,000), hence the
  default of 1,000 jobs.
* State we own and reset before each run: the Redis db in --url/--redis-url
  (FLUSHDB; db 0 is refused), asyncmq's tables in the dedicated PostgreSQL
  database --database (dropped and recreated by asyncmq's own installer;
  the database is created if missing), and the AMQP queues
  ``relaymq_bench_peer`` and ``relaymq_bench_peer.dlq`` (deleted).
"""

from __future__ import annotations

import sys
import time
from importlib.metadata import version
from typing import Any

import anyio
from asyncmq.queues import Queue
from asyncmq.tasks import task
from common import (
    CONCURRENCY,
    DEFAULT_AMQP_URL,
    DEFAULT_POSTGRES_DB,
    DEFAULT_POSTGRES_URL,
    DEFAULT_REDIS_URL,
    PREFIX,
    SideEffect,
    Watchdog,
    Worker,
    await_until,
    base_parser,
    emit_result,
    postgres_url_for_db,
    redis_db_url,
    run_main,
    self_worker_argv,
    side_key,
    side_url,
)

QUEUE = PREFIX
COUNTER_KEY = f"{PREFIX}:completed"  # rabbitmq only
# Smaller defaults where asyncmq 0.10.1 is slow (see the module docstring).
DEFAULT_JOBS = {"redis": 10_000, "postgres": 1_000, "rabbitmq": 200}


@task(queue=QUEUE)
async def noop(i: int) -> None:
    """The no-op job.  Registered as ``__main__.noop`` in both the driver and
    the worker, because both run this file as a script."""
    return None


_side: Any = None


@task(queue=QUEUE)
async def side_effect(i: int) -> None:
    """One INCR on Redis; the client is made on first use, once per worker process."""
    global _side
    if _side is None:
        from redis.asyncio import Redis

        _side = Redis.from_url(side_url())
    await _side.incr(side_key())


def parse_args(argv: list[str] | None = None) -> Any:
    p = base_parser("asyncmq on Redis / PostgreSQL / RabbitMQ")
    p.add_argument("--backend", choices=sorted(DEFAULT_JOBS), default="redis")
    p.add_argument(
        "--redis-url",
        default=DEFAULT_REDIS_URL,
        help="rabbitmq backend only: Redis db for asyncmq's job metadata store",
    )
    p.add_argument(
        "--database",
        default=DEFAULT_POSTGRES_DB,
        help="postgres backend only: dedicated database (created if missing)",
    )
    args = p.parse_args(argv)
    default_url = {
        "redis": DEFAULT_REDIS_URL,
        "postgres": DEFAULT_POSTGRES_URL,
        "rabbitmq": DEFAULT_AMQP_URL,
    }[args.backend]
    args.url = args.url or default_url
    args.jobs = args.jobs or DEFAULT_JOBS[args.backend]
    if args.backend == "redis":
        redis_db_url(args.url)
    if args.backend == "rabbitmq":
        redis_db_url(args.redis_url)
    return args


def make_backend(args: Any) -> Any:
    if args.backend == "redis":
        from asyncmq.backends.redis import RedisBackend

        return RedisBackend(args.url)
    if args.backend == "postgres":
        from asyncmq.backends.postgres import PostgresBackend

        return PostgresBackend(dsn=postgres_url_for_db(args.url, args.database))
    from asyncmq.backends.rabbitmq import RabbitMQBackend

    return RabbitMQBackend(rabbit_url=args.url, redis_url=args.redis_url)


# --- state reset (driver, before the worker starts) --------------------------


async def reset_state(args: Any) -> None:
    if args.backend in ("redis", "rabbitmq"):
        import redis.asyncio as aioredis

        r = aioredis.from_url(args.url if args.backend == "redis" else args.redis_url)
        await r.flushdb()
        await r.aclose()
    if args.backend == "postgres":
        import asyncpg
        from asyncmq.core.utils.postgres import install_or_drop_postgres_backend

        admin = await asyncpg.connect(args.url)
        try:
            exists = await admin.fetchval(
                "SELECT 1 FROM pg_database WHERE datname = $1", args.database
            )
            if not exists:
                await admin.execute(f'CREATE DATABASE "{args.database}"')
        finally:
            await admin.close()
        # asyncmq's installer drops and recreates its own tables.
        await install_or_drop_postgres_backend(postgres_url_for_db(args.url, args.database))
    if args.backend == "rabbitmq":
        import aio_pika

        conn = await aio_pika.connect(args.url)
        try:
            channel = await conn.channel()
            for name in (QUEUE, QUEUE + ".dlq"):
                await channel.queue_delete(name)
        finally:
            await conn.close()


# --- completion counters (driver) -------------------------------------------


async def make_counter(args: Any, backend: Any) -> tuple[Any, Any]:
    """Return (count_completed, close) coroutine functions for this backend."""
    if args.backend == "redis":
        # Private helper, used so the key stays in sync with asyncmq's own naming.
        key = backend._job_result_key(QUEUE)

        async def count() -> int:
            return int(await backend.redis.hlen(key))

        async def close() -> None:
            return None

        return count, close

    if args.backend == "postgres":
        import asyncpg
        from asyncmq import monkay

        conn = await asyncpg.connect(postgres_url_for_db(args.url, args.database))
        table = monkay.settings.postgres_jobs_table_name
        sql = f"SELECT count(*) FROM {table} WHERE queue_name = $1 AND status = 'completed'"

        async def count() -> int:
            return int(await conn.fetchval(sql, QUEUE))

        return count, conn.close

    import redis.asyncio as aioredis

    r = aioredis.from_url(args.redis_url)

    async def count() -> int:
        return int(await r.get(COUNTER_KEY) or 0)

    return count, r.aclose


# --- the two roles -----------------------------------------------------------


async def drive(args: Any, watchdog: Watchdog) -> None:
    await reset_state(args)
    backend = make_backend(args)
    queue = Queue(QUEUE, backend=backend)
    count, close = await make_counter(args, backend)

    side = SideEffect(args.workload)  # before the worker starts: it reads the run's key
    job = side_effect if side.enabled else noop
    worker = Worker(self_worker_argv(__file__, sys.argv[1:]))
    watchdog.worker = worker
    ok = False
    try:
        # Warm-up: one job proves the worker is up before the clock starts.
        await queue.add(task_id=job.task_id, args=[-1])
        await await_until(lambda: _at_least(count, 1), worker, args.deadline, "the warm-up job")
        target = await count() + args.jobs
        side_before = side.count()
        batch = [{"task_id": job.task_id, "args": [i]} for i in range(args.jobs)]

        cpu0 = worker.cpu()
        t0 = time.perf_counter()
        if args.single:
            for i in range(args.jobs):
                await queue.add(task_id=job.task_id, args=[i])
        else:
            await queue.add_bulk(batch)
        t_enqueued = time.perf_counter()
        t_done = await await_until(
            lambda: _at_least(count, target), worker, args.deadline, f"{args.jobs} jobs to complete"
        )
        cpu = worker.cpu() - cpu0
        side.check(side_before + args.jobs)
        ok = True
    finally:
        worker.stop(keep_log=not ok)
        side.cleanup()
        await close()
        if hasattr(backend, "close"):
            await backend.close()
        if args.backend != "postgres":  # free the Redis memory / AMQP queue we used
            await reset_state(args)

    emit_result(
        "asyncmq", version("asyncmq"), args.backend, args.jobs, t_enqueued - t0, t_done - t0, cpu
    )


async def _at_least(count: Any, target: int) -> bool:
    return bool(await count() >= target)


async def work(args: Any) -> None:
    backend = make_backend(args)
    if args.backend == "rabbitmq":
        import redis.asyncio as aioredis
        from asyncmq.core.event import event_emitter

        r = aioredis.from_url(args.redis_url)

        async def on_completed(_job: Any) -> None:
            await r.incr(COUNTER_KEY)

        event_emitter.on("job:completed", on_completed)
    print(f"asyncmq worker: backend={args.backend} concurrency={CONCURRENCY}", flush=True)
    await Queue(QUEUE, backend=backend, concurrency=CONCURRENCY).run()


def quiet_logging() -> None:
    """asyncmq's default logging config puts the root logger at DEBUG, which
    logs every AMQP frame and Redis connection; keep it to warnings (the
    equivalent of huey_consumer -q) so logging is not what gets measured."""
    from asyncmq.core.utils.logging import StandardLoggingConfig
    from asyncmq.logging import setup_logging

    setup_logging(StandardLoggingConfig(level="WARNING"))


def main() -> None:
    args = parse_args()
    quiet_logging()
    if args.role == "worker":
        anyio.run(work, args)
        return
    watchdog = Watchdog(args.deadline, f"asyncmq/{args.backend}").start()
    try:
        anyio.run(drive, args, watchdog)
    finally:
        watchdog.cancel()


if __name__ == "__main__":
    run_main(main)
