"""Throughput and pickup latency of relaymq on any backend URL, optionally beside peers.

    python benchmarks/throughput.py --url sqlite:////tmp/bench.db
    python benchmarks/throughput.py --url redis://127.0.0.1:6379/0 --peers huey,asyncmq

Workload (the same for the peers): N no-op jobs (default 10,000) enqueued in bulk, one worker
process with concurrency 10 (in-process for memory://, which has no other process), median of
``--runs`` runs. ``--workload side-effect``: each handler makes one Redis INCR; ``--single``:
one enqueue call per job, as a web request makes; ``--workers N``: N worker processes.
Reported: enqueue jobs/s; end-to-end jobs/s, from the start of the enqueue until the last job
completed; the worker processes' CPU (user + system) per job, which moves little when other
processes share the cores; how many of the machine's cores were busy meanwhile (all processes:
near the core count, the machine sets the pace); pickup latency p50/p99 with an idle worker
and one job at a time, taken from the job record (claimed_at - created_at, both on the
backend's clock).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.peers.common import busy_cores, cpu_seconds, machine_ticks  # noqa: E402
from benchmarks.tasks import (  # noqa: E402
    DEFAULT_SIDE_URL,
    SIDE_KEY,
    SIDE_KEY_ENV,
    SIDE_URL_ENV,
    noop,
    side_effect,
)
from relaymq import Queue, Settings, Worker, connect, events  # noqa: E402
from relaymq.backends.base import Backend  # noqa: E402
from relaymq.instrumented import Instrumented  # noqa: E402
from relaymq.job import JobState  # noqa: E402


@dataclass
class Run:
    enqueue_per_s: float
    e2e_per_s: float
    worker_cpu_us_per_job: float | None
    """The worker process's user + system CPU per job (None: the worker ran in this process)."""
    busy_cores: float
    """Cores of the machine busy on average from the enqueue's start to the last completion
    (every process: workers, server, this driver, anyone else's): near the core count, the
    machine, not relaymq, sets the pace."""


@contextlib.asynccontextmanager
async def worker(
    backend: Backend, url: str, queue: str, concurrency: int, count: int = 1
) -> AsyncIterator[list[int]]:
    """``count`` worker subprocesses (their pids are yielded), or one worker task in this
    process for process-local backends (no pids)."""
    if backend.capabilities.cross_process:
        async with contextlib.AsyncExitStack() as stack:
            yield [
                await stack.enter_async_context(worker_process(backend, url, queue, concurrency))
                for _ in range(count)
            ]
        return
    w = Worker(backend, [queue], settings=Settings(concurrency=concurrency))
    running = asyncio.create_task(w.run())
    await w.started.wait()
    try:
        yield []
    finally:
        w.stop()
        await running


@contextlib.asynccontextmanager
async def worker_process(
    backend: Backend, url: str, queue: str, concurrency: int
) -> AsyncIterator[int]:
    """A ``relaymq worker`` process on ``queue``, online when this yields its pid."""
    online = await Instrumented(backend).subscribe()
    try:
        env = {**os.environ, "RELAYMQ_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "relaymq",
            "worker",
            "benchmarks.tasks",
            "-q",
            queue,
            "-c",
            str(concurrency),
            "--backend",
            url,
            env=env,
            cwd=ROOT,
        )
        try:
            async with asyncio.timeout(30):  # the worker process coming online
                async for event in online:
                    if event.name == events.WORKER_ONLINE and queue in event.data.get("queues", []):
                        break
            await online.aclose()  # do not make this process decode every event of the run
            yield proc.pid
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
    finally:
        await online.aclose()


async def until_completed(queue: Queue, n: int, deadline: float) -> None:
    """Poll counts (every 20 ms, the driver only) until n jobs completed."""
    async with asyncio.timeout(deadline):
        while (await queue.counts())[JobState.COMPLETED] < n:  # noqa: ASYNC110 - driver poll
            await asyncio.sleep(0.02)


WORKLOADS = {"noop": noop, "side-effect": side_effect}


async def side_effect_count(key: str, *, delete: bool = False) -> int:
    """How many times this run's side-effect jobs INCRed ``key``; ``delete``: then drop it (the
    side Redis is db 0 by default, shared, never flushed)."""
    from redis.asyncio import Redis

    client = Redis.from_url(os.environ.get(SIDE_URL_ENV, DEFAULT_SIDE_URL))
    try:
        count = int(await client.get(key) or 0)
        if delete:
            await client.delete(key)
        return count
    finally:
        await client.aclose()


async def one_run(
    url: str, jobs: int, concurrency: int, chunk: int, single: bool, workload: str, workers: int
) -> Run:
    backend = await connect(url)
    queue = Queue(f"bench-{uuid.uuid4().hex[:8]}", backend)
    side_key = f"{SIDE_KEY}:{queue.name}"  # this run's own, set before the workers start
    os.environ[SIDE_KEY_ENV] = side_key
    try:
        bound = WORKLOADS[workload].with_options(queue=queue.name)
        calls = [bound.call() for _ in range(jobs)]
        async with worker(backend, url, queue.name, concurrency, workers) as pids:
            cpu = sum(cpu_seconds(p) for p in pids)
            ticks = machine_ticks()
            start = time.perf_counter()
            if single:  # one call per job, as a web request makes
                for call in calls:
                    await queue.add(call)
            else:
                for k in range(0, jobs, chunk):
                    await queue.add_bulk(calls[k : k + chunk])
            enqueued = time.perf_counter()
            await until_completed(queue, jobs, deadline=600)
            done = time.perf_counter()
            busy = busy_cores(ticks, machine_ticks())
            cpu_us = (sum(cpu_seconds(p) for p in pids) - cpu) / jobs * 1e6 if pids else None
        # Every handler made its one Redis call, exactly once (checked after the clock stopped).
        if workload == "side-effect" and (made := await side_effect_count(side_key)) != jobs:
            raise RuntimeError(f"side-effect key {side_key} is {made}, expected {jobs}")
        return Run(jobs / (enqueued - start), jobs / (done - start), cpu_us, busy)
    finally:
        await queue.obliterate()
        await backend.close()
        if workload == "side-effect":
            await side_effect_count(side_key, delete=True)


async def latency(url: str, samples: int) -> list[float]:
    """Pickup latency in ms, one job at a time, idle worker."""
    backend = await connect(url)
    queue = Queue(f"bench-lat-{uuid.uuid4().hex[:8]}", backend)
    out: list[float] = []
    try:
        async with worker(backend, url, queue.name, 10):
            task = noop.with_options(queue=queue.name)
            for _ in range(samples):
                handle = await queue.add(task.call())
                await handle.result(timeout=10)
                job = await handle.job()
                assert job.claimed_at is not None
                out.append((job.claimed_at - job.created_at) * 1000)
    finally:
        await queue.obliterate()
        await backend.close()
    return out


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="memory://")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=1000, help="jobs per add_bulk call")
    parser.add_argument(
        "--workload",
        choices=sorted(WORKLOADS),
        default="noop",
        help="side-effect: one Redis INCR per job (RELAYMQ_BENCH_SIDE_URL)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes on the queue (cross-process backends)",
    )
    parser.add_argument(
        "--single", action="store_true", help="one Queue.add per job (peers: one enqueue each)"
    )
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument("--peers", default="", help="comma-separated, e.g. huey,asyncmq")
    parser.add_argument("--peer-backend", default=None, help="redis|postgres|rabbitmq")
    parser.add_argument(
        "--peer-default-jobs",
        action="store_true",
        help="let each peer use its own default job count",
    )
    args = parser.parse_args()

    runs = [
        asyncio.run(
            one_run(
                args.url,
                args.jobs,
                args.concurrency,
                args.chunk,
                args.single,
                args.workload,
                args.workers,
            )
        )
        for _ in range(args.runs)
    ]
    lat = asyncio.run(latency(args.url, args.latency_samples)) if args.latency_samples else []
    ours = {
        "enqueue_per_s": statistics.median(r.enqueue_per_s for r in runs),
        "e2e_per_s": statistics.median(r.e2e_per_s for r in runs),
    }
    scheme = args.url.split("://", 1)[0]
    how = "one add per job" if args.single else f"add_bulk of {args.chunk}"
    print(
        f"relaymq {scheme}: {args.jobs} {args.workload} jobs ({how}), "
        f"{args.workers} worker process(es) of concurrency {args.concurrency}, "
        f"median of {args.runs} runs"
    )
    print(
        f"  enqueue    {ours['enqueue_per_s']:>10,.0f} jobs/s   runs: "
        + ", ".join(f"{r.enqueue_per_s:,.0f}" for r in runs)
    )
    print(
        f"  end-to-end {ours['e2e_per_s']:>10,.0f} jobs/s   runs: "
        + ", ".join(f"{r.e2e_per_s:,.0f}" for r in runs)
    )
    cpu = [r.worker_cpu_us_per_job for r in runs if r.worker_cpu_us_per_job is not None]
    ours["worker_cpu_us_per_job"] = statistics.median(cpu) if cpu else 0
    if cpu:
        print(
            f"  worker CPU {ours['worker_cpu_us_per_job']:>8,.0f} us/job   runs: "
            + ", ".join(f"{c:,.0f}" for c in cpu)
        )
    print(
        f"  machine    {statistics.median(r.busy_cores for r in runs):>8.2f} of "
        f"{os.cpu_count()} cores busy   runs: " + ", ".join(f"{r.busy_cores:.2f}" for r in runs)
    )
    if lat:
        print(
            f"  pickup latency p50 {percentile(lat, 50):.2f} ms, p99 {percentile(lat, 99):.2f} ms"
            f" ({len(lat)} samples)"
        )
    for peer in filter(None, args.peers.split(",")):
        result = run_peer(peer, args.peer_backend or _peer_backend(scheme), args)
        for what in ("enqueue", "e2e"):
            theirs = result.get(f"{what}_per_s") or 0
            ratio = ours[f"{what}_per_s"] / theirs if theirs else 0
            print(
                f"  {peer} {result.get('version', '')}: {what} {theirs:,.0f} jobs/s "
                f"({result.get('jobs')} jobs) -> relaymq is {ratio:.2f}x"
            )
        theirs_cpu = result.get("worker_cpu_us_per_job")
        if theirs_cpu and ours["worker_cpu_us_per_job"]:
            print(
                f"  {peer}: worker CPU {theirs_cpu:,.0f} us/job -> relaymq uses "
                f"{ours['worker_cpu_us_per_job'] / theirs_cpu:.2f}x"
            )
    return 0


def _peer_backend(scheme: str) -> str:
    return {
        "redis": "redis",
        "postgresql": "postgres",
        "postgres": "postgres",
        "amqp": "rabbitmq",
    }.get(scheme, scheme)


def run_peer(peer: str, backend: str, args: Any) -> dict[str, Any]:
    from benchmarks.peers.run import run_peer as peer_runner

    # jobs=0: the peer's own default, which is smaller for peers too slow for 10,000 in a
    # bounded run (asyncmq on PostgreSQL and RabbitMQ); the printed line says how many.
    result: dict[str, Any] = peer_runner(
        peer,
        backend,
        None,
        0 if args.peer_default_jobs else args.jobs,
        args.runs,
        extra_args=["--workload", args.workload] + (["--single"] if args.single else []),
    )
    return result


if __name__ == "__main__":
    sys.exit(main())
