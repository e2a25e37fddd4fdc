"""The facade's writes in a caller's transaction (``relaymq.backends.transactional``): part of
``Instrumented`` (its base), kept apart for size. An enqueue goes to the backend itself when it
can write in the caller's transaction, or as one envelope (``relaymq.records.outbox``) to the
app's outbox, which the relay moves on (``relaymq.outbox``). Observers are told of the jobs as
of any enqueue; their events reach subscribers when (and if) the transaction commits.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

from relaymq import events
from relaymq.backends.base import Backend
from relaymq.backends.transactional import InTransaction, Transactional, transactional
from relaymq.errors import ConfigError
from relaymq.job import Job, NewJob
from relaymq.observers import Hooks, observer_log
from relaymq.records import outbox
from relaymq.records.store import ClaimBatch, Enqueued, Settle


class TransactionalWrites:
    """The facade's methods for writes in a caller's transaction (``Instrumented`` is one),
    and the relay's calls on an outbox's facade."""

    backend: Backend
    hooks: Hooks
    outbox: Transactional | None

    def _call(self, op: str) -> contextlib.AbstractContextManager[object]:
        raise NotImplementedError  # Instrumented's

    def _enqueuing(self, jobs: Sequence[NewJob]) -> Sequence[NewJob]:
        for o in self.hooks.observers:
            try:
                jobs = o.enqueuing(jobs)
            except Exception:
                observer_log.exception("observer %r failed", o)
        return jobs

    def _enqueued(
        self, jobs: Sequence[NewJob], answers: list[Enqueued] | None, error: BaseException | None
    ) -> None:
        if self.hooks.observers:
            self.hooks.tell(lambda o: o.enqueued(jobs, answers, error))

    async def enqueue_in(self, connection: object, jobs: Sequence[NewJob]) -> list[Enqueued]:
        """``enqueue`` in the open transaction of ``connection``."""
        jobs = self._enqueuing(jobs)
        try:
            with self._call("enqueue_in"):
                answers = await self._enqueue_in(connection, jobs).run()
        except BaseException as e:
            self._enqueued(jobs, None, e)
            raise
        return self._enqueued_in(jobs, answers)

    def enqueue_in_sync(self, connection: object, jobs: Sequence[NewJob]) -> list[Enqueued]:
        """``enqueue_in`` from sync code, on the calling thread."""
        jobs = self._enqueuing(jobs)
        try:
            with self._call("enqueue_in"):
                answers = self._enqueue_in(connection, jobs).run_sync()
        except BaseException as e:
            self._enqueued(jobs, None, e)
            raise
        return self._enqueued_in(jobs, answers)

    def _enqueue_in(self, connection: object, jobs: Sequence[NewJob]) -> InTransaction[Any]:
        at = time.time()
        if self.outbox is not None:
            most = self.backend.capabilities.max_priority
            for j in jobs:  # refused now, in the transaction, rather than by the relay's move
                if j.priority > most:
                    raise ConfigError(
                        f"priority {j.priority} is over the backend's largest, {most}: "
                        "use a smaller one"
                    )
            return self.outbox.enqueue_in(connection, [outbox.envelope(jobs, at)], at)
        store = transactional(self.backend)
        if store is None:
            raise ConfigError(
                f"the {self.backend.url.partition(':')[0]}:// backend cannot write in your "
                "transaction: give the app an outbox in your database "
                "(relaymq.App(url, outbox='postgresql://...' or 'sqlite:///...'))"
            )
        return store.enqueue_in(connection, jobs, at)

    def _enqueued_in(self, jobs: Sequence[NewJob], answers: list[Enqueued]) -> list[Enqueued]:
        if self.outbox is not None:  # the relay's move decides what is a duplicate
            answers = [Enqueued(j.id) for j in jobs]
        self._enqueued(jobs, answers, None)
        return answers

    async def complete_in(self, connection: object, job: Job, settle: Settle) -> bool:
        """``job``'s completion (``settle``), fenced, in the open transaction of
        ``connection``, with its ``job:completed`` (seen at commit); True when it applied."""
        with self._call("complete_in"):
            return await self._complete_in(connection, job, settle).run()

    def complete_in_sync(self, connection: object, job: Job, settle: Settle) -> bool:
        """``complete_in`` from sync code (a plain handler's thread)."""
        with self._call("complete_in"):
            return self._complete_in(connection, job, settle).run_sync()

    def _complete_in(self, connection: object, job: Job, settle: Settle) -> InTransaction[bool]:
        store = transactional(self.backend)
        if store is None:
            raise ConfigError(
                f"the {self.backend.url.partition(':')[0]}:// backend cannot complete a job in "
                "your transaction (the PostgreSQL and SQLite backends can)"
            )
        data = {"attempt": job.attempts, "in_transaction": True}
        event = events.Event(events.JOB_COMPLETED, job.queue, time.time(), job.id, data)
        return store.settle_in(connection, settle, [events.encode([event])])

    # -- the relay's side of an outbox (this facade over the outbox backend) -------------------

    async def outbox_take(self, owner: str, limit: int) -> ClaimBatch:
        """Claim up to ``limit`` envelopes (no events: they are not the app's jobs)."""
        with self._call("outbox_take"):
            return await self.backend.claim([outbox.QUEUE], owner, limit)

    async def outbox_done(self, ids: Sequence[str]) -> None:
        """Delete envelopes whose jobs were moved."""
        with self._call("outbox_done"):
            await self.backend.remove_jobs(outbox.QUEUE, ids)

    async def outbox_back(self, settles: Sequence[Settle]) -> None:
        """Give claimed envelopes back (RELEASE: moved again soon; FAIL: kept, refused)."""
        with self._call("outbox_back"):
            await self.backend.settle(settles)
