"""One job per call, with no worker running: what a producer alone pays per enqueue.

    python benchmarks/single_enqueue.py --url redis://127.0.0.1:6379/0
    python benchmarks/single_enqueue.py --url postgresql://postgres@127.0.0.1:5432/relaymq_test \
        --server postgres

Times N calls (default 2,000) of ``Queue.add`` on a fresh queue, three times, and prints each
run and the median: calls/s, this process's CPU (user + system) per call, and the CPU per call
of the local server's processes named ``--server`` (``redis-server`` by default, ``postgres``;
nothing else should use the server meanwhile: on memory:// or sqlite:// it reads 0). The
queue is removed afterwards. ``benchmarks/peers/huey_bench.py --enqueue-only`` and
``pgqueuer_bench.py --enqueue-only`` print the same for a peer.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.peers.common import Calls
from benchmarks.tasks import noop
from relaymq import Queue, connect


async def main(url: str, n: int, server: str) -> None:
    backend = await connect(url)
    queue = Queue(f"bench-single-{uuid.uuid4().hex[:8]}", backend)
    bound = noop.with_options(queue=queue.name)
    try:
        await queue.add(bound.call())  # connections open before the clock starts
        calls = Calls(server)
        for _ in range(3):
            calls.start()
            for _ in range(n):
                await queue.add(bound.call())
            calls.stop(n)
        print(f"Queue.add on {url.split('://', 1)[0]} alone: {calls.summary()}")
    finally:
        await queue.obliterate()
        await backend.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="memory://")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument(
        "--server",
        default="redis-server",
        help="process name of the local server to count (postgres)",
    )
    args = parser.parse_args()
    asyncio.run(main(args.url, args.calls, args.server))
