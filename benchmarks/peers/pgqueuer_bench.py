"""pgqueuer 1.6.0 on PostgreSQL: enqueue/end-to-end throughput for N no-op jobs.

Run inside benchmarks/.venvs/pgqueuer (run.py does that):

    python benchmarks/peers/pgqueuer_bench.py --jobs 10000 \
        --url postgresql://postgres@127.0.0.1:5432/postgres

Choices:
* Enqueue: pgqueuer's bulk API -- ``Queries.enqueue()`` given lists, which
  inserts all N jobs with one INSERT ... SELECT unnest(...) statement.
* Worker: this script re-run with ``--role worker``: one process running
  ``PgQueuer.from_asyncpg_connection(conn).run()`` (what ``pgq run`` runs)
  whose single entrypoint has ``concurrency_limit=10``, with ``run()``'s
  defaults otherwise (batch_size 10, LISTEN/NOTIFY wake-ups).  pgqueuer's
  other knob, ``max_concurrent_tasks``, cannot be 10 with the default batch
  size (it must be >= 2 * batch_size), so the per-entrypoint limit is the
  closest equivalent of "concurrency 10".
* Completion: pgqueuer deletes a job's row from its queue table once the job
  is done (and logs it), so the driver polls every 20 ms until no row is left
  in that table (a cheap EXISTS query; pgqueuer's ``Queries.queue_size()`` is
  a full GROUP BY, used only as a final cross-check -- see drive()).
* ``--single``: one ``Queries.enqueue()`` call (one INSERT) per job.
* ``--workload side-effect``: the entrypoint makes one INCR with a redis.asyncio
  client made once in the worker process.
* ``--enqueue-only``: no worker; prints the enqueue loop's calls/s (one
  ``Queries.enqueue()`` per job), this process's CPU and the local postgres
  processes' CPU per call, beside ``benchmarks/single_enqueue.py --server
  postgres`` (what relaymq's producer alone pays).
* State: the dedicated database --database (default relaymq_bench_peer) is
  created if missing; pgqueuer's own objects in it are uninstalled and
  installed afresh before each run.  Nothing else is touched.
"""

from __future__ import annotations

import sys
import time
from importlib.metadata import version
from typing import Any

import asyncpg
from common import (
    CONCURRENCY,
    DEFAULT_POSTGRES_DB,
    DEFAULT_POSTGRES_URL,
    PREFIX,
    BenchError,
    Calls,
    SideEffect,
    Watchdog,
    Worker,
    await_until,
    base_parser,
    emit_result,
    postgres_url_for_db,
    run_main,
    run_roles,
    self_worker_argv,
    side_key,
    side_url,
)
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries

ENTRYPOINT = PREFIX + "_noop"
DEFAULT_JOBS = 10_000


def parse_args() -> Any:
    p = base_parser("pgqueuer on PostgreSQL")
    p.add_argument(
        "--database", default=DEFAULT_POSTGRES_DB, help="dedicated database (created if missing)"
    )
    p.add_argument("--enqueue-only", action="store_true", help="no worker (docstring)")
    args = p.parse_args()
    args.url = args.url or DEFAULT_POSTGRES_URL
    args.jobs = args.jobs or DEFAULT_JOBS
    args.dsn = postgres_url_for_db(args.url, args.database)
    return args


async def reset_state(args: Any) -> None:
    admin = await asyncpg.connect(args.url)
    try:
        if not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", args.database):
            await admin.execute(f'CREATE DATABASE "{args.database}"')
    finally:
        await admin.close()
    conn = await asyncpg.connect(args.dsn)
    try:
        queries = Queries(AsyncpgDriver(conn))
        if await queries.schema_is_installed():
            await queries.uninstall()
        await queries.install()
    finally:
        await conn.close()


async def drive(args: Any, watchdog: Watchdog) -> None:
    await reset_state(args)
    conn = await asyncpg.connect(args.dsn)
    queries = Queries(AsyncpgDriver(conn))
    if args.enqueue_only:
        try:
            await enqueue_only(queries, args.jobs)
        finally:
            await conn.close()
        return

    # pgqueuer deletes a job's row once the job is done.  Its count API,
    # Queries.queue_size(), is a GROUP BY over the whole queue table (~6 ms of
    # server time with 10k rows), too heavy to run every 20 ms on 2 cores
    # without slowing the peer down, so the poll asks PostgreSQL whether any
    # row is left in pgqueuer's queue table (~0.5 ms), and queue_size() is
    # used once at the end as a cross-check.
    any_row_left = f"SELECT EXISTS (SELECT 1 FROM {queries.qbe.settings.qualified.queue_table})"

    async def queue_empty() -> bool:
        return not await conn.fetchval(any_row_left)

    side = SideEffect(args.workload)  # before the worker starts: it reads the run's key
    worker = Worker(self_worker_argv(__file__, sys.argv[1:]))
    watchdog.worker = worker
    ok = False
    try:
        # Warm-up: one job proves the worker is up before the clock starts.
        await queries.enqueue(ENTRYPOINT, None)
        await await_until(queue_empty, worker, args.deadline, "the warm-up job")
        side_before = side.count()

        cpu0 = worker.cpu()
        t0 = time.perf_counter()
        if args.single:  # one INSERT per call
            for _ in range(args.jobs):
                await queries.enqueue(ENTRYPOINT, None)
        else:
            await queries.enqueue([ENTRYPOINT] * args.jobs, [None] * args.jobs, [0] * args.jobs)
        t_enqueued = time.perf_counter()
        t_done = await await_until(
            queue_empty, worker, args.deadline, f"{args.jobs} jobs to complete"
        )
        cpu = worker.cpu() - cpu0
        left = sum(row.count for row in await queries.queue_size())
        if left:
            raise BenchError(f"queue_size() still reports {left} jobs after the table emptied")
        side.check(side_before + args.jobs)
        ok = True
    finally:
        worker.stop(keep_log=not ok)
        await conn.close()
        side.cleanup()

    emit_result(
        "pgqueuer", version("pgqueuer"), "postgres", args.jobs, t_enqueued - t0, t_done - t0, cpu
    )


async def enqueue_only(queries: Queries, jobs: int) -> None:
    """Three timed loops of ``jobs`` single enqueues, no worker."""
    await queries.enqueue(ENTRYPOINT, None)  # the connection's statements prepared
    calls = Calls("postgres")
    for _ in range(3):
        calls.start()
        for _ in range(jobs):
            await queries.enqueue(ENTRYPOINT, None)
        calls.stop(jobs)
    print(f"pgqueuer {version('pgqueuer')} enqueue alone: {calls.summary()}")


async def work(args: Any) -> None:
    conn = await asyncpg.connect(args.dsn)
    pgq = PgQueuer.from_asyncpg_connection(conn)

    side: Any = None
    key = side_key()
    if args.workload == "side-effect":  # one INCR per job, one client per worker process
        from redis.asyncio import Redis

        side = Redis.from_url(side_url())

    @pgq.entrypoint(ENTRYPOINT, concurrency_limit=CONCURRENCY)
    async def noop(job: Job) -> None:
        if side is not None:
            await side.incr(key)

    print(f"pgqueuer worker: entrypoint={ENTRYPOINT} concurrency_limit={CONCURRENCY}", flush=True)
    await pgq.run()


def main() -> None:
    args = parse_args()
    run_roles(args, work, drive, "pgqueuer/postgres")


if __name__ == "__main__":
    run_main(main)
