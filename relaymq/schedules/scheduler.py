"""The scheduler: fires every stored schedule's due ticks, run in every worker but elected
through the backend's lease, so one process fires at a time.

Exactly once per tick, whatever crashes: a pass enqueues a tick's job under the tick's own id
(``Schedule.job_id``), then moves the schedule's ``next_ms`` past it with a compare-and-set.
A scheduler that dies between the two leaves ``next_ms`` where it was, and the next one fires
the same ticks again: the same ids, answered as duplicates. Two schedulers that both think
they lead (a lease that lapsed mid-pass) do the same.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from relaymq.backends.base import Backend
from relaymq.errors import BackendError, CorruptRecordError
from relaymq.instrumented import Instrumented
from relaymq.records.store import Clock, StoredSchedule
from relaymq.schedules import store
from relaymq.schedules.spec import Schedule

log = logging.getLogger("relaymq.scheduler")

LEASE = "scheduler"
"""The name of the lease that elects the firing scheduler."""


class Scheduler:
    """Fires due ticks every ``interval`` seconds while it holds the lease (tried every
    ``lease_ttl / 3`` seconds while another process holds it). ``clock`` gives seconds since
    the epoch: the host's clock, or a test clock. Every scheduler of one backend shares the
    lease named ``lease``."""

    def __init__(
        self,
        ops: Instrumented | Backend,
        owner: str,
        *,
        clock: Clock | None = None,
        interval: float = 1.0,
        lease_ttl: float = 10.0,
        lease: str = LEASE,
    ) -> None:
        self.ops = ops if isinstance(ops, Instrumented) else Instrumented(ops)
        self.owner = owner
        self.clock = clock or time.time
        self.interval = interval
        self.lease_ttl = lease_ttl
        self.lease = lease
        self.leading = False
        self._unreadable: set[str] = set()

    def now_ms(self) -> int:
        return round(self.clock() * 1000)

    async def define(self, schedules: Iterable[Schedule]) -> int:
        """Store schedules defined in code (an unchanged one keeps its state); how many were
        new or changed."""
        written = 0
        for s in schedules:
            if await store.save(self.ops, s.stored(self.now_ms())):
                log.info("schedule %s stored: %s, task %s", s.id, s.describe(), s.task)
                written += 1
        return written

    async def run(self) -> None:
        """Pass after pass until cancelled; an error ends a pass, never the loop."""
        try:
            while True:
                try:
                    await self.run_once()
                except BackendError as e:
                    log.warning("scheduler pass failed: %s", e)
                except Exception:
                    log.exception("scheduler pass failed")
                await asyncio.sleep(self.interval if self.leading else self.lease_ttl / 3)
        finally:
            if self.leading:
                await asyncio.shield(self._release())

    async def _release(self) -> None:
        try:
            await self.ops.lease(self.lease, self.owner, 0)
        except BackendError as e:
            log.warning("could not give up the scheduler lease: %s", e)
        self.leading = False

    async def run_once(self) -> list[str]:
        """One pass, when this process holds (or takes) the lease: the ids of the jobs it
        enqueued (not those answered as duplicates)."""
        was_leading = self.leading
        self.leading = await self.ops.lease(self.lease, self.owner, self.lease_ttl)
        if self.leading != was_leading:
            log.info(
                "scheduler %s: %s",
                self.owner,
                "firing schedules" if self.leading else "another process fires them",
            )
        if not self.leading:
            return []
        now_ms = self.now_ms()
        fired: list[str] = []
        for stored in await store.load(self.ops):
            if stored.paused or stored.next_ms > now_ms:
                continue
            try:
                fired += await self._fire(stored, now_ms)
            except BackendError as e:  # the schedule keeps its next_ms: the next pass retries
                log.warning("schedule %s could not fire: %s", stored.id, e)
        return fired

    async def _fire(self, stored: StoredSchedule, now_ms: int) -> list[str]:
        try:
            schedule = Schedule.decode(stored.id, stored.spec)
        except CorruptRecordError as e:
            if stored.id not in self._unreadable:  # said once; it stays until fixed or removed
                self._unreadable.add(stored.id)
                log.error("%s; it does not fire until it is saved again or removed", e)
            return []
        self._unreadable.discard(stored.id)
        plan = schedule.plan(stored.next_ms, now_ms)
        fired: list[str] = []
        if plan.fire:
            payload = schedule.payload()
            jobs = [schedule.new_job(schedule.job_id(t), payload) for t in plan.fire]
            answers = await self.ops.enqueue(jobs)
            fired = [a.id for a in answers if not a.duplicate]
        if plan.dropped:
            log.warning(
                "schedule %s let %d ticks go, missed while no scheduler ran (missed=%s)",
                schedule.id,
                plan.dropped,
                schedule.missed,
            )
        if not await store.advance(self.ops, stored.id, stored.next_ms, plan.next_ms):
            log.info("schedule %s changed during the pass; its new state stands", stored.id)
        return fired
