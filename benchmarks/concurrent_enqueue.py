"""Many producers at once, as a web app's requests: the enqueue rate of 100 coroutines each
calling ``Queue.add`` in a loop, against one sequential producer, in the same run.

    python benchmarks/concurrent_enqueue.py --url redis://127.0.0.1:6379/0
    python benchmarks/concurrent_enqueue.py --server postgres \
        --url postgresql://postgres@127.0.0.1:5432/relaymq_test

Each round times N calls (default 4,000) made by one producer, then N calls made by
``--producers`` coroutines (default 100) sharing one ``Queue``, then (``--compare``) the same
with coalescing turned off (``relaymq.coalesce``); three rounds. Printed per mode: the median
calls/s, the p50 and p99 of one call's latency (from the call to its answer), this process's
CPU and the server's (``--server``, as in ``single_enqueue.py``) per call, and the ratio of
the concurrent rate to the sequential one, each ratio taken within one round.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.peers.common import Calls
from benchmarks.tasks import noop
from relaymq import Queue, coalesce, connect


async def timed(queue: Queue, calls: int, producers: int, latencies: list[float]) -> None:
    bound = noop.with_options(queue=queue.name)
    share = [calls // producers + (k < calls % producers) for k in range(producers)]

    async def producer(n: int) -> None:
        for _ in range(n):
            start = time.perf_counter()
            await queue.add(bound.call())
            latencies.append(time.perf_counter() - start)

    await asyncio.gather(*(producer(n) for n in share))


def line(name: str, calls: Calls, latencies: list[list[float]]) -> str:
    p50 = statistics.median(statistics.median(each) for each in latencies) * 1e3
    p99 = statistics.median(statistics.quantiles(each, n=100)[98] for each in latencies) * 1e3
    return f"  {name:<22} {calls.summary()}; latency p50 {p50:.2f} ms, p99 {p99:.2f} ms"


async def main(url: str, n: int, producers: int, server: str, compare: bool) -> None:
    backend = await connect(url)
    modes = ["sequential", f"{producers} coroutines"]
    if compare:
        modes.append(f"{producers}, not coalesced")
    queues = [Queue(f"bench-conc-{uuid.uuid4().hex[:8]}", backend) for _ in modes]
    coalesced = backend.capabilities
    plain = dataclasses.replace(coalesced, coalesce_enqueues=False)
    if compare:
        # the last mode's queue gets a facade built while the backend says it does not coalesce
        backend.capabilities = plain
        queues[-1] = Queue(queues[-1].name, backend)
        backend.capabilities = coalesced
    calls = {m: Calls(server) for m in modes}
    latencies: dict[str, list[list[float]]] = {m: [] for m in modes}
    ratios: dict[str, list[float]] = {m: [] for m in modes[1:]}
    try:
        for queue in queues:  # connections open before the clock starts
            await queue.add(noop.with_options(queue=queue.name).call())
        for _ in range(3):
            for mode, queue in zip(modes, queues, strict=True):
                latencies[mode].append([])
                calls[mode].start()
                await timed(queue, n, 1 if mode == "sequential" else producers, latencies[mode][-1])
                calls[mode].stop(n)
            for mode in modes[1:]:
                ratios[mode].append(calls[mode].runs[-1][0] / calls["sequential"].runs[-1][0])
        print(f"Queue.add on {url.split('://', 1)[0]}, {n} calls per mode and round:")
        for mode in modes:
            print(line(mode, calls[mode], latencies[mode]))
        for mode, each in ratios.items():
            shown = ", ".join(f"{r:.1f}x" for r in each)
            print(f"  {mode} / sequential: median {statistics.median(each):.1f}x ({shown})")
    finally:
        for queue in queues:
            await queue.obliterate()
        await backend.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="memory://")
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--producers", type=int, default=100)
    parser.add_argument("--compare", action="store_true", help="also without coalescing")
    parser.add_argument(
        "--batch-jobs", type=int, default=coalesce.BATCH_JOBS, help="jobs per coalesced batch"
    )
    parser.add_argument(
        "--server",
        default="redis-server",
        help="process name of the local server to count (postgres)",
    )
    args = parser.parse_args()
    coalesce.BATCH_JOBS = args.batch_jobs
    asyncio.run(main(args.url, args.calls, args.producers, args.server, args.compare))
