"""Throughput of PostgresBackend alone, before benchmarks/throughput.py exists.

Bulk-enqueues N no-op jobs (batches of 1,000, one statement each), then drains them with
``--loops`` concurrent claim(limit=10) -> settle(COMPLETE x10) loops in this one process
(10 jobs in flight per loop, like one worker with concurrency 10). Prints enqueue jobs/s,
end-to-end jobs/s (start of the enqueue to the last settle) and the pickup latency of a
single job on an idle queue (enqueue -> wait() woken by NOTIFY -> claimed), then drops its
schema.

    .venv/bin/python benchmarks/postgres_loop.py --url postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import asyncpg

from relaymq.backends.base import Outcome, Settle
from relaymq.backends.postgres import PostgresBackend
from relaymq.job import JobState, NewJob


async def drain(backend: PostgresBackend, queue: str, worker: str) -> int:
    done = 0
    while True:
        batch = await backend.claim([queue], worker, 10)
        if not batch.jobs:
            return done
        await backend.settle(
            [Settle(j.claim, Outcome.COMPLETE, result=b"null") for j in batch.jobs]
        )
        done += len(batch.jobs)


async def pickup_latency(url: str, schema: str, samples: int) -> list[float]:
    waiter = PostgresBackend(url, schema=schema)
    producer = PostgresBackend(url, schema=schema)
    await waiter.connect()
    await producer.connect()
    queue = f"lat-{uuid.uuid4().hex[:8]}"
    out: list[float] = []
    try:
        await waiter.wait([queue], 0.01)  # start the LISTEN connection
        for i in range(samples):
            task = asyncio.create_task(waiter.wait([queue], 5))
            await asyncio.sleep(0.01)  # the waiter is blocked on its event
            t0 = time.perf_counter()
            await producer.enqueue([NewJob(queue, f"l{i}", "bench:noop", b"{}")])
            await task
            batch = await waiter.claim([queue], "lat", 1)
            out.append(time.perf_counter() - t0)
            await waiter.settle([Settle(batch.jobs[0].claim, Outcome.COMPLETE)])
    finally:
        await waiter.close()
        await producer.close()
    return out


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--loops", type=int, default=1)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    backend = PostgresBackend(args.url, schema=schema, migrate=True)
    await backend.connect()
    try:
        for run in range(args.runs):
            queue = f"bench-{run}"
            jobs = [
                NewJob(queue, f"j{i}", "bench:noop", b'{"args":[],"kwargs":{}}')
                for i in range(args.jobs)
            ]
            t0 = time.perf_counter()
            for i in range(0, len(jobs), 1000):
                await backend.enqueue(jobs[i : i + 1000])
            t1 = time.perf_counter()
            done = await asyncio.gather(
                *(drain(backend, queue, f"w{k}") for k in range(args.loops))
            )
            t2 = time.perf_counter()
            assert sum(done) == args.jobs, done
            counts = await backend.counts(queue)
            assert counts[JobState.COMPLETED] == args.jobs, counts
            print(
                f"run {run}: enqueue {args.jobs / (t1 - t0):,.0f} jobs/s, "
                f"end-to-end {args.jobs / (t2 - t0):,.0f} jobs/s "
                f"(drain alone {args.jobs / (t2 - t1):,.0f} jobs/s, loops={args.loops})"
            )
        lat = await pickup_latency(args.url, schema, 50)
        print(
            "pickup latency (enqueue -> wait() woken -> claimed): "
            f"p50 {statistics.median(lat) * 1000:.2f} ms, "
            f"p95 {sorted(lat)[int(len(lat) * 0.95)] * 1000:.2f} ms"
        )
    finally:
        await backend.close()
        con = await asyncpg.connect(backend.options.dsn)
        try:
            await con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await con.close()


if __name__ == "__main__":
    asyncio.run(main())
