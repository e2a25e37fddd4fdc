"""Is the cost of claim, settle and counts flat in the number of waiting jobs? (RedisBackend)

Fills one queue to 1,000, 10,000, 100,000 and 1,000,000 waiting jobs and, at each level,
times batches of claim(limit=10) + settle(10 completes) and counts(), client side (median
round trip) and server side (microseconds of Redis per script call, from INFO commandstats).
The jobs a measurement takes are put back, so the level holds. By default it starts its own
throw-away redis-server (no persistence) on a free port and stops it at the end; with --url it
uses a fresh key prefix there and obliterates it afterwards. About 40 s and 0.5 GB of Redis
memory at 1,000,000 jobs.

usage: python benchmarks/redis_flat.py [--url redis://...] [--max 1000000] [--batches 300]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis.asyncio import Redis

from relaymq.backends.redis import RedisBackend
from relaymq.job import JobState, NewJob
from relaymq.records.store import Outcome, Settle

PAYLOAD = b'{"args":[],"kwargs":{}}'


@asynccontextmanager
async def server(url: str | None) -> AsyncIterator[str]:
    if url is not None:
        yield url
        return
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found; pass --url")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        proc = await asyncio.create_subprocess_exec(
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            d,
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            f"{d}/log",
        )
        try:
            client = Redis(port=port)
            for _ in range(200):
                try:
                    await client.ping()
                    break
                except Exception:
                    await asyncio.sleep(0.02)
            await client.aclose()
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.kill()
            await proc.wait()


def jobs(q: str, start: int, n: int) -> list[NewJob]:
    return [
        NewJob(q, f"j{i}", "bench:noop", PAYLOAD, priority=i % 3) for i in range(start, start + n)
    ]


async def evalsha_usec(admin: Redis) -> tuple[int, int]:
    stats = await admin.info("commandstats")
    e = stats.get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return int(e["calls"]), int(e["usec"])


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--url", default=None)
    p.add_argument("--max", type=int, default=1_000_000)
    p.add_argument("--batches", type=int, default=300)
    a = p.parse_args()
    async with server(a.url) as url:
        prefix = f"rmqflat-{uuid.uuid4().hex[:8]}"
        b = RedisBackend(url, prefix=prefix)
        await b.connect()
        admin = Redis.from_url(url.split("?")[0])
        q = "flat"
        filled = 0
        next_id = 0
        print(
            f"{'waiting':>10} {'claim+settle 10 (ms)':>21} {'server us/script':>17} "
            f"{'counts (ms)':>12}"
        )
        try:
            level = 1_000
            while level <= a.max:
                while filled < level:
                    n = min(50_000, level - filled)
                    await b.enqueue(jobs(q, next_id, n))
                    next_id += n
                    filled += n
                batches = min(a.batches, level // 20)
                c0, u0 = await evalsha_usec(admin)
                rtts: list[float] = []
                for _ in range(batches):
                    t0 = time.perf_counter()
                    batch = (await b.claim([q], "w", 10)).jobs
                    await b.settle([Settle(j.claim, Outcome.COMPLETE) for j in batch])
                    rtts.append((time.perf_counter() - t0) * 1000)
                c1, u1 = await evalsha_usec(admin)
                t_counts: list[float] = []
                for _ in range(50):
                    t0 = time.perf_counter()
                    counts = await b.counts(q)
                    t_counts.append((time.perf_counter() - t0) * 1000)
                assert counts[JobState.WAITING] == level - 10 * batches
                rtt, server_us = statistics.median(rtts), (u1 - u0) / max(c1 - c0, 1)
                print(
                    f"{level:>10,} {rtt:>21.3f} {server_us:>17.1f} "
                    f"{statistics.median(t_counts):>12.3f}"
                )
                await b.clean(q, JobState.COMPLETED, older_than=0)
                await b.enqueue(jobs(q, next_id, 10 * batches))  # hold the level
                next_id += 10 * batches
                level *= 10
        finally:
            await b.obliterate(q)
            await admin.aclose()
            await b.close()


if __name__ == "__main__":
    asyncio.run(main())
