"""One soak worker process: ``python -m tests.soak.worker URL QUEUE STALLED_THRESHOLD`` (the
ledger directory in ``RELAYMQ_SOAK_LEDGER``); runs until SIGTERM, or the soak SIGKILLs it.

It starts as ``relaymq worker`` does: waiting for a server the soak is restarting (within
``connect_timeout``), and logging warnings to stderr, which the soak keeps in a file. It keeps
a journal beside its ledger file (journal.py): heartbeats with their round trips, lost claims,
refused settles, recoveries, and its RSS every ``RSS_EVERY`` seconds.

With ``RELAYMQ_SOAK_TRACE=N`` it also looks for what its memory grows by: after ``N`` runs it
takes a tracemalloc snapshot and counts the live objects by type, and at its end writes to
``<pid>.trace`` beside its journal where the allocations and objects grew since (tracemalloc
slows the worker down: a run to look into a growth, not one to measure it). With
``RELAYMQ_SOAK_TRIM=1`` it asks glibc to give back its free memory at its end and writes the
RSS before and after to ``<pid>.trim``."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import os
import signal
import sys
import tracemalloc
from collections import Counter
from pathlib import Path

from relaymq import Settings, Worker
from relaymq.cli.common import connect_waiting
from tests.soak import tasks  # registers the task
from tests.soak.journal import Journal

RSS_EVERY = 5.0


def settings(stalled_threshold: float) -> Settings:
    """Short thresholds, so a kill is recovered in seconds (a slow server gets longer ones);
    max_stalled high, so no job of the soak is dead-lettered for having been on killed workers
    too often."""
    return Settings(
        concurrency=8,
        heartbeat_interval=stalled_threshold / 7.5,
        stalled_threshold=stalled_threshold,
        stalled_check_interval=stalled_threshold / 5,
        shutdown_timeout=2.0,
        max_stalled=1000,
        history_flush_interval=0,
    )


async def main(url: str, queue: str, stalled_threshold: float) -> None:
    options = settings(stalled_threshold)
    backend = await connect_waiting(url, options.connect_timeout)
    worker = Worker(backend, [queue], settings=options)
    journal = Journal(Path(os.environ.get("RELAYMQ_SOAK_LEDGER", ".")) / f"{os.getpid()}.journal")
    worker.app.observe(journal)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, worker.stop)
    trace = Trace(int(os.environ.get("RELAYMQ_SOAK_TRACE", "0") or 0))
    sampling = asyncio.create_task(_sample(journal, trace))
    try:
        await worker.run()
    finally:
        sampling.cancel()
        journal.rss(tasks.runs)  # the last reading: after every run
        trace.write(journal.path.with_suffix(".trace"))
        if os.environ.get("RELAYMQ_SOAK_TRIM"):
            _trim(journal.path.with_suffix(".trim"))
        await backend.close()


async def _sample(journal: Journal, trace: Trace) -> None:
    while True:
        journal.rss(tasks.runs)
        trace.sample(tasks.runs)
        await asyncio.sleep(RSS_EVERY)


class Trace:
    """What the process's memory grew by, from ``after`` runs (0: not looked for) to its end."""

    TOP = 25

    def __init__(self, after: int) -> None:
        self.after = after
        self.base: tuple[tracemalloc.Snapshot, Counter[str], int] | None = None
        self.heap: list[tuple[int, int, int]] = []
        """(runs, bytes the Python heap holds, its peak so far) at each sample."""
        if after:
            tracemalloc.start(12)

    def sample(self, runs: int) -> None:
        if not self.after:
            return
        self.heap.append((runs, *tracemalloc.get_traced_memory()))
        if self.base is None and runs >= self.after:
            self.base = (_snapshot(), _objects(), runs)

    def write(self, path: Path) -> None:
        if self.base is None:
            return
        snapshot, objects, runs = self.base
        lines = [f"from {runs} runs to {tasks.runs}; objects by type, growth:"]
        grown = _objects()
        grown.subtract(objects)
        lines += [f"  {n:+8d} {name}" for name, n in grown.most_common(self.TOP)]
        lines.append("allocations by traceback, growth:")
        for stat in _snapshot().compare_to(snapshot, "traceback")[: self.TOP]:
            lines.append(f"  {stat.size_diff:+10d} B {stat.count_diff:+7d} blocks")
            lines += [f"      {frame}" for frame in stat.traceback.format()[-12:]]
        lines.append("the Python heap (tracemalloc): runs, KiB held, KiB at its peak so far")
        lines += [f"  {runs} {now // 1024} {peak // 1024}" for runs, now, peak in self.heap]
        path.write_text("\n".join(lines) + "\n")


def _trim(path: Path) -> None:
    """RSS before and after glibc gives back the free memory it holds (``malloc_trim``): how
    much of the RSS is memory freed but kept, rather than memory in use."""

    def rss() -> int:
        status = Path("/proc/self/status").read_text()
        return int(next(ln for ln in status.splitlines() if ln.startswith("VmRSS:")).split()[1])

    before = rss()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    path.write_text(f"rss before malloc_trim {before} KiB, after {rss()} KiB\n")


def _snapshot() -> tracemalloc.Snapshot:
    ignored = [tracemalloc.Filter(False, tracemalloc.__file__)]
    return tracemalloc.take_snapshot().filter_traces(ignored)


def _objects() -> Counter[str]:
    gc.collect()
    return Counter(type(o).__qualname__ for o in gc.get_objects())


if __name__ == "__main__":
    logging.basicConfig(
        level=os.environ.get("RELAYMQ_LOG_LEVEL", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # the soak crashes servers on purpose: the drivers' reconnect tracebacks are not news
    for driver in ("asyncpg", "aio_pika", "aiormq", "pymongo"):
        logging.getLogger(driver).setLevel(logging.CRITICAL)
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
