"""Dramatiq on RabbitMQ: enqueue/end-to-end throughput for N no-op jobs.

Run inside benchmarks/.venvs/dramatiq (run.py does that):

    python benchmarks/peers/dramatiq_bench.py --jobs 10000 --url amqp://guest:guest@127.0.0.1:5672/

Choices:
* Enqueue: Dramatiq has no bulk-enqueue API; ``actor.send`` in a loop (one publish each,
  Dramatiq's defaults: persistent messages, no publisher confirms).
* Worker: Dramatiq's own ``dramatiq dramatiq_tasks -p 1 -t 10``, one process with 10 worker
  threads (its default prefetch: twice the threads).
* ``--single``: the same, one ``send`` per job either way.
* Completion: the actor INCRs a Redis counter (Dramatiq keeps no job state); the driver polls it
  every 20 ms.  With ``--workload side-effect`` the actor ``side_effect`` INCRs the run's side
  key (sync redis-py, one client per worker process) and that key is the count.
* State: the broker queue (and its delay/dead-letter queues) is purged before and after the
  run; the Redis db (--redis-url, default 9, never 0) holds only the counter.
"""

from __future__ import annotations

import os
import sys
import time
from importlib.metadata import version

from common import (
    CONCURRENCY,
    DEFAULT_AMQP_URL,
    DEFAULT_REDIS_URL,
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
    parser = base_parser("Dramatiq on RabbitMQ")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    args = parser.parse_args()
    jobs = args.jobs or DEFAULT_JOBS
    amqp = args.url or DEFAULT_AMQP_URL
    redis_url = redis_db_url(args.redis_url)
    env = {"RELAYMQ_BENCH_DRAMATIQ_AMQP": amqp, "RELAYMQ_BENCH_DRAMATIQ_REDIS": redis_url}
    os.environ.update(env)
    side = SideEffect(args.workload)  # before the import and the worker: both read its key
    import dramatiq_tasks

    actor = dramatiq_tasks.side_effect if side.enabled else dramatiq_tasks.noop

    def done() -> int:
        if side.enabled:
            return side.count()
        return int(dramatiq_tasks.counter.get(dramatiq_tasks.DONE_KEY) or 0)

    dramatiq_tasks.counter.delete(dramatiq_tasks.DONE_KEY)
    dramatiq_tasks.broker.flush_all()

    watchdog = Watchdog(args.deadline, "dramatiq/rabbitmq").start()
    command = os.path.join(os.path.dirname(sys.executable), "dramatiq")
    worker = Worker(
        [command, "dramatiq_tasks", "-p", "1", "-t", str(CONCURRENCY)],
        env={**env, "PYTHONPATH": HERE},
        cwd=HERE,
    )
    watchdog.worker = worker
    ok = False
    try:
        # Warm-up: one job proves the worker is up before the clock starts.
        actor.send(-1)
        wait_until(lambda: done() >= 1, worker, args.deadline, "the warm-up job")
        side_before = side.count()
        target = done() + jobs

        cpu0 = worker.cpu()
        t0 = time.perf_counter()
        for i in range(jobs):
            actor.send(i)
        t_enqueued = time.perf_counter()
        t_done = wait_until(
            lambda: done() >= target, worker, args.deadline, f"{jobs} jobs to complete"
        )
        cpu = worker.cpu() - cpu0
        side.check(side_before + jobs)
        ok = True
    finally:
        worker.stop(keep_log=not ok)
        watchdog.cancel()
        dramatiq_tasks.broker.flush_all()
        dramatiq_tasks.counter.delete(dramatiq_tasks.DONE_KEY)
        dramatiq_tasks.broker.close()
        side.cleanup()

    emit_result(
        "dramatiq", version("dramatiq"), "rabbitmq", jobs, t_enqueued - t0, t_done - t0, cpu
    )


if __name__ == "__main__":
    run_main(main)
