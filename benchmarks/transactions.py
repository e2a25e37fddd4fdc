"""What a transactional enqueue costs, per driver, and how soon the outbox relay moves a job.

Enqueue: ``--jobs`` jobs, each in a transaction of its own (BEGIN, the application's own INSERT,
the enqueue with ``connection=``, COMMIT), through each driver, beside two baselines measured
in the same run: ``Queue.add`` outside any transaction, and the same transaction without the
enqueue (BEGIN, INSERT, COMMIT). The overhead of writing the job in the transaction is the
difference between the driver's two figures. Medians of ``--runs``; wall time and this
process's CPU time per job (the database server's own time is not in the CPU figure).

Relay: a worker process of an app on Redis with its outbox in PostgreSQL (or SQLite), idle;
``--samples`` transactional enqueues, one every 20 ms; for each, the time from the return of
COMMIT to the job's ``job:waiting`` event from Redis (the relay's move).

    flock /tmp/relaymq-bench.lock python -m benchmarks.transactions --jobs 10000 --runs 3
    flock /tmp/relaymq-bench.lock python -m benchmarks.transactions --relay --samples 200
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg

import relaymq
from tests.transactions.drivers import DRIVERS, Asyncpg, Driver, Sqlite3, Where

SERVER = os.environ.get("RELAYMQ_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
DATABASE = "relaymq_test"
REDIS = os.environ.get("RELAYMQ_BENCH_REDIS", "redis://127.0.0.1:6379/0")
ROOT = Path(__file__).resolve().parents[1]


async def timed(n: int, one: Callable[[int], Awaitable[None]]) -> tuple[float, float]:
    """(wall, CPU) microseconds per call of ``one(i)``, ``i`` in ``range(n)``."""
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        await one(i)
    return (
        (time.perf_counter() - wall) / n * 1e6,
        (time.process_time() - cpu) / n * 1e6,
    )


async def enqueue_costs(jobs: int, runs: int, names: set[str] | None) -> None:
    schema = f"bench_tx_{os.getpid()}"
    folder = Path(tempfile.mkdtemp(prefix="relaymq-bench-tx-"))
    setups = {
        "postgres": (
            f"{SERVER}/{DATABASE}?schema={schema}&migrate=true&retention=0",
            Where(dsn=f"{SERVER}/{DATABASE}", schema=schema),
        ),
        "sqlite": (f"sqlite:///{folder}/bench.db", Where(path=str(folder / "bench.db"))),
    }
    print(f"{jobs} jobs, one per transaction; medians of {runs} runs; us per job (wall / CPU)")
    print(
        "| backend | driver | Queue.add, no transaction | transaction, no job "
        "| transaction with the job | the job's part |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for kind, (url, where) in setups.items():
        app = relaymq.App(url)

        @app.task(name="bench:noop", queue="bench")
        async def noop(n: int) -> None:
            pass

        await app.connect()
        queue = relaymq.Queue("bench", app)
        await _orders(where)
        try:
            for make in DRIVERS:
                driver = make(where)
                if driver.kind != kind or (names and driver.name not in names):
                    continue
                await driver.open()
                try:
                    rows = []
                    add = _adder(app, queue, noop, driver)
                    for _ in range(runs):
                        await queue.obliterate()
                        base = await timed(jobs, _outside(queue, noop))
                        plain = await timed(jobs, _in(driver, None))
                        full = await timed(jobs, _in(driver, add))
                        rows.append((base, plain, full))
                    med = [
                        tuple(statistics.median(r[k][m] for r in rows) for m in (0, 1))
                        for k in range(3)
                    ]
                    extra = (med[2][0] - med[1][0], med[2][1] - med[1][1])
                    cells = " | ".join(f"{w:.0f} / {c:.0f}" for w, c in (*med, extra))
                    print(f"| {kind} | {driver.name} | {cells} |", flush=True)
                finally:
                    await driver.close()
        finally:
            await queue.obliterate()
            await app.close()
            if kind == "postgres":
                con = await asyncpg.connect(f"{SERVER}/{DATABASE}")
                await con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
                await con.close()


def _adder(
    app: relaymq.App, queue: relaymq.Queue, task: relaymq.Task[..., None], driver: Driver
) -> Callable[[int], Awaitable[None]]:
    if driver.sync:

        async def add_sync(i: int) -> None:
            app.enqueue_bulk_sync([task.call(i)], connection=driver.connection)

        return add_sync

    async def add(i: int) -> None:
        await queue.add(task.call(i), connection=driver.connection)

    return add


def _outside(
    queue: relaymq.Queue, task: relaymq.Task[..., None]
) -> Callable[[int], Awaitable[None]]:
    async def one(i: int) -> None:
        await queue.add(task.call(i))

    return one


def _in(
    d: Driver, add: Callable[[int], Awaitable[None]] | None
) -> Callable[[int], Awaitable[None]]:
    """One transaction of the application's: its own INSERT, and the job when ``add``."""

    async def one(i: int) -> None:
        await d.begin()
        await d.write(i)
        if add is not None:
            await add(i)
        await d.commit()

    return one


async def _orders(w: Where) -> None:
    if w.schema:
        con = await asyncpg.connect(w.dsn)
        await con.execute(f"CREATE TABLE IF NOT EXISTS {w.orders} (n int)")
        await con.close()
    else:
        import sqlite3

        with sqlite3.connect(w.path) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS orders (n integer)")
        conn.close()


async def relay_latency(samples: int, outbox_kind: str) -> None:
    """p50/p95 from COMMIT to the moved job's event on Redis, an idle worker relaying."""
    tag = f"bench-relay-{os.getpid()}"
    folder = Path(tempfile.mkdtemp(prefix="relaymq-bench-relay-"))
    if outbox_kind == "postgres":
        outbox = f"{SERVER}/{DATABASE}?schema={tag.replace('-', '_')}&migrate=true"
        where = Where(dsn=f"{SERVER}/{DATABASE}", schema=tag.replace("-", "_"))
    else:
        outbox = f"sqlite:///{folder}/app.db?poll_max=0.05"
        where = Where(path=str(folder / "app.db"))
    main = f"{REDIS}?prefix={tag}"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RELAYMQ_BENCH_MAIN": main,
        "RELAYMQ_BENCH_OUTBOX": outbox,
        "RELAYMQ_LOG_LEVEL": "WARNING",
    }
    app = relaymq.App(main, outbox=outbox)
    ops = await app.connect()
    await _orders(where)
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "relaymq", "worker", "benchmarks.transactions:relay_app",
        "-q", "bench-relay", env=env, cwd=ROOT,
    )  # fmt: skip
    latencies: list[float] = []
    driver: Driver = Asyncpg(where) if outbox_kind == "postgres" else Sqlite3(where)
    await driver.open()
    try:
        events = await ops.subscribe()
        task = relay_app.tasks["bench:relayed"]
        async with asyncio.timeout(60):  # the worker starts (and takes the relay's lease)
            async for event in events:
                if event.name == "worker:online":
                    break
        await asyncio.sleep(1)  # its relay's first turn
        for i in range(samples):
            await driver.begin()
            if driver.sync:
                [h] = app.enqueue_bulk_sync([task.call(i)], connection=driver.connection)
            else:
                h = await relaymq.Queue("bench-relay", app).add(
                    task.call(i), connection=driver.connection
                )
            await driver.commit()
            committed = time.perf_counter()
            async for event in events:
                if event.job_id == h.id and event.name == "job:waiting":
                    break
            latencies.append((time.perf_counter() - committed) * 1000)
            await asyncio.sleep(0.02)
        await events.aclose()
    finally:
        worker.terminate()
        await worker.wait()
        await driver.close()
        await relaymq.Queue("bench-relay", app).obliterate()
        await app.close()
        if outbox_kind == "postgres":
            con = await asyncpg.connect(f"{SERVER}/{DATABASE}")
            await con.execute(f'DROP SCHEMA IF EXISTS "{where.schema}" CASCADE')
            await con.close()
    latencies.sort()
    p50 = statistics.median(latencies)
    p95 = latencies[int(len(latencies) * 0.95) - 1]
    print(f"relay, outbox in {outbox_kind}: {samples} jobs, p50 {p50:.1f} ms, p95 {p95:.1f} ms")


relay_app = relaymq.App(
    os.environ.get("RELAYMQ_BENCH_MAIN", "memory://"),
    outbox=os.environ.get("RELAYMQ_BENCH_OUTBOX"),
)


@relay_app.task(name="bench:relayed", queue="bench-relay")
async def relayed(n: int) -> None:
    pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--drivers", help="comma-separated driver names (default: all)")
    parser.add_argument("--relay", action="store_true", help="measure the outbox relay")
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    if args.relay:
        for kind in ("postgres", "sqlite"):
            asyncio.run(relay_latency(args.samples, kind))
        return
    names = set(args.drivers.split(",")) if args.drivers else None
    asyncio.run(enqueue_costs(args.jobs, args.runs, names))


if __name__ == "__main__":
    main()
