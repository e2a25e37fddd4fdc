"""A worker gives the memory Python freed back to the system (glibc's ``malloc_trim``), so
its RSS comes back down after a burst instead of keeping the freed pages for good."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from relaymq import Worker
from relaymq.backends.memory import InMemoryBackend
from relaymq.errors import ConfigError
from relaymq.settings import Settings
from relaymq.worker.memory import trimmer
from tests.worker.conftest import FAST

BURST_MIB = 64
BLOCK = 2000
"""Bytes per block: above Python's small-object allocator, so each is glibc's own."""


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


def burst() -> list[bytes]:
    """Allocates ``BURST_MIB`` MiB in blocks (written to, so resident) and frees all but the
    last of every 64: the pages between the kept ones are free, but not at the heap's top,
    so glibc keeps them unless asked to give them back."""
    count = BURST_MIB * 1024 * 1024 // BLOCK // 64 * 64
    blocks = [i.to_bytes(8, "little") * (BLOCK // 8) for i in range(count)]
    kept = blocks[63::64]
    del blocks
    return kept


@pytest.mark.skipif(trimmer() is None, reason="no malloc_trim: the C library is not glibc")
async def test_a_worker_gives_back_the_memory_freed_in_a_burst() -> None:
    kept = burst()
    high = rss_kib()
    worker = Worker(InMemoryBackend(), ["trim"], settings=FAST.replace(memory_trim_interval=0.05))
    running = asyncio.create_task(worker.run())
    try:
        await worker.until(lambda s: s.memory_trims >= 1, "memory given back")
        low = rss_kib()
    finally:
        worker.stop()
        async with asyncio.timeout(10):  # the worker stopping
            await running
    assert len(kept) > 0
    assert low < high - BURST_MIB * 1024 // 2, f"RSS {high} KiB before the trim, {low} after"


def test_memory_trim_interval_0_turns_it_off_and_below_0_is_refused() -> None:
    worker = Worker(InMemoryBackend(), ["trim"], settings=FAST.replace(memory_trim_interval=0))
    assert worker._memory is None
    with pytest.raises(ConfigError, match="memory_trim_interval must be >= 0"):
        Settings(memory_trim_interval=-1)
