"""The worker's share of the history: outcomes, run times and pickup latencies counted per
queue, task and minute in this process, added to the backend's counters every
``history_flush_interval`` seconds in one call (never a backend call per job). A failed write
keeps the counts for the next one; a worker killed between two writes loses at most that
interval's counts (the history is for charts)."""

from __future__ import annotations

import asyncio
import logging
import time

from relaymq.errors import BackendError
from relaymq.instrumented import Instrumented
from relaymq.job import Job
from relaymq.records.store import (
    TIME_BUCKETS,
    Outcome,
    Settle,
    Tally,
    add_counts,
    time_bucket,
)

log = logging.getLogger("relaymq.worker")

KINDS = {Outcome.COMPLETE: 0, Outcome.RETRY: 1, Outcome.FAIL: 2, Outcome.EXPIRE: 2}
"""Which count an applied outcome adds to: completed, retried, failed (cancels and releases
are not counted)."""
BUCKETS = len(TIME_BUCKETS) + 1


class _Minute:
    """One (queue, task, minute)'s counts in this process since the last flush."""

    __slots__ = ("counts", "pickups", "run_times")

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.run_times = [0] * BUCKETS
        self.pickups = [0] * BUCKETS

    def tally(self, queue: str, task: str, minute: int) -> Tally:
        c, r, f = self.counts
        runs, picks = add_counts(self.run_times, ()), add_counts(self.pickups, ())  # trimmed
        return Tally(queue, minute, c, r, f, task, runs, picks)


class History:
    def __init__(self, ops: Instrumented, interval: float) -> None:
        self.ops = ops
        self.interval = interval
        self._counts: dict[tuple[str, str, int], _Minute] = {}

    def count(self, job: Job, settle: Settle) -> None:
        """``settle`` applied to ``job`` (as claimed): its outcome, its handler's run time, and
        for a first attempt the time from its enqueue to its start (releases count nothing:
        the attempt is given back)."""
        outcome = settle.outcome
        if self.interval <= 0 or outcome is Outcome.RELEASE:
            return
        key = (job.queue, job.task, int(time.time() // 60))
        m = self._counts.get(key)
        if m is None:
            m = self._counts[key] = _Minute()
        kind = KINDS.get(outcome)
        if kind is not None:
            m.counts[kind] += 1
        if settle.ran_for is not None:
            m.run_times[time_bucket(settle.ran_for)] += 1
        if job.attempts == 1 and job.claimed_at is not None:
            m.pickups[time_bucket(max(0.0, job.claimed_at - job.created_at))] += 1

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
        counts, self._counts = self._counts, {}
        if not counts:
            return
        tallies = [m.tally(q, task, minute) for (q, task, minute), m in counts.items()]
        try:
            await self.ops.add_tallies(tallies)
        except BaseException:
            for t in tallies:  # kept for the next try
                self._keep(t)
            raise

    def _keep(self, t: Tally) -> None:
        m = self._counts.setdefault((t.queue, t.task, t.minute), _Minute())
        for i, n in enumerate((t.completed, t.retried, t.failed)):
            m.counts[i] += n
        for i, n in enumerate(t.run_times):
            m.run_times[i] += n
        for i, n in enumerate(t.pickups):
            m.pickups[i] += n
