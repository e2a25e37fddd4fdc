"""Retention under a steady workload: the store's size reaches a plateau, and what the cleaner
costs in throughput, on any backend URL.

    python benchmarks/retention.py --url redis://127.0.0.1:6379/0 --jobs 300000 --every 100000
    python benchmarks/retention.py --url sqlite:////tmp/r.db --jobs 0 --compare 50000 --runs 5

Plateau (``--jobs``): one in-process worker runs ``--jobs`` no-op jobs that a producer in the
same process keeps fed (a backlog of at most ``--backlog``), on a queue whose completed jobs are
kept ``--retention`` seconds, the elected maintenance passing every ``--interval`` seconds.
Every ``--every`` jobs it prints the store's size (Redis ``used_memory``, the SQLite file and
its WAL, PostgreSQL's ``relaymq_jobs`` with its indexes and TOAST, MongoDB's ``jobs``
collection by ``collStats``: its documents and its indexes), the finished jobs still stored
and the jobs/s of that stretch. A plateau: the size stops growing once the retention window
is full. PostgreSQL reuses the space of deleted rows once (auto)vacuum has passed: on a server
with autovacuum off (this machine's test server), ``--vacuum-every S`` runs a plain ``VACUUM``
of ``relaymq_jobs`` every S seconds in its stead.

Cleaner on against off (``--compare N``): ``--runs`` pairs of steady runs of N jobs (fed as
they complete, as above), on then off alternately, each on a queue of its own: on, completed
jobs are kept 1 s and the maintenance passes every second, so the cleaner deletes as many
jobs as complete, and the next jobs reuse the space it frees; off, they are kept for ever.
Prints the median jobs/s of each and their ratio, and the median of the ratios of each pair
(runs side by side: what a machine's drift over the runs cancels out of). A run should last
several maintenance intervals (seconds) for the cleaner to pass in it: ``--compare 100000``
on Redis, 50,000 on PostgreSQL and SQLite.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import asyncpg
import redis.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.tasks import noop
from relaymq import Queue, Settings, Worker, connect
from relaymq.backends.base import Backend
from relaymq.job import JobState

BACKLOG = 20_000
"""Most jobs waiting at once during the plateau run, unless ``--backlog`` says otherwise (the
MongoDB test server checks a unique index by scanning the collection: a smaller backlog keeps
its inserts from growing with the run)."""
CONCURRENCY = 20


def file_size(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


async def size(backend: Backend, url: str) -> str:
    """The store's size now, as text with its unit and what was measured."""
    kind = url.split("://", 1)[0]
    if kind == "redis":
        client = redis.asyncio.Redis.from_url(url.split("?", 1)[0])
        try:
            info = await client.info("memory")
        finally:
            await client.aclose()
        return f"redis used_memory {info['used_memory'] / 2**20:.1f} MiB"
    if kind == "sqlite":
        path = url.split("sqlite:///", 1)[1].split("?", 1)[0]
        main, wal = file_size(path), file_size(f"{path}-wal")
        return f"sqlite file+wal {(main + wal) / 2**20:.1f} MiB (file {main / 2**20:.1f})"
    if kind in ("postgresql", "postgres"):
        options = backend.options  # type: ignore[attr-defined]
        con = await asyncpg.connect(options.dsn)
        try:
            n = await con.fetchval(
                "SELECT pg_total_relation_size($1::regclass)", f"{options.schema}.relaymq_jobs"
            )
        finally:
            await con.close()
        return f"postgres relaymq_jobs {n / 2**20:.1f} MiB"
    if kind == "mongodb":
        jobs = backend._jobs  # type: ignore[attr-defined]
        stats = await jobs.database.command("collStats", jobs.name)
        data, indexes = stats["size"], stats.get("totalIndexSize", 0)
        return f"mongodb jobs {(data + indexes) / 2**10:.0f} KiB (documents {data / 2**10:.0f})"
    return "size n/a"


async def vacuum_loop(backend: Backend, every: float) -> None:
    """A plain VACUUM of the jobs table every ``every`` seconds (what autovacuum does)."""
    options = backend.options  # type: ignore[attr-defined]
    con = await asyncpg.connect(options.dsn)
    try:
        while True:
            await asyncio.sleep(every)
            await con.execute(f"VACUUM {options.schema}.relaymq_jobs")
    finally:
        await con.close()


async def feed(queue: Queue, worker: Worker, jobs: int, backlog: int) -> None:
    """Enqueue ``jobs`` no-op jobs into ``queue`` in bulk (chunks of at most 1,000), keeping at
    most ``backlog`` of them not yet completed by ``worker``: a steady workload."""
    bound = noop.with_options(queue=queue.name)
    enqueued = 0
    while enqueued < jobs:
        if enqueued - worker.stats.completed >= backlog:
            low = enqueued - backlog // 2
            await worker.until(lambda s, low=low: s.completed > low, "progress", 600)
        n = min(1000, backlog, jobs - enqueued)
        await queue.add_bulk([bound.call() for _ in range(n)])
        enqueued += n


async def plateau(
    url: str,
    jobs: int,
    every: int,
    retention: float,
    interval: float,
    vacuum_every: float | None = None,
    backlog: int = BACKLOG,
) -> None:
    backend = await connect(url)
    queue = Queue(f"bench-retention-{uuid.uuid4().hex[:8]}", backend)
    await queue.set_retention(completed=retention)
    settings = Settings(
        concurrency=CONCURRENCY, stalled_check_interval=interval, retention_interval=interval
    )
    worker = Worker(backend, [queue.name], settings=settings)

    print(
        f"plateau {url}: {jobs} jobs, completed kept {retention:g}s, "
        f"maintenance every {interval:g}s"
    )
    print(f"  0 jobs: {await size(backend, url)}")
    try:
        producer = asyncio.create_task(feed(queue, worker, jobs, backlog))
        vacuum = asyncio.create_task(vacuum_loop(backend, vacuum_every)) if vacuum_every else None
        running = asyncio.create_task(worker.run())
        started = mark = time.perf_counter()
        for done in range(every, jobs + 1, every):
            await worker.until(lambda s, d=done: s.completed >= d, f"{done} completions", 3600)
            now = time.perf_counter()
            kept = (await queue.counts())[JobState.COMPLETED]
            print(
                f"  {done} jobs: {await size(backend, url)}, completed stored {kept}, "
                f"{every / (now - mark):,.0f} jobs/s",
                flush=True,
            )
            mark = now
        print(f"  overall {jobs / (time.perf_counter() - started):,.0f} jobs/s")
        await producer
        worker.stop()
        await running
        if vacuum is not None:
            vacuum.cancel()
    finally:
        await queue.obliterate()
        await backend.close()


async def run_steady(url: str, jobs: int, cleaner: bool, backlog: int) -> tuple[float, float]:
    """One steady run of ``jobs`` (fed as they complete, at most ``backlog`` waiting): jobs/s,
    and this process's CPU per job (us), which moves less than the rate when other processes
    share the cores (on SQLite the purge runs in this process, so its whole cost is in it)."""
    backend = await connect(url)
    queue = Queue(f"bench-retention-{uuid.uuid4().hex[:8]}", backend)
    await queue.set_retention(completed=1 if cleaner else 0)
    try:
        settings = Settings(concurrency=CONCURRENCY, stalled_check_interval=1, retention_interval=1)
        worker = Worker(backend, [queue.name], settings=settings)
        started, cpu = time.perf_counter(), time.process_time()
        producer = asyncio.create_task(feed(queue, worker, jobs, backlog))
        running = asyncio.create_task(worker.run())
        await worker.until(lambda s: s.completed >= jobs, f"{jobs} completions", within=3600)
        rate = jobs / (time.perf_counter() - started)
        await producer
        worker.stop()
        await running
        return rate, (time.process_time() - cpu) / jobs * 1e6
    finally:
        await queue.obliterate()
        await backend.close()


async def compare(url: str, jobs: int, runs: int, backlog: int) -> None:
    rates: dict[bool, list[float]] = {True: [], False: []}
    cpus: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(runs):
        for cleaner in (True, False):
            rate, cpu = await run_steady(url, jobs, cleaner, backlog)
            rates[cleaner].append(rate)
            cpus[cleaner].append(cpu)
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    con, coff = statistics.median(cpus[True]), statistics.median(cpus[False])
    paired = statistics.median([a / b for a, b in zip(rates[True], rates[False], strict=True)])

    def each(cleaner: bool) -> str:
        pairs = zip(rates[cleaner], cpus[cleaner], strict=True)
        return ", ".join(f"{r:,.0f}/s {c:.0f}us" for r, c in pairs)

    print(
        f"cleaner {url.split('://', 1)[0]}: {jobs} jobs per run, on {on:,.0f} jobs/s, off "
        f"{off:,.0f} jobs/s, on/off {on / off:.3f} (median of the pairs' {paired:.3f}); "
        f"CPU per job on {con:.0f} us, off "
        f"{coff:.0f} us, on/off {con / coff:.3f} (median of {runs}; on: {each(True)}; "
        f"off: {each(False)})"
    )


async def main(args: argparse.Namespace) -> None:
    if args.jobs:
        a = args
        await plateau(a.url, a.jobs, a.every, a.retention, a.interval, a.vacuum_every, a.backlog)
    if args.compare:
        await compare(args.url, args.compare, args.runs, args.backlog)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="memory://")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--every", type=int, default=100_000)
    parser.add_argument("--retention", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--compare", type=int, default=0, help="jobs per run, cleaner on/off")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backlog", type=int, default=BACKLOG, help="most jobs waiting")
    parser.add_argument("--vacuum-every", type=float, help="PostgreSQL: VACUUM every S seconds")
    asyncio.run(main(parser.parse_args()))
