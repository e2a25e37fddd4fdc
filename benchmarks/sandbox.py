"""The cost of ``@task(sandbox=True)``: microseconds per job, sandboxed against in-process.

    python benchmarks/sandbox.py

An in-process worker on the in-memory backend runs 2,000 trivial async jobs (after warming one
child per slot), at concurrency 1 and 10, three runs each; the median is reported.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from relaymq import Queue, Settings, Worker
from relaymq.backends.memory import InMemoryBackend
from relaymq.options import Call
from tests import sandbox_tasks, tasks

JOBS = 2000


async def per_job_us(make: Callable[[], Call[Any]], concurrency: int) -> float:
    backend = InMemoryBackend()
    queue = Queue("bench-sandbox", backend)
    worker = Worker(backend, [queue.name], settings=Settings(concurrency=concurrency))
    running = asyncio.create_task(worker.run())
    await worker.started.wait()
    await queue.add_bulk([make() for _ in range(concurrency)])  # one child per slot, started
    await worker.until(lambda s: s.completed >= concurrency, "the warm-up jobs", 60)
    start = time.perf_counter()
    await queue.add_bulk([make() for _ in range(JOBS)])
    await worker.until(lambda s: s.completed >= concurrency + JOBS, "the jobs", 120)
    elapsed = time.perf_counter() - start
    worker.stop()
    await running
    return elapsed / JOBS * 1e6


async def main() -> None:
    kinds = [
        ("in-process async", lambda: tasks.add.call(1, 2)),
        ("sandboxed async", lambda: sandbox_tasks.whose_pid.call(1, 2)),
    ]
    for concurrency in (1, 10):
        for name, make in kinds:
            runs = [await per_job_us(make, concurrency) for _ in range(3)]
            print(
                f"concurrency {concurrency:2d}  {name:17s} {statistics.median(runs):6.0f} us/job"
                f"  runs: {', '.join(f'{r:.0f}' for r in runs)}"
            )


if __name__ == "__main__":
    asyncio.run(main())
