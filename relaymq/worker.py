"""Worker: claims jobs, runs their handlers and settles their outcomes, in batches.

Four loops share one process:

- the claim loop takes as many jobs as there are free slots in one call, or waits;
- each claimed job runs in its own asyncio task (plain functions in the thread pool);
- the flush loop settles every finished job's outcome in one batched, fenced call;
- the events loop publishes what happened in batches, at most every ``EVENT_WINDOW``;
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
EVENT_WINDOW = 0.05
"""Seconds events wait to be published together."""
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


_OUTCOME_COUNTER = {
    Outcome.COMPLETE: "completed", Outcome.RETRY: "retried", Outcome.FAIL: "failed",
    Outcome.EXPIRE: "expired", Outcome.CANCEL: "cancelled", Outcome.RELEASE: "released",
}  # fmt: skip
"""The ``WorkerStats`` field each outcome counts in."""


@dataclass(eq=False, slots=True)
class _Running:
    job: Job
    claim: Claim
    claimed_mono: float
    ctx: JobContext | None = None
    """Made only for handlers that take one."""
    task: asyncio.Task[None] | None = None
    stop_reason: str | None = None
    """Why the handler was cancelled: "lost", "cancelled" or "shutdown"."""
    progress: bytes | None = None
    settling: bool = False
    """The outcome is written or being written: heartbeats leave the claim alone."""


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
        self._hurry = asyncio.Event()
        self._running: dict[tuple[str, str], _Running] = {}
        """Jobs whose handler has not finished; each takes a slot."""
        self._held: dict[tuple[str, str], _Running] = {}
        """Every claim not yet settled (running or waiting for the flush); heartbeated."""
        self._slot_free = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._outbox: list[tuple[_Running, Settle]] = []
        self._events: list[events.Event] = []
        self._events_pending = asyncio.Event()
        self._flush_wanted = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._rotation = 0
        self._maintenance = Maintenance(backend, self.queues, self.settings, self.id)

    # -- lifecycle --------------------------------------------------------------------------

    def stop(self, *, now: bool = False) -> None:
        """Ask the worker to stop: no new claims; running jobs get ``shutdown_timeout``
        (``now=True``: none), then the unfinished ones are released to run again at once."""
        self._stopping.set()
        self._slot_free.set()
        if now:
            self._hurry.set()

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
            asyncio.create_task(self._publish_loop(), name="relaymq-events"),
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
            finished = asyncio.ensure_future(asyncio.wait(tasks))
            hurry = asyncio.ensure_future(self._hurry.wait())
            await asyncio.wait({finished, hurry}, timeout=self.settings.shutdown_timeout,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            finished.cancel()
            hurry.cancel()
            pending = {t for t in tasks if not t.done()}
            for r in list(self._running.values()):
                if r.task in pending:
                    r.stop_reason = "shutdown"
                    r.task.cancel()
            if pending:
                await asyncio.wait(pending)
        async with self._flush_lock:  # never cancel the flush loop in the middle of a settle
            for helper in helpers:
                helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        try:
            await self._flush()  # every outcome, including the releases
        except BackendError as e:
            log.error("could not settle %d outcomes at shutdown (%s): they will be recovered "
                      "as stalled jobs", len(self._outbox), e)  # fmt: skip
        await self._publish_events()
        with contextlib.suppress(BackendError):
            await self._maintenance.release_locks()
            await self.backend.unregister_worker(self.id)
            await events.publish(self.backend, [self._worker_event(events.WORKER_OFFLINE)])
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
        r = _Running(job, job.claim, time.monotonic())
        self._running[job.queue, job.id] = self._held[job.queue, job.id] = r
        self._idle.clear()
        self._emit(self._event(events.JOB_ACTIVE, job.queue, job.id,
                               {"attempt": job.attempts, "worker": self.id}))  # fmt: skip
        r.task = asyncio.create_task(self._execute(r, now))

    def _context(self, r: _Running) -> JobContext:
        job = r.job

        def report(value: Any) -> None:
            self._report_progress((job.queue, job.id), value)

        r.ctx = JobContext(job.id, job.queue, job.task, job.attempts, report)
        r.ctx._cancelled = r.stop_reason is not None
        return r.ctx

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
            r.settling = True
            self._outbox.append((r, settle))
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
        fresh = time.monotonic() - r.claimed_mono < self.settings.heartbeat_interval
        if r.stop_reason is not None or not (fresh or await self._still_held(r)):
            return self._after_cancel(r)
        if t.takes_context:
            args.insert(0, self._context(r))
        try:
            if job.timeout is None and t.is_async:
                value = await t.fn(*args, **kwargs)  # the common case, without a wrapper
            else:
                async with asyncio.timeout(job.timeout):
                    value = await invoke(t, args, kwargs)
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
        """A fenced start for a claim old enough to have been recovered meanwhile (RELIABILITY
        F12); younger claims are checked against what the last heartbeat said."""
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
        if r.ctx is not None:
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
        loop.call_soon_threadsafe(self._emit, event)

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
            except Exception:  # a bug must not stop settling: log it and try again
                log.exception("settle failed; retrying")
                await asyncio.sleep(0.5)
                self._flush_wanted.set()

    async def _flush(self) -> None:
        """Settle every pending outcome in one call."""
        async with self._flush_lock:
            await self._settle_outbox()

    async def _settle_outbox(self) -> None:
        batch, self._outbox = self._outbox, []
        if batch:
            try:
                applied = await self.backend.settle([s for _, s in batch])
            except BaseException:
                self._outbox[:0] = batch  # keep them for the next try
                raise
            for (r, s), ok in zip(batch, applied, strict=True):
                self._held.pop((r.job.queue, r.job.id), None)
                self._record(r, s, ok)

    # -- events -----------------------------------------------------------------------------

    def _emit(self, event: events.Event) -> None:
        self._events.append(event)
        self._events_pending.set()

    async def _publish_loop(self) -> None:
        """Publish events at once when idle, and under load at most once per ``EVENT_WINDOW``:
        one backend call for many jobs' events rather than one per flush."""
        last = 0.0
        while True:
            await self._events_pending.wait()
            pause = last + EVENT_WINDOW - time.monotonic()
            if pause > 0:  # published a moment ago: let more events join this batch
                await asyncio.sleep(pause)
            self._events_pending.clear()
            last = time.monotonic()
            await self._publish_events()

    async def _publish_events(self) -> None:
        pending, self._events = self._events, []
        if pending:
            try:
                await events.publish(self.backend, pending)
            except BackendError as e:
                log.warning("could not publish %d events: %s", len(pending), e)

    def _record(self, r: _Running, s: Settle, applied: bool) -> None:
        job = r.job
        data: dict[str, Any] = {"attempt": job.attempts}
        if not applied:
            self.stats.lost += 1
            log.warning("claim on %s/%s (token %s) was lost; outcome %s dropped",
                        job.queue, job.id, r.claim.token, s.outcome.value)  # fmt: skip
            self._emit(self._event(events.JOB_CLAIM_LOST, job.queue, job.id, data))
            return
        counter = _OUTCOME_COUNTER[s.outcome]
        setattr(self.stats, counter, getattr(self.stats, counter) + 1)
        if s.error:
            data = {**data, "error": s.error[:500]}
            if s.outcome is Outcome.RETRY:
                data["delay"] = s.delay
        self._emit(self._event(_OUTCOME_EVENT[s.outcome], job.queue, job.id, data))

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
            except Exception:  # a bug must not stop the heartbeats of every other job
                log.exception("heartbeat failed")

    async def _beat(self) -> None:
        held = [r for r in self._held.values() if not r.settling]
        if not held:
            return
        beats = [Beat(r.claim, r.progress) for r in held]
        for r in held:
            r.progress = None
        results = await self.backend.heartbeat(beats)
        for r, result in zip(held, results, strict=True):
            if result.held or r.settling:  # settled meanwhile: its own write says how it went
                continue
            r.stop_reason = "cancelled" if result.cancel_requested else "lost"
            if r.ctx is not None:
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
