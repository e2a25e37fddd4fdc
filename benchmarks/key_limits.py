"""Per-key limits beside the unlimited queue, in the same run: a worker drains a backlog of
no-op jobs spread over many limit keys, once on a queue without limits, once with a cap of
one active job per key (``key_max_active=1``) and once with fairness between keys
(``fair=True``); a queue whose ``max_active`` never binds shows what the claim path of a queue
with limits costs by itself.

    flock /tmp/relaymq-bench.lock python benchmarks/key_limits.py \\
        --url redis://127.0.0.1:6379/0 --jobs 10000 --keys 1000 --runs 3

Each run enqueues ``--jobs`` jobs in bulk, each given one of ``--keys`` limit keys at random
(seeded: the same spread in every run), then times one in-process worker (concurrency 10)
from its start until every job completed. The three queues take turns within each run, so
the machine's load meets them alike; it prints each one's median jobs/s and CPU per job, and
each limited queue's ratio to the unlimited one.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.peers.common import Calls
from benchmarks.tasks import noop
from relaymq import Queue, Settings, Worker, connect

VARIANTS: dict[str, dict[str, Any]] = {
    "unlimited": {},
    "max_active=10000": {"max_active": 10_000},  # never binds: what any limit costs a claim
    "key_max_active=1": {"key_max_active": 1},
    "fair=True": {"fair": True},
}


async def one_run(url: str, jobs: int, keys: int, limits: dict[str, Any], calls: Calls) -> None:
    """One drain of ``jobs`` over ``keys`` limit keys on a queue with ``limits``."""
    backend = await connect(url)
    queue = Queue(f"bench-keys-{uuid.uuid4().hex[:8]}", backend)
    bound = noop.with_options(queue=queue.name)
    spread = random.Random(31)
    try:
        if limits:
            await queue.set_limits(**limits)
        for k in range(0, jobs, 1000):
            await queue.add_bulk(
                [
                    bound.with_options(limit_key=f"k{spread.randrange(keys)}").call()
                    for _ in range(min(1000, jobs - k))
                ]
            )
        worker = Worker(backend, [queue.name], settings=Settings(concurrency=10))
        calls.start()
        running = asyncio.create_task(worker.run())
        await worker.until(lambda s: s.completed >= jobs, f"{jobs} completions", within=900)
        calls.stop(jobs)
        worker.stop()
        await running
    finally:
        await queue.obliterate()
        await backend.close()


async def main(url: str, jobs: int, keys: int, runs: int) -> None:
    calls = {name: Calls("") for name in VARIANTS}
    for _ in range(runs):
        for name, limits in VARIANTS.items():
            await one_run(url, jobs, keys, limits, calls[name])
    base = statistics.median(r[0] for r in calls["unlimited"].runs)
    print(f"key limits {url.split('://', 1)[0]}: {jobs} jobs over {keys} keys, concurrency 10")
    for name, c in calls.items():
        rate = statistics.median(r[0] for r in c.runs)
        cpu = statistics.median(r[1] for r in c.runs)
        each = ", ".join(f"{r:,.0f}/s" for r, _, _ in c.runs)
        print(
            f"  {name:18} {rate:8,.0f} jobs/s  {rate / base:4.2f}x unlimited  "
            f"worker CPU {cpu:6.1f} us/job  (median of {runs}; runs: {each})"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="memory://")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.url, args.jobs, args.keys, args.runs))
