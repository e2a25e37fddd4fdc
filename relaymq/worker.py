"""Worker: claims jobs, runs their handlers and settles their outcomes, in batches.

Four loops share one process:

- the claim loop takes as many jobs as there are free slots in one call, or waits;
- each claimed job runs in its own asyncio task (plain functions in the thread pool);
- the flush loop settles every finished job's outcome in one batched, fenced call and then
  publishes the batch's events;
- the heartbeat loop renews every held claim in one batched call on its own timer, and stops
  handlers whose claim was lost or whose job was cancelled.

Stalled recovery runs beside them (``recovery.Maintenance``), elected per queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import traceback
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from relaymq import events
from relaymq.backends.base import Backend, Beat, Outcome, Settle, WorkerInfo
from relaymq.errors import BackendError, SerializationError, TaskNotFoundError
from relaymq.job import Claim, Job
from relaymq.recovery import Maintenance
from relaymq.retry import next_delay
from relaymq.serializers import DEFAULT_SERIALIZER, Serializer
from relaymq.settings import Settings
from relaymq.task import JobContext, Task, invoke, resolve

log = logging.getLogger("relaymq.worker")

MAX_ERROR_CHARS = 4000
IDLE_WAIT = 1.0
"""Longest single ``backend.wait``; blocking backends are woken earlier by new work."""

_OUTCOME_EVENT = {
    Outcome.COMPLETE: events.JOB_COMPLETED,
    Outcome.RETRY: events.JOB_RETRYING,
    Outcome.FAIL: events.JOB_FAILED,
    Outcome.EXPIRE: events.JOB_EXPIRED,
    Outcome.CANCEL: events.JOB_CANCELLED,
    Outcome.RELEASE: events.JOB_WAITING,
}


@dataclass(eq=False)
class _Running:
    job: Job
    claim: Claim
    ctx: JobContext
    claimed_mono: float
    task: asyncio.Task[None] | None = None
    stop_reason: str | None = None
    """Why the handler was cancelled: "lost", "cancelled" or "shutdown"."""
    progress: bytes | None = None


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


class Worker:
    """Runs jobs from ``queues`` with up to ``settings.concurrency`` at once."""

    def __init__(
        self,
        backend: Backend,
        queues: Sequence[str],
        *,
        settings: Settings | None = None,
        concurrency: int | None = None,
        serializer: Serializer = DEFAULT_SERIALIZER,
        worker_id: str | None = None,
    ) -> None:
        if not queues:
            raise ValueError("a worker needs at least one queue")
        base = settings or Settings.from_env()
        self.settings = base.replace(concurrency=concurrency) if concurrency else base
        self.backend = backend
        self.queues = list(dict.fromkeys(queues))
        self.serializer = serializer
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.stats = WorkerStats()
        self.started = asyncio.Event()
        """Set once the worker is registered and claiming."""
        self._stopping = asyncio.Event()
        self._running: dict[tuple[str, str], _Running] = {}
        """Jobs whose handler has not finished; each takes a slot."""
        self._held: dict[tuple[str, str], _Running] = {}
        """Every claim not yet settled (running or waiting for the flush); heartbeated."""
        self._slot_free = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._outbox: list[tuple[_Running, Settle, dict[str, Any]]] = []
        self._events: list[events.Event] = []
        self._flush_wanted = asyncio.Event()
        self._rotation = 0
        self._maintenance = Maintenance(backend, self.queues, self.settings, self.id)

    # -- lifecycle --------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the worker to stop: no new claims; running jobs get ``shutdown_timeout``."""
        self._stopping.set()
        self._slot_free.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def wait_idle(self) -> None:
        """Return once no handler is running (claims may still be settling)."""
        await self._idle.wait()

    async def run(self) -> None:
        """Work until ``stop()``; then finish or release running jobs and settle everything."""
        info = WorkerInfo(
            self.id, tuple(self.queues), self.settings.concurrency, socket.gethostname(),
            os.getpid(), time.time(),
        )  # fmt: skip
        await self.backend.register_worker(info, ttl=self._registry_ttl)
        await events.publish(self.backend, [self._worker_event(events.WORKER_ONLINE)])
        helpers = [
            asyncio.create_task(self._flush_loop(), name="relaymq-flush"),
            asyncio.create_task(self._heartbeat_loop(info), name="relaymq-heartbeat"),
        ]
        if self.settings.enable_stalled_check:
            helpers.append(asyncio.create_task(self._maintenance.run(), name="relaymq-recovery"))
        self.started.set()
        log.info("worker %s started on %s", self.id, ", ".join(self.queues))
        try:
            await self._claim_loop()
        finally:
            self._stopping.set()
            await self._shutdown(helpers)

    async def _shutdown(self, helpers: list[asyncio.Task[None]]) -> None:
        tasks = [r.task for r in self._running.values() if r.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.settings.shutdown_timeout)
            for r in list(self._running.values()):
                if r.task in pending:
                    r.stop_reason = "shutdown"
                    r.task.cancel()
            if pending:
                await asyncio.wait(pending)
        for helper in helpers:
            helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        await self._flush()  # every outcome, including the releases
        with contextlib.suppress(BackendError):
            await self._maintenance.release_locks()
            await self.backend.unregister_worker(self.id)
            await events.publish(self.backend, [self._event(events.WORKER_OFFLINE, self.queues[0])])
        log.info("worker %s stopped", self.id)

    @property
    def _registry_ttl(self) -> float:
        return self.settings.heartbeat_interval * 3

    # -- claiming ---------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            free = self.settings.concurrency - len(self._running)
            if free <= 0:
                self._slot_free.clear()
                await self._slot_free.wait()
                await asyncio.sleep(0)  # let jobs finishing in the same tick free their slots
                continue
            try:
                batch = await self.backend.claim(self._queue_order(), self.id, free)
            except BackendError as e:
                failures += 1
                log.warning("claim failed (%s); retrying", e)
                await self._until(asyncio.sleep(min(5.0, 0.1 * 2**failures)))
                continue
            failures = 0
            if not batch.jobs:
                try:
                    await self._until(self.backend.wait(self.queues, IDLE_WAIT))
                except BackendError as e:
                    log.warning("wait failed (%s)", e)
                    await self._until(asyncio.sleep(1.0))
                continue
            self.stats.claimed += len(batch.jobs)
            for job in batch.jobs:
                self._start(job, batch.now)
            self._flush_wanted.set()  # publish the job:active events soon

    def _queue_order(self) -> list[str]:
        """Rotate the queue order on every claim so no queue starves the others."""
        if len(self.queues) == 1:
            return self.queues
        self._rotation = (self._rotation + 1) % len(self.queues)
        return self.queues[self._rotation :] + self.queues[: self._rotation]

    async def _until(self, awaitable: Any) -> None:
        """Await ``awaitable`` unless the worker is asked to stop first."""
        inner = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({inner, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not inner.done():
                inner.cancel()
        if inner.done() and not inner.cancelled():
            inner.result()  # re-raise what the awaitable raised

    def _start(self, job: Job, now: float) -> None:
        key = (job.queue, job.id)

        def report(value: Any) -> None:
            self._report_progress(key, value)

        ctx = JobContext(job.id, job.queue, job.task, job.attempts, report)
        r = _Running(job, job.claim, ctx, time.monotonic())
        self._running[key] = self._held[key] = r
        self._idle.clear()
        self._events.append(self._event(events.JOB_ACTIVE, job.queue, job.id,
                                        {"attempt": job.attempts, "worker": self.id}))  # fmt: skip
        r.task = asyncio.create_task(self._execute(r, now), name=f"relaymq-job-{job.id}")

    # -- running one job --------------------------------------------------------------------

    async def _execute(self, r: _Running, now: float) -> None:
        job = r.job
        try:
            settle = await self._attempt(r, now)
        except asyncio.CancelledError:
            settle = self._after_cancel(r)
        finally:
            self._running.pop((job.queue, job.id), None)
            self._slot_free.set()
            if not self._running:
                self._idle.set()
        if settle is None:
            self._held.pop((job.queue, job.id), None)
        else:
            self._outbox.append((r, settle, {"attempt": job.attempts}))
            self._flush_wanted.set()

    async def _attempt(self, r: _Running, now: float) -> Settle | None:
        job, claim = r.job, r.claim
        if job.expired_at(now):
            error = f"expired: ttl of {job.ttl}s passed before the job started"
            return Settle(claim, Outcome.EXPIRE, error=error)
        if r.stop_reason is not None:
            return self._after_cancel(r)
        try:
            t = resolve(job.task)
        except TaskNotFoundError as e:
            return Settle(claim, Outcome.FAIL, error=str(e))
        try:
            data = self.serializer.loads(job.payload)
            args, kwargs = list(data["args"]), dict(data["kwargs"])
        except (SerializationError, KeyError, TypeError, ValueError) as e:
            return Settle(claim, Outcome.FAIL, error=f"cannot decode the job's payload: {e}")
        if not await self._still_held(r):
            return self._after_cancel(r)
        try:
            if job.timeout is None:
                value = await invoke(t, r.ctx, args, kwargs)
            else:
                async with asyncio.timeout(job.timeout):
                    value = await invoke(t, r.ctx, args, kwargs)
        except TimeoutError:
            return self._failure(r, t, f"TimeoutError: timed out after {job.timeout}s")
        except asyncio.CancelledError:
            raise
        except Exception as e:
            return self._failure(r, t, _describe(e))
        try:
            result = self.serializer.dumps(value)
        except SerializationError as e:
            return Settle(claim, Outcome.FAIL, error=f"the result cannot be serialized: {e}")
        return Settle(claim, Outcome.COMPLETE, result=result)

    async def _still_held(self, r: _Running) -> bool:
        """The check immediately before the handler: local flags, and a fenced start when the
        claim is old enough that it may have been recovered meanwhile (RELIABILITY F12)."""
        if r.stop_reason is not None:
            return False
        if time.monotonic() - r.claimed_mono < self.settings.heartbeat_interval:
            return True
        [beat] = await self.backend.heartbeat([Beat(r.claim)])
        if not beat.held:
            r.stop_reason = "cancelled" if beat.cancel_requested else "lost"
        return beat.held

    def _failure(self, r: _Running, t: Task[Any, Any], error: str) -> Settle:
        """The core's retry decision: retry with backoff while attempts remain, else fail."""
        job = r.job
        if job.attempts < job.max_attempts:
            delay = next_delay(t.options.backoff, job.attempts)
            return Settle(r.claim, Outcome.RETRY, error=error, delay=delay)
        return Settle(r.claim, Outcome.FAIL, error=error)

    def _after_cancel(self, r: _Running) -> Settle | None:
        r.ctx._cancelled = True
        if r.stop_reason == "shutdown":
            return Settle(r.claim, Outcome.RELEASE)
        if r.stop_reason == "cancelled":
            return Settle(r.claim, Outcome.CANCEL, error="cancelled by request")
        return None  # the claim is lost: another worker owns the job now; write nothing

    def _report_progress(self, key: tuple[str, str], value: Any) -> None:
        r = self._held.get(key)
        if r is None:
            return
        encoded = self.serializer.dumps(value)
        r.progress = encoded
        event = self._event(events.JOB_PROGRESS, r.job.queue, r.job.id, {"progress": value})
        loop = r.task.get_loop() if r.task is not None else asyncio.get_running_loop()
        loop.call_soon_threadsafe(self._events.append, event)

    # -- settling ---------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted.clear()
            await asyncio.sleep(0)  # let outcomes finishing in the same tick join the batch
            try:
                await self._flush()
            except BackendError as e:
                log.warning("settle failed (%s); retrying", e)
                await asyncio.sleep(0.5)
                self._flush_wanted.set()

    async def _flush(self) -> None:
        """Settle every pending outcome in one call, then publish the batch's events."""
        batch, self._outbox = self._outbox, []
        if batch:
            try:
                applied = await self.backend.settle([s for _, s, _ in batch])
            except BaseException:
                self._outbox[:0] = batch  # keep them for the next try
                raise
            for (r, s, data), ok in zip(batch, applied, strict=True):
                self._held.pop((r.job.queue, r.job.id), None)
                self._record(r, s, data, ok)
        pending, self._events = self._events, []
        if pending:
            try:
                await events.publish(self.backend, pending)
            except BackendError as e:
                log.warning("could not publish %d events: %s", len(pending), e)

    def _record(self, r: _Running, s: Settle, data: dict[str, Any], applied: bool) -> None:
        job = r.job
        if not applied:
            self.stats.lost += 1
            log.warning("claim on %s/%s (token %s) was lost; outcome %s dropped",
                        job.queue, job.id, r.claim.token, s.outcome.value)  # fmt: skip
            self._events.append(self._event(events.JOB_CLAIM_LOST, job.queue, job.id, data))
            return
        counter = {
            Outcome.COMPLETE: "completed", Outcome.RETRY: "retried", Outcome.FAIL: "failed",
            Outcome.EXPIRE: "expired", Outcome.CANCEL: "cancelled", Outcome.RELEASE: "released",
        }[s.outcome]  # fmt: skip
        setattr(self.stats, counter, getattr(self.stats, counter) + 1)
        if s.error:
            data = {**data, "error": s.error[:500]}
            if s.outcome is Outcome.RETRY:
                data["delay"] = s.delay
        self._events.append(self._event(_OUTCOME_EVENT[s.outcome], job.queue, job.id, data))

    # -- heartbeats -------------------------------------------------------------------------

    async def _heartbeat_loop(self, info: WorkerInfo) -> None:
        interval = self.settings.heartbeat_interval
        while True:
            await asyncio.sleep(interval)
            try:
                await self._beat()
                await self.backend.register_worker(info, ttl=self._registry_ttl)
            except BackendError as e:
                log.warning("heartbeat failed (%s)", e)

    async def _beat(self) -> None:
        held = list(self._held.values())
        if not held:
            return
        beats = [Beat(r.claim, r.progress) for r in held]
        for r in held:
            r.progress = None
        results = await self.backend.heartbeat(beats)
        for r, result in zip(held, results, strict=True):
            if result.held:
                continue
            r.stop_reason = "cancelled" if result.cancel_requested else "lost"
            r.ctx._cancelled = True
            if r.stop_reason == "lost":
                log.warning("lost the claim on %s/%s; stopping its handler", r.job.queue, r.job.id)
            if r.task is not None and not r.task.done():
                r.task.cancel()

    # -- helpers ----------------------------------------------------------------------------

    def _worker_event(self, name: str) -> events.Event:
        return self._event(name, self.queues[0], None, {"worker": self.id, "queues": self.queues})

    def _event(
        self, name: str, queue: str, job_id: str | None = None, data: dict[str, Any] | None = None
    ) -> events.Event:
        return events.Event(name, queue, time.time(), job_id, data or {})


def _describe(e: BaseException) -> str:
    """The stored error: type, message and a trimmed traceback; never fails itself."""
    try:
        text = "".join(traceback.format_exception(e))
    except Exception:
        text = f"{type(e).__name__}: <unprintable exception>"
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS // 4] + "\n...\n" + text[-MAX_ERROR_CHARS // 2 :]
    return text
