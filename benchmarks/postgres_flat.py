"""Claim cost against table size: is a claim as cheap with 1,000,000 jobs as with 1,000?

Grows one queue's backlog of waiting jobs to 1k, 10k, 100k and 1M (bulk enqueue, 10,000 per
statement) and, at each size, times claim(limit=10) and settle(COMPLETE x10) over a number of
rounds; the completed jobs stay in the table too. Prints the median and p95 per size. Runs in
its own schema, dropped at the end, and stops at --deadline seconds (default 600).

    .venv/bin/python benchmarks/postgres_flat.py --url postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import asyncpg

from relaymq.backends.postgres import PostgresBackend
from relaymq.job import JobState, NewJob
from relaymq.records.store import Outcome, Settle

SIZES = (1_000, 10_000, 100_000, 1_000_000)
CHUNK = 10_000


def pct(values: list[float], p: float) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * p))]


async def run(url: str, rounds: int, deadline: float, sizes: tuple[int, ...]) -> None:
    schema = f"flat_{uuid.uuid4().hex[:10]}"
    backend = PostgresBackend(url, schema=schema, migrate=True, retention=0)
    await backend.connect()
    queue = "flat"
    stored = 0
    completed = 0
    stop_at = time.monotonic() + deadline
    try:
        print(
            f"{'jobs in table':>14} {'claim p50':>10} {'claim p95':>10} "
            f"{'settle p50':>11} {'counts p50':>11}"
        )
        for size in sizes:
            while stored < size:
                if time.monotonic() > stop_at:
                    print(f"deadline reached while filling to {size:,}: stopping")
                    return
                n = min(CHUNK, size - stored)
                await backend.enqueue(
                    [NewJob(queue, f"f{stored + i}", "bench:noop", b"{}") for i in range(n)]
                )
                stored += n
            claims: list[float] = []
            settles: list[float] = []
            counts: list[float] = []
            for _ in range(min(rounds, size // 20)):  # take at most half the backlog
                t0 = time.perf_counter()
                batch = await backend.claim([queue], "flat", 10)
                t1 = time.perf_counter()
                await backend.settle([Settle(j.claim, Outcome.COMPLETE) for j in batch.jobs])
                t2 = time.perf_counter()
                c = await backend.counts(queue)
                t3 = time.perf_counter()
                claims.append(t1 - t0)
                settles.append(t2 - t1)
                counts.append(t3 - t2)
                assert len(batch.jobs) == 10
                completed += 10
            assert sum(c.values()) == stored and c[JobState.COMPLETED] == completed
            print(
                f"{size:>14,} {statistics.median(claims) * 1000:>8.2f}ms "
                f"{pct(claims, 0.95) * 1000:>8.2f}ms {statistics.median(settles) * 1000:>9.2f}ms "
                f"{statistics.median(counts) * 1000:>9.2f}ms"
            )
    finally:
        await backend.close()
        con = await asyncpg.connect(backend.options.dsn)
        try:
            await con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await con.close()


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--deadline", type=float, default=600.0)
    p.add_argument("--max-jobs", type=int, default=SIZES[-1])
    args = p.parse_args()
    sizes = tuple(s for s in SIZES if s <= args.max_jobs)
    asyncio.run(run(args.url, args.rounds, args.deadline, sizes))


if __name__ == "__main__":
    main()
