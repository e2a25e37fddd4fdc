"""The instrumented facade: every call the core makes on a backend that changes or reports jobs.

``Queue``, ``Worker``, ``Maintenance`` and the rest call the backend only through it, so
what happened is reported from ONE place. Two hook points: ``_call`` wraps every backend call,
and the events of each call go out through ``_report`` (worker outcomes, batched) or
``_announce`` (producer and admin actions, at once). Backends publish by themselves in one
place only: ``enqueue_announced``, which stores jobs and sends their events in one round trip
where the backend can (as the enqueue's facts, which ``relaymq.events`` alone makes events),
and the facade decides when it is called.

Observers (``relaymq.observers``: ``relaymq.metrics``, ``relaymq.tracing``) are told what
happened through the ``Observer`` hooks of the facade's ``hooks``, its app's (``App.observe``).
With none installed, each hook point costs one attribute read.

Nothing else calls a backend method: the layers above (``App``, ``Queue``, the worker, the
schedules, the CLI and the dashboard) go through here (``tests/unit/test_layering.py``).

Events from a worker's hot path are batched: they wait at most ``window`` seconds to be
published together, one backend call for many jobs. Producer and admin events are published
before the call returns. A failed publish is logged and never raised into a worker's loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from relaymq import events, registry
from relaymq.backends.base import Backend
from relaymq.backends.meta import MetaStore
from relaymq.backends.transactional import Transactional
from relaymq.coalesce import Coalescer, coalescer
from relaymq.errors import BackendError
from relaymq.job import Job, JobState, NewJob
from relaymq.observers import UNOBSERVED, Hooks
from relaymq.records.limits import Limits
from relaymq.records.meta import MetaRecord
from relaymq.records.search import JobFilter
from relaymq.records.store import (
    Beat,
    BeatResult,
    CancelResult,
    ClaimBatch,
    Enqueued,
    Outcome,
    Recovered,
    Settle,
    SettledClaimed,
    Tally,
    WorkerInfo,
)
from relaymq.transactions import TransactionalWrites

log = logging.getLogger("relaymq.events")
recovery_log = logging.getLogger("relaymq.recovery")

EVENT_WINDOW = 0.05
"""Seconds worker events wait to be published together."""

OUTCOME_EVENT = {
    Outcome.COMPLETE: events.JOB_COMPLETED,
    Outcome.RETRY: events.JOB_RETRYING,
    Outcome.FAIL: events.JOB_FAILED,
    Outcome.EXPIRE: events.JOB_EXPIRED,
    Outcome.CANCEL: events.JOB_CANCELLED,
    Outcome.RELEASE: events.JOB_WAITING,
}


class Instrumented(TransactionalWrites, MetaStore):
    """A backend, instrumented. Methods keep the backend's names and return its answers. It is
    a meta store too, so what is written on the meta store (``relaymq.registry``,
    ``relaymq.schedules.store``, leases) goes through it."""

    def __init__(
        self,
        backend: Backend,
        *,
        window: float = EVENT_WINDOW,
        hooks: Hooks | None = None,
        paused_seen: dict[str, tuple[float, bool]] | None = None,
        outbox: Transactional | None = None,
        coalesced: Coalescer | None = None,
    ) -> None:
        self.backend = backend
        self.window = window
        self.hooks = hooks or Hooks()
        """The observers told what happens (its app's: ``App.observe``)."""
        self.paused_seen: dict[str, tuple[float, bool]] = {} if paused_seen is None else paused_seen
        """Per queue: when this facade (or its app, on this backend) last learnt whether the
        queue is paused, and the answer. Enqueues read it so that they need no extra round
        trip of their own."""
        self._pending: list[events.Event] = []
        self._wanted = asyncio.Event()
        self.outbox = outbox
        """The backend that keeps enqueues made in a caller's transaction until the relay
        moves them here (``App(url, outbox=...)``), or None."""
        self._publisher: asyncio.Task[None] | None = None
        self._publishing = asyncio.Lock()
        """Held while events are published: the batcher is never stopped inside a publish."""
        self._coalescer = coalescer(backend) if coalesced is None else coalesced

    def sibling(self) -> Instrumented:
        """A facade over the same backend and observers, with an event batch of its own (a
        worker's: ``batching``)."""
        return Instrumented(
            self.backend,
            window=self.window,
            hooks=self.hooks,
            paused_seen=self.paused_seen,
            outbox=self.outbox,
            coalesced=self._coalescer,
        )

    def _call(self, op: str) -> contextlib.AbstractContextManager[object]:
        """The per-call hook: every backend call runs inside ``with self._call(op):``."""
        if not self.hooks.observers:
            return UNOBSERVED
        return self.hooks.around(lambda o: o.call(op))

    # -- producer ---------------------------------------------------------------------------

    async def enqueue(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        """Store ``jobs``; announce each as waiting, delayed or deduplicated. Concurrent calls
        are sent together where the backend coalesces them (``relaymq.coalesce``)."""
        jobs = self._enqueuing(jobs)
        store = self.backend if self._coalescer is None else self._coalescer
        try:
            with self._call("enqueue"):  # with the events, in one round trip where it can
                answers = await store.enqueue_announced(jobs, time.time())
        except BaseException as e:
            self._enqueued(jobs, None, e)
            raise
        self._enqueued(jobs, answers, None)
        return answers

    # -- worker -----------------------------------------------------------------------------

    async def claim(self, queues: Sequence[str], worker_id: str, limit: int) -> ClaimBatch:
        with self._call("claim"):
            batch = await self.backend.claim(queues, worker_id, limit)
        self._claimed(batch, worker_id)
        return batch

    def _claimed(self, batch: ClaimBatch, worker_id: str) -> None:
        if batch.jobs:
            if self.hooks.observers:
                self.hooks.tell(lambda o: o.claimed(batch.jobs))
            now = time.time()
            self._report(
                events.Event(
                    events.JOB_ACTIVE,
                    j.queue,
                    now,
                    j.id,
                    {"attempt": j.attempts, "worker": worker_id},
                )
                for j in batch.jobs
            )

    async def heartbeat(self, beats: Sequence[Beat]) -> list[BeatResult]:
        with self._call("heartbeat"):
            return await self.backend.heartbeat(beats)

    async def settle(self, outcomes: Sequence[tuple[Job, Settle]]) -> list[bool]:
        """Apply each job's fenced transition; report it, or the lost claim when refused."""
        with self._call("settle"):
            applied = await self.backend.settle([s for _, s in outcomes])
        self._settled(outcomes, applied)
        return applied

    async def settle_and_claim(
        self,
        outcomes: Sequence[tuple[Job, Settle]],
        queues: Sequence[str],
        worker_id: str,
        limit: int,
    ) -> SettledClaimed:
        """``settle``, and a claim in the same round trip (``Backend.settle_and_claim``),
        each reported as when made alone."""
        with self._call("settle_and_claim"):  # its own op: its duration is two calls' work
            answer = await self.backend.settle_and_claim(
                [s for _, s in outcomes], queues, worker_id, limit
            )
        self._settled(outcomes, answer.applied)
        if answer.batch is not None:
            self._claimed(answer.batch, worker_id)
        return answer

    def _settled(self, outcomes: Sequence[tuple[Job, Settle]], applied: list[bool]) -> None:
        now = time.time()
        reported = []
        if self.hooks.observers:
            for (job, s), ok in zip(outcomes, applied, strict=True):
                self.hooks.tell(lambda o: o.settled(job, s, ok))  # noqa: B023 - called at once
        for (job, s), ok in zip(outcomes, applied, strict=True):
            data: dict[str, Any] = {"attempt": job.attempts}
            if not ok:
                reported.append(events.Event(events.JOB_CLAIM_LOST, job.queue, now, job.id, data))
                continue
            if s.error:
                data["error"] = s.error[:500]
                if s.outcome is Outcome.RETRY:
                    data["delay"] = s.delay
            reported.append(events.Event(OUTCOME_EVENT[s.outcome], job.queue, now, job.id, data))
        self._report(reported)

    def claim_lost(self, job: Job) -> None:
        """A heartbeat or the fenced start check found ``job``'s claim lost: the worker writes
        nothing more for it; reported as ``job:claim_lost``."""
        if self.hooks.observers:
            self.hooks.tell(lambda o: o.claim_lost(job))
        data = {"attempt": job.attempts}
        self._report([events.Event(events.JOB_CLAIM_LOST, job.queue, time.time(), job.id, data)])

    async def is_paused(self, queue: str) -> bool:
        with self._call("is_paused"):
            return await self.backend.is_paused(queue)

    async def wait(self, queues: Sequence[str], timeout: float) -> None:
        with self._call("wait"):
            await self.backend.wait(queues, timeout)

    def progress(self, queue: str, job_id: str, value: Any) -> None:
        """Report a handler's progress (stored by the next heartbeat)."""
        self._report(
            [events.Event(events.JOB_PROGRESS, queue, time.time(), job_id, {"progress": value})]
        )

    # -- maintenance ------------------------------------------------------------------------

    async def recover_stalled(self, queue: str, threshold: float, max_stalled: int) -> Recovered:
        """One recovery pass over ``queue``; every job it moved is logged and announced."""
        with self._call("recover_stalled"):
            found = await self.backend.recover_stalled(queue, threshold, max_stalled)
        if self.hooks.observers:
            self.hooks.tell(lambda o: o.recovered(queue, found))
        for job_id in found.requeued:
            recovery_log.warning("job %s/%s stalled; back to waiting", queue, job_id)
        for job_id in found.failed:
            recovery_log.error(
                "job %s/%s stalled more than max_stalled times; failed", queue, job_id
            )
        for problem in found.errors:
            recovery_log.error("stalled recovery of %s skipped a job: %s", queue, problem)
        now = time.time()
        announced = [events.Event(events.JOB_STALLED, queue, now, i) for i in found.requeued]
        announced += [
            events.Event(events.JOB_FAILED, queue, now, i, {"error": "stalled too often"})
            for i in found.failed
        ]
        self._report(announced)
        await self.flush()  # at once; a failed publish is logged, never raised: recovery goes on
        return found

    async def prune_keys(self, queue: str, older_than: float) -> int:
        with self._call("prune_keys"):
            return await self.backend.prune_keys(queue, older_than)

    async def clean(self, queue: str, state: JobState, older_than: float) -> int:
        with self._call("clean"):
            return await self.backend.clean(queue, state, older_than)

    # -- admin ------------------------------------------------------------------------------

    # The one-job actions: the batch call with one id, reported under their own names.

    async def cancel(self, queue: str, job_id: str) -> CancelResult:
        """Cancel one job: ``CANCELLED``; else one read tells ``ALREADY_TERMINAL`` (it had
        ended; nothing changed) from ``NOT_FOUND``."""
        with self._call("cancel"):
            [done] = await self.backend.cancel_jobs(queue, [job_id])
        if done:
            await self._announce_one(events.JOB_CANCELLED, queue, job_id)
            return CancelResult.CANCELLED
        job = await self.get_job(queue, job_id)
        return CancelResult.NOT_FOUND if job is None else CancelResult.ALREADY_TERMINAL

    async def retry_job(self, queue: str, job_id: str) -> bool:
        with self._call("retry_job"):
            [done] = await self.backend.retry_jobs(queue, [job_id])
        if done:
            await self._announce_one(events.JOB_WAITING, queue, job_id, {"replay": True})
        return done

    async def remove_job(self, queue: str, job_id: str) -> bool:
        with self._call("remove_job"):
            [done] = await self.backend.remove_jobs(queue, [job_id])
        if done:
            await self._announce_one(events.JOB_REMOVED, queue, job_id)
        return done

    async def cancel_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        """Cancel a batch; one ``job:cancelled`` per job cancelled, in one publish."""
        with self._call("cancel_jobs"):
            done = await self.backend.cancel_jobs(queue, ids)
        await self._announce_batch(events.JOB_CANCELLED, queue, ids, done, {})
        return done

    async def retry_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        """Retry a batch; one ``job:waiting`` (a replay) per job retried, in one publish."""
        with self._call("retry_jobs"):
            done = await self.backend.retry_jobs(queue, ids)
        await self._announce_batch(events.JOB_WAITING, queue, ids, done, {"replay": True})
        return done

    async def remove_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        """Remove a batch; one ``job:removed`` per job deleted, in one publish."""
        with self._call("remove_jobs"):
            done = await self.backend.remove_jobs(queue, ids)
        await self._announce_batch(events.JOB_REMOVED, queue, ids, done, {})
        return done

    async def _announce_batch(
        self,
        name: str,
        queue: str,
        ids: Sequence[str],
        done: Sequence[bool],
        data: dict[str, Any],
    ) -> None:
        now = time.time()
        await self._announce(
            [
                events.Event(name, queue, now, job_id, dict(data))
                for job_id, ok in zip(ids, done, strict=True)
                if ok
            ]
        )

    async def pause(self, queue: str) -> None:
        with self._call("pause"):
            await self.backend.pause(queue)
        await self._announce_one(events.QUEUE_PAUSED, queue)

    async def resume(self, queue: str) -> None:
        with self._call("resume"):
            await self.backend.resume(queue)
        await self._announce_one(events.QUEUE_RESUMED, queue)

    async def set_limits(self, queue: str, limits: Limits | None) -> None:
        with self._call("set_limits"):
            await self.backend.set_limits(queue, limits)

    async def register_worker(self, info: WorkerInfo, ttl: float, *, online: bool = False) -> None:
        """Register or renew ``info``; ``online=True`` the first time announces the worker."""
        await registry.register(self, info, ttl)
        if online:
            await self._announce([self._worker_event(events.WORKER_ONLINE, info)])

    async def unregister_worker(self, info: WorkerInfo) -> None:
        await registry.unregister(self, info.id)
        await self._announce([self._worker_event(events.WORKER_OFFLINE, info)])

    # -- meta -------------------------------------------------------------------------------

    async def meta_get(self, key: str) -> MetaRecord | None:
        with self._call("meta_get"):
            return await self.backend.meta_get(key)

    async def meta_put(self, key: str, value: bytes, ttl: float | None = None) -> None:
        with self._call("meta_put"):
            await self.backend.meta_put(key, value, ttl)

    async def meta_swap(
        self, key: str, expected: int | None, value: bytes, ttl: float | None = None
    ) -> bool:
        with self._call("meta_swap"):
            return await self.backend.meta_swap(key, expected, value, ttl)

    async def meta_list(self, prefix: str) -> list[MetaRecord]:
        with self._call("meta_list"):
            return await self.backend.meta_list(prefix)

    async def meta_delete(self, key: str) -> bool:
        with self._call("meta_delete"):
            return await self.backend.meta_delete(key)

    async def lease(self, name: str, owner: str, ttl: float) -> bool:
        """The backend's lease (a backend may take it in one step of its own)."""
        with self._call("lease"):
            return await self.backend.lease(name, owner, ttl)

    async def drain(self, queue: str) -> int:
        with self._call("drain"):
            return await self.backend.drain(queue)

    async def obliterate(self, queue: str) -> None:
        with self._call("obliterate"):
            await self.backend.obliterate(queue)

    # -- reads ------------------------------------------------------------------------------

    async def get_job(self, queue: str, job_id: str) -> Job | None:
        """One job's record (the backend's batch read, of one id)."""
        with self._call("get_job"):
            [job] = await self.backend.get_jobs(queue, [job_id])
        return job

    async def get_jobs(self, queue: str, ids: Sequence[str]) -> list[Job | None]:
        with self._call("get_jobs"):
            return await self.backend.get_jobs(queue, ids)

    async def list_jobs(
        self,
        queue: str,
        state: JobState,
        offset: int = 0,
        limit: int = 100,
        where: JobFilter | None = None,
    ) -> list[Job]:
        with self._call("list_jobs"):
            return await self.backend.list_jobs(queue, state, offset, limit, where)

    async def sequence_head(self, queue: str, sequence: str) -> Job | None:
        with self._call("sequence_head"):
            return await self.backend.sequence_head(queue, sequence)

    async def counts(self, queue: str) -> dict[JobState, int]:
        with self._call("counts"):
            return await self.backend.counts(queue)

    async def list_limits(self) -> dict[str, Limits]:
        with self._call("list_limits"):
            return await self.backend.list_limits()

    async def list_queues(self) -> list[str]:
        with self._call("list_queues"):
            return await self.backend.list_queues()

    async def list_workers(self) -> list[WorkerInfo]:
        """The live workers (``relaymq.registry``, on the meta store)."""
        return await registry.list_workers(self)

    async def list_silent_workers(self) -> list[WorkerInfo]:
        """Workers that stopped renewing their registration lately without unregistering."""
        return await registry.list_silent(self)

    # -- history ----------------------------------------------------------------------------

    async def tallies(self, queue: str, since: int) -> list[Tally]:
        with self._call("tallies"):
            return await self.backend.tallies(queue, since)

    async def add_tallies(self, tallies: Sequence[Tally]) -> None:
        with self._call("add_tallies"):
            await self.backend.add_tallies(tallies)

    async def prune_tallies(self, before: int) -> None:
        with self._call("prune_tallies"):
            await self.backend.prune_tallies(before)

    @staticmethod
    def _worker_event(name: str, info: WorkerInfo) -> events.Event:
        data = {"worker": info.id, "queues": list(info.queues)}
        return events.Event(name, info.queues[0], time.time(), None, data)

    # -- events -----------------------------------------------------------------------------

    async def publish(self, published: Sequence[events.Event]) -> None:
        """Publish ``published`` to every subscriber, in one backend call."""
        with self._call("publish"):
            if published:
                await self.backend.publish([events.encode(published)])

    async def subscribe(self) -> events.Subscription:
        """Start a subscription (live when this returns); iterate it for decoded events."""
        return events.Subscription(await self.backend.subscribe())

    # -- reporting --------------------------------------------------------------------------

    async def _announce_one(
        self, name: str, queue: str, job_id: str | None = None, data: dict[str, Any] | None = None
    ) -> None:
        await self._announce([events.Event(name, queue, time.time(), job_id, data or {})])

    async def _announce(self, announced: Sequence[events.Event]) -> None:
        """Producer and admin actions: published before the call returns."""
        await self.publish(announced)

    def _report(self, reported: Any) -> None:
        """Worker outcomes: batched, published within ``window`` by ``batching``."""
        self._pending.extend(reported)
        if self._pending:
            self._wanted.set()

    @contextlib.asynccontextmanager
    async def batching(self) -> AsyncIterator[None]:
        """Publish reported events in batches while inside; the rest on the way out."""
        self._publisher = asyncio.create_task(self._publish_loop(), name="relaymq-events")
        try:
            yield
        finally:
            async with self._publishing:  # between two publishes: nothing in flight is lost
                self._publisher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._publisher
            self._publisher = None
            await self.flush()

    async def flush(self) -> None:
        """Publish every reported event now; a failure is logged and the events dropped."""
        async with self._publishing:
            pending, self._pending = self._pending, []
            if not pending:
                return
            try:
                await self.publish(pending)
            except BackendError as e:
                log.warning("could not publish %d events: %s", len(pending), e)
            except Exception:  # an event must never take a worker down
                log.exception("could not publish %d events", len(pending))

    async def _publish_loop(self) -> None:
        """At once when idle; under load at most once per ``window``."""
        last = 0.0
        while True:
            await self._wanted.wait()
            pause = last + self.window - time.monotonic()
            if pause > 0:  # published a moment ago: let more events join this batch
                await asyncio.sleep(pause)
            self._wanted.clear()
            last = time.monotonic()
            await self.flush()
