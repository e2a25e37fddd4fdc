"""A worker process's memory over a long run: RSS growth after warm-up.

    python benchmarks/memory.py --url redis://127.0.0.1:6379/0 --jobs 200000

One ``relaymq worker`` process (concurrency 10) runs ``--jobs`` no-op jobs that this process
keeps enqueueing (a backlog of at most ``--backlog``). The worker's RSS (VmRSS from /proc) is
read every 5 % of the jobs; growth is measured from the reading at ``--warmup`` (default 10 %
of the jobs: imports, pools, caches and the allocator's arenas have settled by then) to the end.
The target (issue 15): growth <= 5 %.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.tasks import noop  # noqa: E402
from benchmarks.throughput import worker_process  # noqa: E402
from relaymq import Queue, connect  # noqa: E402
from relaymq.job import JobState  # noqa: E402

CHUNK = 1000


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def growth_after(readings: list[tuple[int, int]], warmup: float) -> tuple[int, int, float]:
    """RSS after ``warmup`` jobs, at the end, and the growth between them in percent."""
    base = next(rss for completed, rss in readings if completed >= warmup)
    end = readings[-1][1]
    return base, end, (end - base) / base * 100


async def measure(url: str, jobs: int, backlog: int = 20_000) -> list[tuple[int, int]]:
    """(completed, RSS KiB) readings."""
    backend = await connect(url)
    queue = Queue(f"mem-{uuid.uuid4().hex[:8]}", backend)
    bound = noop.with_options(queue=queue.name)
    readings: list[tuple[int, int]] = []
    step = max(1, jobs // 20)
    try:
        async with worker_process(backend, url, queue.name, 10) as pid:
            enqueued = completed = 0
            next_reading = step
            deadline = time.monotonic() + 3600
            while completed < jobs:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{completed} of {jobs} jobs completed after an hour")
                counts = await queue.counts()
                completed = counts[JobState.COMPLETED]
                while enqueued < jobs and enqueued - completed < backlog:
                    n = min(CHUNK, jobs - enqueued)
                    await queue.add_bulk([bound.call() for _ in range(n)])
                    enqueued += n
                if completed >= next_reading or completed >= jobs:
                    readings.append((completed, rss_kib(pid)))
                    next_reading += step
                await asyncio.sleep(0.05)  # the driver polls the counts
    finally:
        await queue.obliterate()
        await backend.close()
    return readings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--warmup", type=float, default=0.1)
    args = parser.parse_args()
    readings = asyncio.run(measure(args.url, args.jobs, args.backlog))
    for completed, rss in readings:
        print(f"{completed:>9,} jobs  RSS {rss / 1024:7.1f} MiB")
    base, end, growth = growth_after(readings, args.jobs * args.warmup)
    print(
        f"{args.url}: RSS {base / 1024:.1f} MiB after warm-up, {end / 1024:.1f} MiB after "
        f"{args.jobs:,} jobs: growth {growth:+.1f} % (target <= 5 %)"
    )
    sys.exit(0 if growth <= 5 else 1)


if __name__ == "__main__":
    main()
