"""The instrumented facade: every call the core makes on a backend that changes or reports jobs.

``Queue``, ``Worker`` and ``Maintenance`` call the backend only through ``Instrumented``, so
what happened is reported from ONE place. Two hook points: ``_call`` wraps every backend call,
and the events of each call go out through ``_report`` (worker outcomes, batched) or
``_announce`` (producer and admin actions, at once). Backends publish by themselves in one
place only: ``enqueue_announced``, which stores jobs and sends their events in one round trip
where the backend can (as the enqueue's facts, which ``relaymq.events`` alone makes events),
and the facade decides when it is called.

Observers (``relaymq.metrics``, ``relaymq.tracing``) are told what happened through the
``Observer`` hooks, installed process-wide with ``observe``. With none installed, each hook
point costs one attribute read.

Events from a worker's hot path are batched: they wait at most ``window`` seconds to be
published together, one backend call for many jobs. Producer and admin events are published
before the call returns. A failed publish is logged and never raised into a worker's loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from relaymq import events
from relaymq.backends.base import (
    Backend,
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
from relaymq.errors import BackendError
from relaymq.job import Job, JobState, NewJob
from relaymq.limits import Limits

log = logging.getLogger("relaymq.events")
recovery_log = logging.getLogger("relaymq.recovery")
observer_log = logging.getLogger("relaymq.observers")

EVENT_WINDOW = 0.05
"""Seconds worker events wait to be published together."""

_UNOBSERVED = contextlib.nullcontext()

OUTCOME_EVENT = {
    Outcome.COMPLETE: events.JOB_COMPLETED,
    Outcome.RETRY: events.JOB_RETRYING,
    Outcome.FAIL: events.JOB_FAILED,
    Outcome.EXPIRE: events.JOB_EXPIRED,
    Outcome.CANCEL: events.JOB_CANCELLED,
    Outcome.RELEASE: events.JOB_WAITING,
}


class Observer:
    """Told what the core does with jobs. Every hook here does nothing; an observer overrides
    those it needs. Hooks run on the worker's hot path: keep them cheap; they must not raise.
    """

    def call(self, op: str) -> contextlib.AbstractContextManager[object] | None:
        """A context around one backend call named ``op``; None: not interested."""
        return None

    def enqueuing(self, jobs: Sequence[NewJob]) -> Sequence[NewJob]:
        """Before ``jobs`` are stored: the jobs to store instead (tracing stamps each with its
        ``traceparent``); the very list returned is the one ``enqueued`` receives."""
        return jobs

    def enqueued(
        self, jobs: Sequence[NewJob], answers: Sequence[Enqueued] | None,
        error: BaseException | None,
    ) -> None:  # fmt: skip
        """``jobs`` were stored (``answers``), or the backend refused them (``error``)."""

    def claimed(self, jobs: Sequence[Job]) -> None:
        """A worker claimed ``jobs`` (records as the claim returned them)."""

    def attempt(self, job: Job) -> contextlib.AbstractContextManager[object] | None:
        """A context around one attempt of ``job`` (the handler runs inside, in the job's own
        task and, for a plain function, in a copy of its context); None: not interested."""
        return None

    def handler_raised(self, job: Job, error: BaseException) -> None:
        """The handler of ``job`` raised ``error`` (inside ``attempt``)."""

    def attempt_ended(self, job: Job, settle: Settle | None, ran_for: float | None) -> None:
        """The attempt decided ``settle`` (None: the claim was lost); ``ran_for``: seconds the
        handler ran (None: it never started). Called inside ``attempt``."""

    def settled(self, job: Job, settle: Settle, applied: bool) -> None:
        """The backend stored ``settle`` (``applied``), or refused it: the claim was lost."""

    def claim_lost(self, job: Job) -> None:
        """A heartbeat or the fenced start check found ``job``'s claim lost."""

    def recovered(self, queue: str, found: Recovered) -> None:
        """One stalled-recovery pass over ``queue`` did ``found``."""


class _Hooks:
    """The installed observers: a tuple replaced (never changed) on each install."""

    observers: tuple[Observer, ...] = ()
    lock = threading.Lock()


HOOKS = _Hooks()


def observe(observer: Observer) -> None:
    """Install ``observer`` in this process (again: no change)."""
    with HOOKS.lock:
        if observer not in HOOKS.observers:
            HOOKS.observers = (*HOOKS.observers, observer)


def unobserve(observer: Observer) -> None:
    """Remove ``observer`` (not installed: no change)."""
    with HOOKS.lock:
        HOOKS.observers = tuple(o for o in HOOKS.observers if o is not observer)


@contextlib.contextmanager
def _around(contexts: list[contextlib.AbstractContextManager[object]]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for c in contexts:
            stack.enter_context(c)
        yield


def around(
    make: Callable[[Observer], contextlib.AbstractContextManager[object] | None],
) -> contextlib.AbstractContextManager[object]:
    """The contexts the installed observers want around something (``make(observer)``: its
    ``call`` or ``attempt``), nested; a shared no-op when none wants one."""
    observers = HOOKS.observers
    if not observers:
        return _UNOBSERVED
    contexts = []
    for o in observers:
        try:
            if (c := make(o)) is not None:
                contexts.append(c)
        except Exception:
            observer_log.exception("observer %r failed", o)
    if not contexts:
        return _UNOBSERVED
    return contexts[0] if len(contexts) == 1 else _around(contexts)


def tell(hook: Callable[[Observer], object]) -> None:
    """Run ``hook(observer)`` for every installed observer: one that raises is logged, never
    raised into the core (a metric must not fail a job)."""
    for o in HOOKS.observers:
        try:
            hook(o)
        except Exception:
            observer_log.exception("observer %r failed", o)


def claim_lost(job: Job) -> None:
    """Tell the observers a worker found ``job``'s claim lost."""
    if HOOKS.observers:
        tell(lambda o: o.claim_lost(job))


class Instrumented:
    """A backend, instrumented. Methods keep the backend's names and return its answers."""

    def __init__(self, backend: Backend, *, window: float = EVENT_WINDOW) -> None:
        self.backend = backend
        self.window = window
        self._pending: list[events.Event] = []
        self._wanted = asyncio.Event()
        self._publisher: asyncio.Task[None] | None = None
        self._publishing = asyncio.Lock()
        """Held while events are published: the batcher is never stopped inside a publish."""

    def _call(self, op: str) -> contextlib.AbstractContextManager[object]:
        """The per-call hook: every backend call runs inside ``with self._call(op):``."""
        if not HOOKS.observers:
            return _UNOBSERVED
        return around(lambda o: o.call(op))

    # -- producer ---------------------------------------------------------------------------

    async def enqueue(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        """Store ``jobs``; announce each as waiting, delayed or deduplicated."""
        observers = HOOKS.observers
        for o in observers:
            try:
                jobs = o.enqueuing(jobs)
            except Exception:
                observer_log.exception("observer %r failed", o)
        try:
            with self._call("enqueue"):  # with the events, in one round trip where it can
                answers = await self.backend.enqueue_announced(jobs, time.time())
        except BaseException as e:
            refused = e
            if observers:
                tell(lambda o: o.enqueued(jobs, None, refused))
            raise
        if observers:
            tell(lambda o: o.enqueued(jobs, answers, None))
        return answers

    # -- worker -----------------------------------------------------------------------------

    async def claim(self, queues: Sequence[str], worker_id: str, limit: int) -> ClaimBatch:
        with self._call("claim"):
            batch = await self.backend.claim(queues, worker_id, limit)
        self._claimed(batch, worker_id)
        return batch

    def _claimed(self, batch: ClaimBatch, worker_id: str) -> None:
        if batch.jobs:
            if HOOKS.observers:
                tell(lambda o: o.claimed(batch.jobs))
            now = time.time()
            self._report(
                events.Event(events.JOB_ACTIVE, j.queue, now, j.id,
                             {"attempt": j.attempts, "worker": worker_id})
                for j in batch.jobs
            )  # fmt: skip

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
        self, outcomes: Sequence[tuple[Job, Settle]], queues: Sequence[str], worker_id: str,
        limit: int,
    ) -> SettledClaimed:  # fmt: skip
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
        if HOOKS.observers:
            for (job, s), ok in zip(outcomes, applied, strict=True):
                tell(lambda o: o.settled(job, s, ok))  # noqa: B023 - called at once
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
        claim_lost(job)
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
        self._report([events.Event(events.JOB_PROGRESS, queue, time.time(), job_id,
                                   {"progress": value})])  # fmt: skip

    # -- maintenance ------------------------------------------------------------------------

    async def recover_stalled(self, queue: str, threshold: float, max_stalled: int) -> Recovered:
        """One recovery pass over ``queue``; every job it moved is logged and announced."""
        with self._call("recover_stalled"):
            found = await self.backend.recover_stalled(queue, threshold, max_stalled)
        if HOOKS.observers:
            tell(lambda o: o.recovered(queue, found))
        for job_id in found.requeued:
            recovery_log.warning("job %s/%s stalled; back to waiting", queue, job_id)
        for job_id in found.failed:
            recovery_log.error("job %s/%s stalled more than max_stalled times; failed",
                               queue, job_id)  # fmt: skip
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

    async def lock(self, name: str, owner: str, ttl: float) -> bool:
        with self._call("lock"):
            return await self.backend.lock(name, owner, ttl)

    async def unlock(self, name: str, owner: str) -> None:
        with self._call("unlock"):
            await self.backend.unlock(name, owner)

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
        [job] = await self.backend.get_jobs(queue, [job_id])
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
        self, name: str, queue: str, ids: Sequence[str], done: Sequence[bool],
        data: dict[str, Any],
    ) -> None:  # fmt: skip
        now = time.time()
        await self._announce([events.Event(name, queue, now, job_id, dict(data))
                              for job_id, ok in zip(ids, done, strict=True) if ok])  # fmt: skip

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
        with self._call("register_worker"):
            await self.backend.register_worker(info, ttl)
        if online:
            await self._announce([self._worker_event(events.WORKER_ONLINE, info)])

    async def unregister_worker(self, info: WorkerInfo) -> None:
        with self._call("unregister_worker"):
            await self.backend.unregister_worker(info.id)
        await self._announce([self._worker_event(events.WORKER_OFFLINE, info)])

    # -- history ----------------------------------------------------------------------------

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

    # -- reporting --------------------------------------------------------------------------

    async def _announce_one(
        self, name: str, queue: str, job_id: str | None = None, data: dict[str, Any] | None = None
    ) -> None:
        await self._announce([events.Event(name, queue, time.time(), job_id, data or {})])

    async def _announce(self, announced: Sequence[events.Event]) -> None:
        """Producer and admin actions: published before the call returns."""
        with self._call("publish"):
            await events.publish(self.backend, announced)

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
                with self._call("publish"):
                    await events.publish(self.backend, pending)
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
