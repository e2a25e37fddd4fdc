"""RedisBackend at the backend seam: bulk enqueue, claim/settle loop, pickup latency.

A stand-in for benchmarks/throughput.py until the worker lands: N no-op jobs are enqueued in
bulk, then C concurrent claim loops in this process (like one worker of concurrency C) claim
up to 10 at a time and complete them in one settle per batch. Pickup latency: a claimer
blocked in ``wait`` is woken by a one-job enqueue; the time from the enqueue call to the claim
returning the job is measured. Keys live under a fresh prefix that is obliterated at the end.

usage: python benchmarks/redis_loop.py [--url redis://127.0.0.1:6379/0] [--jobs 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from relaymq.backends.base import Outcome, Settle
from relaymq.backends.redis import RedisBackend
from relaymq.job import JobState, NewJob


async def throughput(url: str, n: int, concurrency: int, batch: int) -> dict[str, float]:
    prefix = f"rmqbench-{uuid.uuid4().hex[:8]}"
    producer = RedisBackend(url, prefix=prefix)
    worker = RedisBackend(url, prefix=prefix)
    await producer.connect()
    await worker.connect()
    q = "bench"
    jobs = [NewJob(q, f"j{i}", "bench:noop", b'{"args":[],"kwargs":{}}') for i in range(n)]
    try:
        done = 0
        t0 = time.perf_counter()
        await producer.enqueue(jobs)
        t_enq = time.perf_counter() - t0

        async def loop() -> None:
            nonlocal done
            while done < n:
                claimed = (await worker.claim([q], "bench-worker", batch)).jobs
                if not claimed:
                    await worker.wait([q], 0.05)
                    continue
                await worker.settle(
                    [Settle(j.claim, Outcome.COMPLETE, result=b"null") for j in claimed]
                )
                done += len(claimed)

        await asyncio.gather(*(loop() for _ in range(concurrency)))
        t_all = time.perf_counter() - t0
        counts = await producer.counts(q)
        assert counts[JobState.COMPLETED] == n, counts
        return {"enqueue_jobs_s": n / t_enq, "e2e_jobs_s": n / t_all}
    finally:
        await producer.obliterate(q)
        await producer.close()
        await worker.close()


async def pickup(url: str, rounds: int) -> list[float]:
    prefix = f"rmqbench-{uuid.uuid4().hex[:8]}"
    producer = RedisBackend(url, prefix=prefix)
    worker = RedisBackend(url, prefix=prefix)
    await producer.connect()
    await worker.connect()
    q = "pickup"
    lat: list[float] = []
    try:
        for i in range(rounds):
            ready = asyncio.Event()
            got: list[float] = []

            async def claimer(ready: asyncio.Event = ready, got: list[float] = got) -> None:
                while True:
                    batch = (await worker.claim([q], "w", 1)).jobs
                    if batch:
                        got.append(time.perf_counter())
                        await worker.settle([Settle(batch[0].claim, Outcome.COMPLETE)])
                        return
                    ready.set()
                    await worker.wait([q], 5)

            task = asyncio.create_task(claimer())
            await ready.wait()
            await asyncio.sleep(0.002)  # let the claimer block in BLPOP
            t0 = time.perf_counter()
            await producer.enqueue([NewJob(q, f"p{i}", "bench:noop", b"{}")])
            await task
            lat.append((got[0] - t0) * 1000)
        return lat
    finally:
        await producer.obliterate(q)
        await producer.close()
        await worker.close()


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    runs = [await throughput(a.url, a.jobs, a.concurrency, a.batch) for _ in range(a.runs)]
    for r in runs:
        enq, e2e = r["enqueue_jobs_s"], r["e2e_jobs_s"]
        print(f"enqueue {enq:>9,.0f} jobs/s   end-to-end {e2e:>8,.0f} jobs/s")
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    enq, e2e = med["enqueue_jobs_s"], med["e2e_jobs_s"]
    print(f"median: enqueue {enq:,.0f} jobs/s, end-to-end {e2e:,.0f} jobs/s")
    lat = sorted(await pickup(a.url, 200))
    print(
        f"pickup latency ms: p50 {lat[len(lat) // 2]:.3f}  p90 {lat[int(len(lat) * 0.9)]:.3f}  "
        f"max {lat[-1]:.3f}"
    )


if __name__ == "__main__":
    asyncio.run(main())
