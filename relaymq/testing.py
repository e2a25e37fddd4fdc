"""Helpers for tests of code that uses relaymq: a controllable clock, and ``drain``, which runs
the jobs of some queues in the test's own process until there is nothing left to run."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from relaymq import instrumented
from relaymq.app import App
from relaymq.backends.base import Backend
from relaymq.job import Job, JobState
from relaymq.observers import Observer
from relaymq.records.store import Outcome, Settle
from relaymq.settings import Settings


class FakeClock:
    """A clock that moves only when told to. Pass it as ``clock=`` to a backend."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds``; returns the new time."""
        self.now += seconds
        return self.now


@dataclass(frozen=True, slots=True)
class Drained:
    """What ``drain`` ran: outcomes counted by the worker it started."""

    completed: int
    retried: int
    failed: int
    expired: int
    cancelled: int
    delayed: int
    """Jobs still delayed when ``drain`` returned (retries with backoff, future run times)."""
    errors: dict[str, str] = field(default_factory=dict)
    """The error of each job that failed for good during the drain, by job id."""


async def drain(
    app: App | Backend,
    queues: Sequence[str],
    *,
    within: float = 30.0,
    wait_for_delayed: bool = False,
    settings: Settings | None = None,
) -> Drained:
    """Run every job of ``queues`` in this process, with a real ``Worker`` of ``app`` (or of
    the default app on a backend given as such, any backend), until none is waiting or active
    (nor delayed, with ``wait_for_delayed``: then retries with backoff run too). Returns what
    ran; ``TimeoutError`` naming what is left when that takes longer than ``within`` seconds.
    The tasks must be importable here."""
    from relaymq.worker import Worker

    worker = Worker(app, list(queues), settings=settings or Settings())
    failures = _Failures(set(queues))
    worker.app.observe(failures)
    ops = worker.ops
    running = asyncio.create_task(worker.run())
    try:
        deadline = time.monotonic() + within
        while (left := await _left(ops, queues, wait_for_delayed)) is not None:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"drain: {left} after {within}s")
            seen = worker.stats.completed + worker.stats.retried + worker.stats.failed
            with contextlib.suppress(TimeoutError):  # progress, or look again shortly
                await worker.until(
                    lambda s, seen=seen: s.completed + s.retried + s.failed > seen,  # type: ignore[misc]
                    "progress",
                    within=0.05,
                )
    finally:
        worker.stop()
        await running
        worker.app.unobserve(failures)
    s = worker.stats
    delayed = sum([(await ops.counts(q))[JobState.DELAYED] for q in queues])
    return Drained(
        s.completed, s.retried, s.failed, s.expired, s.cancelled, delayed, failures.errors
    )


async def _left(
    ops: instrumented.Instrumented, queues: Sequence[str], wait_for_delayed: bool
) -> str | None:
    """What still has to run, in words; None when nothing does. Blocked jobs count (their
    dependencies run here), and so do delayed ones already due (a released flow parent)."""
    states = [JobState.BLOCKED, JobState.WAITING, JobState.ACTIVE] + (
        [JobState.DELAYED] if wait_for_delayed else []
    )
    left = []
    for q in queues:
        counts = await ops.counts(q)
        left += [f"{counts[s]} {s.value} in {q}" for s in states if counts[s]]
        if counts[JobState.DELAYED] and not wait_for_delayed:
            first = await ops.list_jobs(q, JobState.DELAYED, 0, 1)
            if first and (first[0].run_at or 0.0) <= time.time():
                left.append(f"delayed jobs due in {q}")
    return ", ".join(left) or None


class _Failures(Observer):
    """Collects the error of each job of ``queues`` whose failure for good the backend stored
    (from the worker itself: events may be dropped when the backend is busy)."""

    def __init__(self, queues: set[str]) -> None:
        self.queues = queues
        self.errors: dict[str, str] = {}

    def settled(self, job: Job, settle: Settle, applied: bool) -> None:
        if applied and settle.outcome is Outcome.FAIL and job.queue in self.queues:
            self.errors[job.id] = settle.error or ""
