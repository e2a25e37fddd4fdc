"""One soak worker process: ``python -m tests.soak.worker URL QUEUE STALLED_THRESHOLD`` (the
ledger directory in ``RELAYMQ_SOAK_LEDGER``); runs until SIGTERM, or the soak SIGKILLs it.

It starts as ``relaymq worker`` does: waiting for a server the soak is restarting (within
``connect_timeout``), and logging warnings to stderr, which the soak keeps in a file. It keeps
a journal beside its ledger file (journal.py): heartbeats with their round trips, lost claims,
refused settles, recoveries, and its RSS every ``RSS_EVERY`` seconds."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
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
    sampling = asyncio.create_task(_sample(journal))
    try:
        await worker.run()
    finally:
        sampling.cancel()
        await backend.close()


async def _sample(journal: Journal) -> None:
    while True:
        journal.rss(tasks.runs)
        await asyncio.sleep(RSS_EVERY)


if __name__ == "__main__":
    logging.basicConfig(
        level=os.environ.get("RELAYMQ_LOG_LEVEL", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # the soak crashes servers on purpose: the drivers' reconnect tracebacks are not news
    for driver in ("asyncpg", "aio_pika", "aiormq", "pymongo"):
        logging.getLogger(driver).setLevel(logging.CRITICAL)
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
