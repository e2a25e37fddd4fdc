"""Oban for Python (oban 0.7.0, Python >= 3.12) on PostgreSQL: enqueue/end-to-end throughput.

Run inside benchmarks/.venvs/oban (run.py does that, with a Python 3.12+ of its own):

    python benchmarks/peers/oban_bench.py --jobs 10000

Choices:
* State: its own database (``relaymq_bench_oban``, created when missing); Oban's schema is
  installed fresh in it before each run (``oban.schema.uninstall`` / ``install``).
* Enqueue: ``Oban.enqueue_many`` (one insert for all N jobs); with ``--single``, one
  ``Oban.enqueue`` per job.
* Worker: this script re-run with ``--role worker``: one process running ``Oban(pool,
  queues={"bench": 10})`` (what ``oban start --queues bench:10`` runs); the worker is
  ``oban_tasks.Bench`` (a no-op, or one Redis INCR with ``--workload side-effect``).
* Completion: ``SELECT count(*) FROM oban_jobs WHERE state = 'completed'`` polled at most
  every 20 ms (Oban keeps completed jobs until its pruner's max age, a day by default).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from importlib.metadata import version
from typing import Any

from common import (
    DEFAULT_POSTGRES_URL,
    BenchError,
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
)

DATABASE = "relaymq_bench_oban"
DEFAULT_JOBS = 10_000


def parse_args() -> Any:
    args = base_parser("Oban for Python on PostgreSQL").parse_args()
    args.url = args.url or DEFAULT_POSTGRES_URL
    args.jobs = args.jobs or DEFAULT_JOBS
    args.dsn = postgres_url_for_db(args.url, DATABASE)
    return args


async def reset_state(args: Any) -> None:
    import psycopg
    from oban import Oban
    from oban.schema import install, uninstall

    async with await psycopg.AsyncConnection.connect(args.url, autocommit=True) as admin:
        found = await admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
        if await found.fetchone() is None:
            await admin.execute(f'CREATE DATABASE "{DATABASE}"')
    pool = await Oban.create_pool(args.dsn)
    try:
        await uninstall(pool)  # DROP ... IF EXISTS: fine on a fresh database
        await install(pool)
    finally:
        await pool.close()


async def drive(args: Any, watchdog: Watchdog) -> None:
    import oban_tasks
    from oban import Oban

    await reset_state(args)
    pool = await Oban.create_pool(args.dsn)
    oban = Oban(pool=pool)

    async def completed() -> int:
        async with pool.connection() as conn:
            rows = await conn.execute("SELECT count(*) FROM oban_jobs WHERE state = 'completed'")
            row = await rows.fetchone()
        return int(row[0]) if row else 0

    async def at_least(target: int) -> bool:
        return await completed() >= target

    env = {oban_tasks.SIDE_ENV: "1"} if args.workload == "side-effect" else {}
    side = SideEffect(args.workload)  # before the worker starts: it reads the run's key
    worker = Worker(self_worker_argv(__file__, sys.argv[1:]), env=env)
    watchdog.worker = worker
    ok = False
    try:
        async with oban:
            await oban.enqueue(oban_tasks.Bench.new({"i": -1}))
            await await_until(lambda: at_least(1), worker, args.deadline, "the warm-up job")
            target = await completed() + args.jobs
            side_before = side.count()
            jobs = [oban_tasks.Bench.new({"i": i}) for i in range(args.jobs)]

            cpu0 = worker.cpu()
            t0 = time.perf_counter()
            if args.single:
                for job in jobs:
                    await oban.enqueue(job)
            else:
                await oban.enqueue_many(jobs)
            t_enqueued = time.perf_counter()
            t_done = await await_until(
                lambda: at_least(target), worker, args.deadline, f"{args.jobs} jobs to complete"
            )
            cpu = worker.cpu() - cpu0
        side.check(side_before + args.jobs)
        ok = True
    finally:
        worker.stop(keep_log=not ok)
        await pool.close()
        side.cleanup()

    emit_result("oban", version("oban"), "postgres", args.jobs, t_enqueued - t0, t_done - t0, cpu)


async def work(args: Any) -> None:
    import oban_tasks
    from oban import Oban

    pool = await Oban.create_pool(args.dsn)
    print(f"oban worker: queue {oban_tasks.QUEUE} with 10 slots", flush=True)
    try:
        async with Oban(pool=pool, queues={oban_tasks.QUEUE: 10}):
            await asyncio.Event().wait()  # until the driver stops this process
    finally:
        await pool.close()


def main() -> None:
    args = parse_args()
    if sys.version_info < (3, 12):
        raise BenchError("Oban for Python needs Python >= 3.12 (run.py makes its venv)")
    run_roles(args, work, drive, "oban/postgres")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    run_main(main)
