"""A ``Settler``'s bookkeeping for tests that drive one without a worker."""

from __future__ import annotations

from collections.abc import Callable

from relaymq.records.store import Settle
from relaymq.worker.running import RunningJob


class Notes:
    """Counts the jobs claimed; hands each settled outcome to ``on_settled``."""

    def __init__(
        self, on_settled: Callable[[RunningJob, Settle, bool], None] = lambda r, s, ok: None
    ) -> None:
        self.on_settled = on_settled
        self.claimed_jobs = 0

    def claimed(self, n: int) -> None:
        self.claimed_jobs += n

    def settled(self, r: RunningJob, s: Settle, applied: bool) -> None:
        self.on_settled(r, s, applied)
