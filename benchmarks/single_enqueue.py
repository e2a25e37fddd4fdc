"""One job per call, with no worker running: what a producer alone pays per enqueue.

    python benchmarks/single_enqueue.py --url postgresql://postgres@127.0.0.1:5432/relaymq_test

Times N calls (default 2,000) of ``Queue.add`` on a fresh queue, three times, and prints each
run and the median; the queue is removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.tasks import noop
from relaymq import Queue, connect


async def main(url: str, calls: int) -> None:
    backend = await connect(url)
    queue = Queue(f"bench-single-{uuid.uuid4().hex[:8]}", backend)
    bound = noop.with_options(queue=queue.name)
    try:
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(calls):
                await queue.add(bound.call())
            runs.append(calls / (time.perf_counter() - start))
        print(f"Queue.add on {url.split('://', 1)[0]}: {statistics.median(runs):,.0f} calls/s "
              f"(median of 3; runs: {', '.join(f'{r:,.0f}' for r in runs)})")  # fmt: skip
    finally:
        await queue.obliterate()
        await backend.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="memory://")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(main(args.url, args.calls))
