"""BullMQ's Python port (bullmq 3.4.4) on Redis: enqueue/end-to-end throughput for N jobs.

Run inside benchmarks/.venvs/bullmq (run.py does that):

    python benchmarks/peers/bullmq_bench.py --jobs 10000 --url redis://127.0.0.1:6379/9

Choices:
* Enqueue: ``Queue.addBulk`` (one call for all N jobs); with ``--single``, one ``Queue.add``
  per job.
* Worker: this script re-run with ``--role worker``: one process with one
  ``bullmq.Worker(..., {"concurrency": 10})``; an async processor (a no-op, or one Redis INCR
  with ``--workload side-effect``).
* Completion: ``Queue.getJobCounts("completed")`` polled at most every 20 ms. Jobs are kept
  once completed (``removeOnComplete`` off) so that they can be counted.
* ``--workload side-effect``: the processor makes one INCR with a redis.asyncio client made
  once in the worker process (common.SideEffect checks the count afterwards).
* State: queue ``relaymq_bench_peer`` under the key prefix ``relaymq_bench_peer`` (not
  bullmq's default ``bull``), in the Redis db in --url (default 9), which is FLUSHDB'd before
  and after the run; db 0 is refused.
"""

from __future__ import annotations

import asyncio
import sys
import time
from importlib.metadata import version
from typing import Any

from common import (
    CONCURRENCY,
    DEFAULT_REDIS_URL,
    PREFIX,
    SideEffect,
    Watchdog,
    Worker,
    await_until,
    base_parser,
    emit_result,
    redis_db_url,
    run_main,
    run_roles,
    self_worker_argv,
    side_key,
    side_url,
)

QUEUE = PREFIX
DEFAULT_JOBS = 10_000


def parse_args() -> Any:
    args = base_parser("BullMQ (Python) on Redis").parse_args()
    args.jobs = args.jobs or DEFAULT_JOBS
    args.url = redis_db_url(args.url or DEFAULT_REDIS_URL)
    return args


async def flush(url: str) -> None:
    import redis.asyncio as aioredis

    r = aioredis.from_url(url)
    try:
        await r.flushdb()
    finally:
        await r.aclose()


async def drive(args: Any, watchdog: Watchdog) -> None:
    from bullmq import Queue

    await flush(args.url)
    queue = Queue(
        QUEUE,
        {
            "connection": args.url,
            "prefix": PREFIX,
            "defaultJobOptions": {"removeOnComplete": False},
        },
    )

    async def completed() -> int:
        counts = await queue.getJobCounts("completed")
        return int(counts.get("completed", 0))

    async def at_least(target: int) -> bool:
        return await completed() >= target

    side = SideEffect(args.workload)  # before the worker starts: it reads the run's key
    worker = Worker(self_worker_argv(__file__, sys.argv[1:]))
    watchdog.worker = worker
    ok = False
    try:
        # Warm-up: one job proves the worker is up before the clock starts.
        await queue.add("job", {"i": -1})
        await await_until(lambda: at_least(1), worker, args.deadline, "the warm-up job")
        target = await completed() + args.jobs
        side_before = side.count()

        cpu0 = worker.cpu()
        t0 = time.perf_counter()
        if args.single:
            for i in range(args.jobs):
                await queue.add("job", {"i": i})
        else:
            await queue.addBulk([{"name": "job", "data": {"i": i}} for i in range(args.jobs)])
        t_enqueued = time.perf_counter()
        t_done = await await_until(
            lambda: at_least(target), worker, args.deadline, f"{args.jobs} jobs to complete"
        )
        cpu = worker.cpu() - cpu0
        side.check(side_before + args.jobs)
        ok = True
    finally:
        worker.stop(keep_log=not ok)
        await queue.close()
        await flush(args.url)
        side.cleanup()

    emit_result("bullmq", version("bullmq"), "redis", args.jobs, t_enqueued - t0, t_done - t0, cpu)


async def work(args: Any) -> None:
    from bullmq import Worker as BullWorker

    side: Any = None
    key = side_key()
    if args.workload == "side-effect":  # one INCR per job, one client per worker process
        from redis.asyncio import Redis

        side = Redis.from_url(side_url())

    async def process(job: Any, token: str) -> bool:
        if side is not None:
            await side.incr(key)
        return True

    opts = {"connection": args.url, "prefix": PREFIX, "concurrency": CONCURRENCY}
    worker = BullWorker(QUEUE, process, opts)
    print(f"bullmq worker: concurrency={CONCURRENCY}", flush=True)
    try:
        await asyncio.Event().wait()  # until the driver stops this process
    finally:
        await worker.close()


def main() -> None:
    args = parse_args()
    run_roles(args, work, drive, "bullmq/redis")


if __name__ == "__main__":
    run_main(main)
