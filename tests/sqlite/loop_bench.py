"""A rough speed check of SQLiteBackend until benchmarks/throughput.py exists.

usage: python -m tests.sqlite.loop_bench [JOBS] [BATCH]

Bulk-enqueues JOBS no-op jobs (batches of 1,000), then runs claim(limit=BATCH) + settle(batch)
until the queue is empty, on a fresh file in a temporary directory. Prints jobs/s of each phase.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from relaymq.backends.base import Outcome, Settle
from relaymq.backends.sqlite import SQLiteBackend
from relaymq.job import NewJob


async def main(total: int, batch: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        backend = SQLiteBackend(f"sqlite:///{Path(tmp) / 'bench.db'}")
        await backend.connect()
        payload = b'{"args":[],"kwargs":{}}'
        jobs = [NewJob("bench", f"job-{i}", "bench:noop", payload) for i in range(total)]
        t0 = time.perf_counter()
        for start in range(0, total, 1000):
            await backend.enqueue(jobs[start : start + 1000])
        t1 = time.perf_counter()
        done = 0
        while claimed := (await backend.claim(["bench"], "w", batch)).jobs:
            await backend.settle(
                [Settle(j.claim, Outcome.COMPLETE, result=b"null") for j in claimed]
            )
            done += len(claimed)
        t2 = time.perf_counter()
        assert done == total, (done, total)
        await backend.close()
    print(f"enqueue: {total / (t1 - t0):,.0f} jobs/s ({total} jobs, batches of 1000)")
    print(f"claim+settle: {total / (t2 - t1):,.0f} jobs/s (limit={batch})")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    asyncio.run(main(*(args + [20_000, 10][len(args) :])))
