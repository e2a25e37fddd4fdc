"""Deliveries that reach the broker later than their jobs: delayed jobs as they fall due,
reconciliation for a process that died between storing a job and publishing it, and recovery's
replacement deliveries that no worker took."""

from __future__ import annotations

import asyncio

from relaymq.backends.base import Backend, DeliveryStore
from relaymq.backends.rabbitmq.config import Options
from relaymq.backends.rabbitmq.publisher import Outgoing, Publisher
from relaymq.job import Job, JobState
from relaymq.records.store import Clock

PROMOTE_BATCH = 1000
RECONCILE_PAGE = 100
MAX_WATCHED = 10_000
"""Replacement deliveries watched at once (beyond that, reconciliation still covers them)."""


class Reconciler:
    def __init__(
        self,
        store: Backend,
        delivery: DeliveryStore,
        publisher: Publisher,
        options: Options,
        now: Clock,
    ) -> None:
        self.store = store
        self.delivery = delivery
        self.publisher = publisher
        self.options = options
        self.now = now
        self.next_due: dict[str, float] = {}
        """The earliest due time this process knows of, per queue."""
        self._next_promote: dict[str, float] = {}
        self._next_reconcile: dict[str, float] = {}
        self._republished: dict[tuple[str, str, int], float] = {}
        self._replacements: dict[tuple[str, str], tuple[int, float]] = {}
        """Recovery's replacement deliveries: (queue, job id) -> (token, when to look again)."""

    def note_due(self, queue: str, at: float) -> None:
        due = self.next_due.get(queue)
        if due is None or at < due:
            self.next_due[queue] = at

    def promote_due(self, queue: str, now: float) -> bool:
        """Whether ``promote`` would ask the store now (else claims skip it, cheaply)."""
        due = self.next_due.get(queue)
        return now >= self._next_promote.get(queue, float("-inf")) or (
            due is not None and now >= due
        )

    async def promote(self, queue: str, now: float) -> None:
        """Publish the deliveries of due delayed jobs; a store round trip at most every
        ``promote_interval`` per queue, unless this process knows a job is due."""
        if not self.promote_due(queue, now):
            return
        due = self.next_due.get(queue)
        self._next_promote[queue] = now + self.options.promote_interval
        if due is not None and due <= now:
            del self.next_due[queue]
        jobs = await self.delivery.promote_due(queue, PROMOTE_BATCH)
        if len(jobs) == PROMOTE_BATCH:
            self._next_promote[queue] = now  # more are due: go on next time
        await self.publisher.publish([(queue, j.id, j.token, j.priority) for j in jobs])

    async def reconcile(self, queue: str) -> None:
        """Republish the deliveries of jobs that have waited at the head of the queue for
        ``reconcile_after`` seconds while the broker had nothing ready for it. Duplicates are
        harmless (only one token matches), so this errs on the side of republishing."""
        now = self.now()
        if now < self._next_reconcile.get(queue, float("-inf")):
            return
        self._next_reconcile[queue] = now + self.options.reconcile_after / 2
        self._republished = {k: t for k, t in self._republished.items() if t > now}
        if await self.store.is_paused(queue):
            return
        if await self.publisher.ready_count(queue):
            return
        cutoff = now - self.options.reconcile_after
        out: list[Outgoing] = []
        for job in await self.store.list_jobs(queue, JobState.WAITING, 0, RECONCILE_PAGE):
            key = (queue, job.id, job.token)
            touched = max(job.created_at, job.claimed_at or 0.0, job.heartbeat_at or 0.0)
            if touched < cutoff and key not in self._republished:
                out.append((queue, job.id, job.token, job.priority))
                self._republished[key] = now + self.options.reconcile_after
        await self.publisher.publish(out)

    def replaced(self, queue: str, jobs: list[Job], look_after: float) -> None:
        """Recovery published a replacement delivery for each of ``jobs``: look again after
        ``look_after`` seconds (its stalled threshold)."""
        at = self.now() + look_after
        for job in jobs:
            if len(self._replacements) < MAX_WATCHED:
                self._replacements[(queue, job.id)] = (job.token, at)

    async def republish_untaken(self, queue: str, look_after: float) -> None:
        """Publish again each replacement delivery that no claim took within ``look_after``
        seconds. It may have been pushed to a worker frozen while it had free slots, which holds
        it without starting it; of two copies one claim wins, the other is dropped as stale."""
        now = self.now()
        due = [
            (i, token)
            for (q, i), (token, at) in self._replacements.items()
            if q == queue and at <= now
        ]
        if not due:
            return
        waiting = {j.id: j for j in await waiting_jobs(self.store, queue, [i for i, _ in due])}
        out: list[Outgoing] = []
        for job_id, token in due:
            job = waiting.get(job_id)
            if job is not None and job.token == token:
                out.append((queue, job_id, token, job.priority))
                self._replacements[(queue, job_id)] = (token, now + look_after)
            else:  # taken (or ended): nothing to do
                del self._replacements[(queue, job_id)]
        await self.publisher.publish(out)


async def waiting_jobs(store: Backend, queue: str, ids: list[str]) -> list[Job]:
    """Those of ``ids`` that are waiting; an unreadable record is skipped, not an error."""
    read = await asyncio.gather(*(store.get_jobs(queue, [i]) for i in ids), return_exceptions=True)
    for r in read:
        if isinstance(r, BaseException) and not isinstance(r, Exception):
            raise r
    jobs = [r[0] for r in read if isinstance(r, list)]  # one read per id: each fails alone
    return [j for j in jobs if j is not None and j.state is JobState.WAITING]
