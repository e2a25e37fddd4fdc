"""A worker's own CPU per job while it drains a backlog, in this process, on any backend URL.

    python benchmarks/drain.py --url redis://127.0.0.1:6379/0 --jobs 10000

Enqueues ``--jobs`` no-op jobs in bulk first, then times one in-process worker (concurrency
10) from its start until every job completed: the process's CPU time (user + system) per job,
which moves little when other processes share the cores, and jobs/s. No producer runs meanwhile,
so the figure is the worker's claim, run and settle path alone. Prints the median of ``--runs``.
``--server postgres`` (or ``redis-server``) adds that local server's CPU per job: every process
of that name, read while the worker's connections are still open.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.peers.common import Calls
from benchmarks.tasks import noop
from relaymq import Queue, Settings, Worker, connect


async def one_run(url: str, jobs: int, calls: Calls) -> None:
    """One drain of ``jobs``, timed into ``calls`` (a job counts as a call)."""
    backend = await connect(url)
    queue = Queue(f"bench-drain-{uuid.uuid4().hex[:8]}", backend)
    bound = noop.with_options(queue=queue.name)
    try:
        for k in range(0, jobs, 1000):
            await queue.add_bulk([bound.call() for _ in range(min(1000, jobs - k))])
        worker = Worker(backend, [queue.name], settings=Settings(concurrency=10))
        calls.start()
        running = asyncio.create_task(worker.run())
        await worker.until(lambda s: s.completed >= jobs, f"{jobs} completions", within=600)
        calls.stop(jobs)  # before the worker's connections close: their server CPU counts
        worker.stop()
        await running
    finally:
        await queue.obliterate()
        await backend.close()


async def main(url: str, jobs: int, runs: int, server: str | None) -> None:
    calls = Calls(server or "")
    for _ in range(runs):
        await one_run(url, jobs, calls)
    rate = statistics.median(r[0] for r in calls.runs)
    cpu = statistics.median(r[1] for r in calls.runs)
    served = (
        f", {server} CPU {statistics.median(r[2] for r in calls.runs):.1f} us/job" if server else ""
    )
    print(
        f"drain {url.split('://', 1)[0]}: {jobs} jobs, worker CPU {cpu:.1f} us/job{served}, "
        f"{rate:,.0f} jobs/s (median of {runs}; runs: "
        f"{', '.join(f'{c:.1f}+{s:.1f} us, {r:,.0f}/s' for r, c, s in calls.runs)})"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="memory://")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--server", help="process name of a local server to count (postgres)")
    args = parser.parse_args()
    asyncio.run(main(args.url, args.jobs, args.runs, args.server))
