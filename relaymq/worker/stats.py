"""A worker's counts (``WorkerStats``) and the signal that one changed, which tests and tools
await (``Worker.until``) instead of sleeping."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class WorkerStats:
    claimed: int = 0
    completed: int = 0
    retried: int = 0
    failed: int = 0
    expired: int = 0
    cancelled: int = 0
    released: int = 0
    lost: int = 0
    empty_claims: int = 0
    """Claims that found nothing to do (the worker then waits)."""
    loop_blocked: int = 0
    """Times a handler blocked the event loop for half a heartbeat interval or more."""
    memory_trims: int = 0
    """Times the worker gave freed memory back to the system (``memory_trim_interval``)."""


class Counts:
    """Adds to one worker's ``stats`` and wakes whoever waits for a change (``until``)."""

    def __init__(self, worker_id: str) -> None:
        self.stats = WorkerStats()
        self._worker_id = worker_id
        self._changed = asyncio.Event()

    def add(self, field: str, n: int = 1) -> None:
        setattr(self.stats, field, getattr(self.stats, field) + n)
        self._changed.set()

    async def until(
        self, condition: Callable[[WorkerStats], bool], what: str, within: float
    ) -> None:
        """Return once ``condition(stats)`` holds; ``TimeoutError`` naming ``what`` after
        ``within`` seconds."""
        try:
            async with asyncio.timeout(within):
                while not condition(self.stats):
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise TimeoutError(f"worker {self._worker_id}: no {what} within {within}s") from None
