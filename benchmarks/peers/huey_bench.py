"""huey 3.5.4 on Redis: enqueue/end-to-end throughput for N no-op jobs.

Run inside benchmarks/.venvs/huey (run.py does that):

    python benchmarks/peers/huey_bench.py --jobs 10000 --url redis://127.0.0.1:6379/9

Choices:
* Enqueue: huey has no bulk-enqueue API.  ``TaskWrapper.map()`` is its
  many-jobs helper and is used here, but it is a plain loop of single
  enqueues (one LPUSH each), i.e. a tight loop.
* Worker: huey's own ``huey_consumer huey_tasks.huey -w 10 -k thread -q``,
  i.e. one consumer process with 10 worker threads (blocking BRPOP on Redis,
  huey's default).  ``-q`` keeps huey's per-task INFO logging out of the
  measurement.
* Completion: polled every 20 ms via ``huey.result_count()`` (huey's result
  store; the task returns True so that a result is stored).
* ``--workload side-effect``: ``huey_tasks.side_effect`` instead, one INCR
  with a sync redis-py client made once per consumer process (common.SideEffect
  checks the count afterwards).
* State: the Redis db in --url (default 9) is FLUSHDB'd before and after the
  run; db 0 is refused.
* ``--enqueue-only``: no consumer; prints the enqueue loop's calls/s, this
  process's CPU and the local redis-server processes' CPU per enqueue, beside
  ``benchmarks/single_enqueue.py --server redis-server`` (what relaymq's producer
  alone pays).
"""

from __future__ import annotations

import os
import sys
import time
from importlib.metadata import version
from typing import Any

from common import (
    CONCURRENCY,
    DEFAULT_REDIS_URL,
    Calls,
    SideEffect,
    Watchdog,
    Worker,
    base_parser,
    emit_result,
    redis_db_url,
    run_main,
    wait_until,
)

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_JOBS = 10_000


def main() -> None:
    parser = base_parser("huey on Redis")
    parser.add_argument("--enqueue-only", action="store_true", help="no consumer (docstring)")
    args = parser.parse_args()
    jobs = args.jobs or DEFAULT_JOBS
    url = redis_db_url(args.url or DEFAULT_REDIS_URL)

    os.environ["RELAYMQ_BENCH_HUEY_URL"] = url  # read by huey_tasks at import time
    import huey_tasks

    huey = huey_tasks.huey
    huey.storage.conn.flushdb()
    if args.enqueue_only:
        enqueue_only(huey, huey_tasks.noop, jobs)
        return
    side = SideEffect(args.workload)  # before the worker starts: it reads the run's key

    watchdog = Watchdog(args.deadline, "huey/redis").start()
    consumer = os.path.join(os.path.dirname(sys.executable), "huey_consumer")
    worker = Worker(
        [consumer, "huey_tasks.huey", "-w", str(CONCURRENCY), "-k", "thread", "-q"],
        env={huey_tasks.URL_ENV: url, "PYTHONPATH": HERE},
        cwd=HERE,
    )
    watchdog.worker = worker
    ok = False
    try:
        # Warm-up: one job proves the consumer is up before the clock starts.
        huey_tasks.noop(-1)
        wait_until(lambda: huey.result_count() >= 1, worker, args.deadline, "the warm-up job")
        baseline = huey.result_count()
        target = baseline + jobs
        side_before = side.count()

        cpu0 = worker.cpu()
        t0 = time.perf_counter()
        job = huey_tasks.side_effect if args.workload == "side-effect" else huey_tasks.noop
        job.map(range(jobs))  # one LPUSH per job: the same with --single
        t_enqueued = time.perf_counter()
        t_done = wait_until(
            lambda: huey.result_count() >= target, worker, args.deadline, f"{jobs} jobs to complete"
        )
        cpu = worker.cpu() - cpu0
        side.check(side_before + jobs)
        ok = True
    finally:
        worker.stop(keep_log=not ok)
        watchdog.cancel()
        huey.storage.conn.flushdb()
        side.cleanup()

    emit_result("huey", version("huey"), "redis", jobs, t_enqueued - t0, t_done - t0, cpu)


def enqueue_only(huey: Any, task: Any, jobs: int) -> None:
    """Three timed loops of ``jobs`` enqueues, no consumer."""
    calls = Calls("redis-server")
    try:
        for _ in range(3):
            calls.start()
            task.map(range(jobs))
            calls.stop(jobs)
            huey.storage.conn.flushdb()
    finally:
        huey.storage.conn.flushdb()
    print(f"huey {version('huey')} enqueue alone: {calls.summary()}")


if __name__ == "__main__":
    run_main(main)
