"""The worker's share of the history: outcomes counted per queue and minute in this process,
added to the backend's counters every ``history_flush_interval`` seconds in one call (never a
backend call per job). A failed write keeps the counts for the next one; a worker killed
between two writes loses at most that interval's counts (the history is for charts)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

from relaymq.errors import BackendError
from relaymq.instrumented import Instrumented
from relaymq.records.store import Outcome, Tally

log = logging.getLogger("relaymq.worker")

KINDS = {Outcome.COMPLETE: 0, Outcome.RETRY: 1, Outcome.FAIL: 2, Outcome.EXPIRE: 2}
"""Which count an applied outcome adds to: completed, retried, failed (cancels and releases
are not counted)."""


class History:
    def __init__(self, ops: Instrumented, interval: float) -> None:
        self.ops = ops
        self.interval = interval
        self._counts: Counter[tuple[str, int, int]] = Counter()

    def count(self, queue: str, outcome: Outcome) -> None:
        kind = KINDS.get(outcome)
        if kind is not None and self.interval > 0:
            self._counts[(queue, int(time.time() // 60), kind)] += 1

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.flush()
            except BackendError as e:
                log.warning("could not write the history (%s); kept for the next try", e)
            except Exception:  # a bug must not stop the history
                log.exception("could not write the history")

    async def flush(self) -> None:
        """Add every count since the last flush to the backend's history."""
        counts, self._counts = self._counts, Counter()
        if not counts:
            return
        tallies = []
        for (queue, minute, kind), n in counts.items():
            values = [0, 0, 0]
            values[kind] = n
            tallies.append(Tally(queue, minute, *values))
        try:
            await self.ops.add_tallies(tallies)
        except BaseException:
            self._counts.update(counts)  # kept for the next try
            raise
