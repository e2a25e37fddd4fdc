"""Worker: claims jobs, runs their handlers and settles their outcomes, in batches.

The pieces, each in its own module:

- this one: the lifecycle (start, stop, shutdown) and the claim loop, which takes as many jobs
  as there are free slots in one call, or waits;
- ``running``: one ``RunningJob`` per claim, and ``Claims``, the rule linking slots and claims;
- ``execution``: one attempt of one job, ending in the ``Settle`` to write (or nothing);
- ``settling``: the ``Settler``, which writes every finished job's outcome in one batched,
  fenced call and makes the claim loop's claims (``Settler.claim``): with a settle, in the same
  round trip, while the queues run dry; beside the settles under a backlog; always after a
  settle that puts a job back in line, so that job competes in the next claim;
- ``bookkeeping``: what is noted once the backend answered (``WorkerStats``, history, logs);
- ``heartbeats``: one batched renewal of every held claim on its own timer, stopping handlers
  whose claim was lost or whose job was cancelled.

Events go out through ``Instrumented`` (batched); stalled recovery runs beside the loops
(``recovery.Maintenance``), elected per queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from relaymq.app import App, default_app
from relaymq.backends.base import Backend
from relaymq.errors import BackendError, ConfigError
from relaymq.job import Job
from relaymq.options import validate_queue_name
from relaymq.outbox import Relay
from relaymq.records.store import ClaimBatch, WorkerInfo
from relaymq.recovery import Maintenance
from relaymq.schedules import Scheduler
from relaymq.serializers import DEFAULT_SERIALIZER, Serializer
from relaymq.settings import Settings
from relaymq.worker.bookkeeping import Bookkeeping
from relaymq.worker.execution import Execution
from relaymq.worker.heartbeats import Heartbeats
from relaymq.worker.history import History
from relaymq.worker.loopwatch import LoopWatch
from relaymq.worker.memory import MemoryTrim, trimmer
from relaymq.worker.refusals import Refusals
from relaymq.worker.running import Claims, RunningJob, StopReason
from relaymq.worker.sandbox import Sandbox
from relaymq.worker.settling import Settler
from relaymq.worker.startup import describe, patiently
from relaymq.worker.stats import Counts, WorkerStats
from relaymq.worker.threads import ThreadPool

log = logging.getLogger("relaymq.worker")

IDLE_WAIT = 1.0
"""Longest single ``backend.wait``; blocking backends are woken earlier by new work."""

PAUSE_CHECK_INTERVAL = 5.0
"""Seconds between asking whether idle queues are paused (to log it once, and its end)."""

LIMIT_POLL = 0.25
"""Seconds between claims of a queue whose ``max_active`` jobs are all active."""


class Worker:
    """Runs jobs from ``queues`` with the tasks of ``app`` (connected; given a backend: the
    default app's), up to ``settings.concurrency`` at once (default: the app's settings)."""

    def __init__(
        self,
        app: App | Backend,
        queues: Sequence[str],
        *,
        settings: Settings | None = None,
        concurrency: int | None = None,
        serializer: Serializer = DEFAULT_SERIALIZER,
        worker_id: str | None = None,
    ) -> None:
        if isinstance(queues, str):  # one name, not a list of its letters
            raise ConfigError(f"queues must be a list of queue names, not the str {queues!r}")
        if not queues:
            raise ConfigError("a worker needs at least one queue")
        for name in queues:  # before any backend sees it
            validate_queue_name(name)
        self.app = app if isinstance(app, App) else default_app().over(app)
        base = settings or self.app.settings
        self.settings = base.replace(concurrency=concurrency) if concurrency else base
        self.ops = self.app.ops.sibling()  # the app's facade, with an event batch of its own
        self.backend = backend = self.ops.backend
        self.queues = list(dict.fromkeys(queues))
        self.serializer = serializer
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._counts = Counts(self.id)
        self.stats: WorkerStats = self._counts.stats
        self.started = asyncio.Event()
        """Set once the worker is registered and claiming."""
        self.info = dataclasses.replace(
            WorkerInfo.for_this_process(self.id, self.queues, self.settings.concurrency),
            beat=self._registry_ttl,
        )
        self._stopping = asyncio.Event()
        self._hurry = asyncio.Event()
        self._claims = Claims()
        self._pool = ThreadPool(self.settings.concurrency)
        """Plain handlers' threads, one per slot (asyncio's default pool stops at CPU + 4)."""
        self._paused: set[str] = set()
        self._next_pause_check = 0.0
        self.refusals = Refusals(backend, self.queues)
        """The queues the backend refuses as configured: not claimed from until it accepts
        them again (``relaymq.worker.refusals``)."""
        self._history = History(self.ops, self.settings.history_flush_interval)
        books = Bookkeeping(self._counts, self._history)
        coalesce = backend.capabilities.settle_claims
        self._settler = Settler(
            self.ops, self._claims, books, coalesce=coalesce, keep=self.settings.attempt_history
        )
        """Writes outcomes and makes claims: the claim loop's only way to jobs."""
        # a round gets half the threshold (or an interval) to answer, leaving time for a
        # second try on a fresh call before the claims could be taken for stalled
        beat_deadline = max(self.settings.heartbeat_interval, self.settings.stalled_threshold / 2)
        self._heartbeats = Heartbeats(
            self.ops,
            self._claims,
            self.settings.heartbeat_interval,
            self._renew_registration,
            beat_deadline,
        )
        self._sandbox = Sandbox(self.settings.concurrency)
        """Child processes for sandboxed tasks, started on first need."""
        self._execution = Execution(
            serializer,
            self._heartbeats.check,
            self._report_progress,
            pool=self._pool,
            sandbox=self._sandbox,
            get_jobs=self.ops.get_jobs,
            max_result_bytes=self.settings.max_result_bytes,
            tasks=self.app.tasks,
            import_prefixes=self.settings.import_prefixes,
            hooks=self.app.hooks,
            ops=self.ops,
            attempt_history=self.settings.attempt_history,
        )
        self._rotation = 0
        self._watch = (
            LoopWatch(
                backend,
                self._claims,
                self.info,
                interval=self.settings.heartbeat_interval,
                max_blocked=self.settings.max_blocked,
                tasks=self.app.tasks,
                registry_ttl=self._registry_ttl,
                unblocked=self._unblocked,
            )
            if self.settings.max_blocked > 0
            else None
        )
        trim = trimmer() if self.settings.memory_trim_interval > 0 else None
        self._memory = (
            MemoryTrim(
                self.settings.memory_trim_interval,
                trim,
                lambda: self._counts.add("memory_trims"),
            )
            if trim
            else None
        )
        """Gives the memory Python freed back to the system (glibc only)."""
        self._maintenance = Maintenance(
            self.ops,
            self.queues,
            self.settings,
            self.id,
            hold_off=self._watch.recently_blocked if self._watch else None,
        )

    # -- lifecycle --------------------------------------------------------------------------

    def stop(self, *, now: bool = False) -> None:
        """Ask the worker to stop: no new claims; running jobs get ``shutdown_timeout``
        (``now=True``: none), then the unfinished ones are released to run again at once.

        A plain handler still running in a thread cannot be stopped, so it is never released
        while it runs: it is told (``JobContext.cancelled``) and the worker waits for it,
        renewing its claim, and settles what it did. ``stop(now=True)`` (again) ends that wait:
        the worker returns and leaves the thread running with its claim unreleased and no
        longer renewed, so the job is recovered as stalled after ``stalled_threshold``; its
        threads are daemons and do not keep the process alive."""
        self._stopping.set()
        self._settler.close()
        self._claims.slot_free.set()
        if now:
            self._hurry.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def wait_idle(self) -> None:
        """Return once no handler is running (claims may still be settling)."""
        await self._claims.idle.wait()

    async def until(
        self, condition: Callable[[WorkerStats], bool], what: str, within: float = 10.0
    ) -> None:
        """Return once ``condition(self.stats)`` holds: a signal for tests and tools, which
        await what the worker did (claimed, settled, found nothing) instead of sleeping."""
        await self._counts.until(condition, what, within)

    async def run(self) -> None:
        """Work until ``stop()``; then finish or release running jobs and settle everything.

        At start, a backend that cannot be reached is waited for (``connect_timeout``), and
        every queue is checked: one the backend refuses as configured raises ``ConfigError``
        at once (the CLI exits 2). A queue refused later is set aside (``refusals``); when no
        queue is left, the worker stops and ``run`` raises that ``ConfigError``."""
        where = describe(self.backend.url)
        await patiently(self._start_up, where, self.settings.connect_timeout)
        async with self.ops.batching():
            helpers = [
                asyncio.create_task(self._settler.run(), name="relaymq-settle"),
                asyncio.create_task(self._heartbeats.run(), name="relaymq-heartbeat"),
            ]
            if self.settings.enable_stalled_check:
                helpers.append(
                    asyncio.create_task(self._maintenance.run(), name="relaymq-recovery")
                )
            if self._watch is not None:
                helpers.append(asyncio.create_task(self._watch.run(), name="relaymq-loopwatch"))
            if self.settings.history_flush_interval > 0:
                helpers.append(asyncio.create_task(self._history.run(), name="relaymq-history"))
            if self._memory is not None:
                helpers.append(asyncio.create_task(self._memory.run(), name="relaymq-memory"))
            if self.app.outbox_url is not None:  # one worker at a time leads it
                relay = Relay(self.app, self.ops, self.id, self.settings).run()
                helpers.append(asyncio.create_task(relay, name="relaymq-outbox"))
            if self.settings.enable_scheduler:
                helpers.append(asyncio.create_task(self._schedule(), name="relaymq-scheduler"))
            with contextlib.suppress(BackendError):  # only a log line: tried again when idle
                await self._check_paused(self.queues)
            self.started.set()
            log.info(
                "worker %s started on %s (event loop: %s)",
                self.id,
                ", ".join(self.queues),
                type(asyncio.get_running_loop()).__module__.split(".")[0],
            )
            try:
                await self._claim_loop()
            finally:
                self._stopping.set()
                self._settler.close()
                await self._shutdown(helpers)
        with contextlib.suppress(BackendError):
            await self._maintenance.release_locks()
            await self.ops.unregister_worker(self.info)
        log.info("worker %s stopped", self.id)
        if self.refusals.all_refused:
            raise self.refusals.error()

    async def _start_up(self) -> None:
        """Check every queue (a refusal goes up), register, store the code's limits."""
        for queue in self.queues:
            await self.backend.check_queue(queue)
        await self.ops.register_worker(self.info, self._registry_ttl, online=True)
        for queue in self.queues:  # the limits defined in code (relaymq.limit) hold from now
            if queue in self.app.limits:
                await self.ops.set_limits(queue, self.app.limits[queue])

    async def _shutdown(self, helpers: list[asyncio.Task[None]]) -> None:
        """Give running jobs ``shutdown_timeout`` (less when hurried), stop the rest, wait for
        handlers still running in threads (unless hurried), then settle every outcome, the
        releases included."""
        tasks = [r.task for r in self._claims.running_jobs() if r.task is not None]
        if tasks:
            await self._until(
                asyncio.wait(tasks), also=self._hurry, timeout=self.settings.shutdown_timeout
            )
            for r in self._claims.running_jobs():
                r.stop(StopReason.SHUTDOWN)  # cancels async handlers; threads are only told
            running = self._claims.running_jobs()
            cancelled = [r.task for r in running if not r.in_thread and r.task is not None]
            if cancelled:  # async handlers end at once: their jobs are released
                await asyncio.wait(cancelled)
            threads = [r.task for r in running if r.in_thread and r.task is not None]
            if threads and not self._hurry.is_set():
                log.warning(
                    "waiting for %d plain handlers still running in threads; their "
                    "jobs stay claimed until they return (stop again to exit now and "
                    "leave them to stalled recovery)",
                    len(threads),
                )
                await self._until(asyncio.wait(threads), also=self._hurry)
            for r in self._claims.running_jobs():
                self._abandon(r)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._sandbox.close()
        async with self._settler.lock:  # never cancel the settle loop in the middle of a settle
            for helper in helpers:
                helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        try:
            await self._settler.flush()
        except BackendError as e:
            log.error(
                "could not settle %d outcomes at shutdown (%s): they will be recovered "
                "as stalled jobs",
                len(self._settler),
                e,
            )
        try:
            await self._history.flush()
        except BackendError as e:
            log.warning("could not write the last history counts at shutdown (%s)", e)

    def _abandon(self, r: RunningJob) -> None:
        """Exit without a handler whose thread still runs: its claim is neither released (it
        would run twice at once) nor renewed any more, so it is recovered as stalled."""
        log.warning(
            "job %s/%s (%s, attempt %d) is still running in a thread; leaving it "
            "claimed, to be recovered as stalled",
            r.job.queue,
            r.job.id,
            r.job.task,
            r.job.attempts,
            extra=r.log_extra,
        )
        self._claims.drop(r)
        if r.task is not None:
            r.task.cancel()

    async def _schedule(self) -> None:
        """Store the code-defined schedules of this worker's queues, then take part in the
        scheduler's election (``relaymq.schedules.scheduler``)."""
        scheduler = Scheduler(self.ops, self.id)
        mine = [s for s in self.app.schedules.values() if s.queue in self.queues]
        while mine:
            try:
                await scheduler.define(mine)
                break
            except BackendError as e:
                log.warning("could not store this worker's schedules (%s); retrying", e)
                await asyncio.sleep(5.0)
        await scheduler.run()

    @property
    def _registry_ttl(self) -> float:
        return self.settings.heartbeat_interval * 3

    def _unblocked(self, seconds: float) -> None:
        log.warning("the event loop runs again after %.1fs blocked", seconds)
        self._counts.add("loop_blocked")

    async def _renew_registration(self) -> None:
        stats = self.stats
        failed = stats.retried + stats.failed + stats.expired
        processed = stats.completed + stats.cancelled + failed
        self.info = dataclasses.replace(self.info, processed=processed, failed=failed)
        await self.ops.register_worker(self.info, self._registry_ttl)

    async def _refused(self, e: ConfigError) -> None:
        """A claim raised ``ConfigError``: set aside the queues the backend refuses (all of
        them when none can be told apart), record it on this worker's registration, and stop
        once none is left. Never retried as is: the refused queues are checked again once a
        minute (``Refusals.recheck``)."""
        before = len(self.refusals.refused)
        await self.refusals.refuse_from(e, self.refusals.serving())
        if len(self.refusals.refused) == before:  # could not tell which (the server is down)
            await self._until(asyncio.sleep(1.0))
            return
        await self._refusals_changed()

    async def _refusals_changed(self) -> None:
        self.info = dataclasses.replace(self.info, refused=self.refusals.record())
        if self._watch is not None:
            self._watch.info = self.info
        self._maintenance.queues = self.refusals.serving()
        if self.refusals.all_refused:
            log.error("no queue left to serve: stopping")
            self.stop()
            return
        with contextlib.suppress(BackendError):  # the heartbeats write it again anyway
            await self._renew_registration()

    # -- claiming ---------------------------------------------------------------------------

    def _free(self) -> int:
        return self.settings.concurrency - self._claims.running

    def _room(self, queues: list[str], free: int) -> tuple[list[str], int]:
        """The queues to claim from and how many jobs to ask for: a queue at its cap in this
        process (``App.limit(local_max_active=...)``) is left out, and a claim that includes
        capped queues asks for no more than the least room among them (0: wait for a slot)."""
        caps = self.app.local_limits
        if not caps or free <= 0:
            return queues, free
        running = self._claims.by_queue
        room = {q: caps[q] - running.get(q, 0) for q in queues if q in caps}
        open_queues = [q for q in queues if room.get(q, 1) > 0]
        if not open_queues:
            return [], 0
        return open_queues, min([free] + [room[q] for q in open_queues if q in room])

    async def _claim_loop(self) -> None:
        """Ask the settler for a job per free slot, start what comes, wait when nothing does."""
        failures = 0
        slot_free = self._claims.slot_free
        while not self._stopping.is_set():
            if self.refusals.due() and await self.refusals.recheck():
                await self._refusals_changed()
                continue
            queues, free = self._room(self._queue_order(), self._free())
            if free <= 0:
                slot_free.clear()
                await slot_free.wait()
                await asyncio.sleep(0)  # let jobs finishing in the same tick free their slots
                continue
            try:
                batch = await self._settler.claim(queues, self.id, free)
            except ConfigError as e:  # a refusal: never retried as is
                await self._refused(e)
                continue
            except Exception as e:  # never the end of the worker: log, back off, try again
                failures += 1
                if isinstance(e, BackendError):
                    log.warning("claim failed (%s); retrying", e)
                else:
                    log.exception("claim failed; retrying")
                await self._until(asyncio.sleep(min(5.0, 0.1 * 2**failures)))
                continue
            failures = 0
            if batch is None:  # the worker stops (what came meanwhile was given back)
                break
            if batch.jobs:
                self._took(batch)
            else:
                await self._nothing(batch)

    def _took(self, batch: ClaimBatch) -> None:
        if self._paused:
            self._resumed({j.queue for j in batch.jobs})
        for job in batch.jobs:
            self._start(job, batch.now, self._settler.sent)

    async def _nothing(self, batch: ClaimBatch) -> None:
        """A claim found nothing to do: wait for work."""
        self._counts.add("empty_claims")
        if time.monotonic() >= self._next_pause_check:
            with contextlib.suppress(BackendError):  # only a log line: try again later
                await self._check_paused(self.queues)
        try:
            await self._idle(batch.limited)
        except BackendError as e:
            log.warning("wait failed (%s)", e)
            await self._until(asyncio.sleep(1.0))

    async def _idle(self, limited: dict[str, float | None]) -> None:
        """Wait for work after an empty claim. Queues held back by their limits are waited
        for by time (the rate window's end, or a short poll while active jobs must end
        first): their waiting jobs would end ``wait`` at once."""
        timeout = min((LIMIT_POLL if t is None else t for t in limited.values()), default=IDLE_WAIT)
        timeout = min(IDLE_WAIT, max(timeout, 0.01))
        open_queues = [q for q in self.refusals.serving() if q not in limited]
        if open_queues:
            await self._until(self.ops.wait(open_queues, timeout))
        else:
            await self._until(asyncio.sleep(timeout))

    async def _check_paused(self, queues: Sequence[str]) -> None:
        """Log once when a queue is found paused (and once when resumed): a paused queue
        otherwise looks like an empty one."""
        self._next_pause_check = time.monotonic() + PAUSE_CHECK_INTERVAL
        paused = {q for q in queues if await self.ops.is_paused(q)}
        for q in sorted(paused - self._paused):
            log.warning(
                "queue %s is paused: its jobs wait until it is resumed", q, extra={"queue": q}
            )
        self._resumed(set(queues) - paused)
        self._paused |= paused

    def _resumed(self, queues: set[str]) -> None:
        for q in sorted(self._paused & queues):
            log.info("queue %s was resumed", q, extra={"queue": q})
        self._paused -= queues

    def _queue_order(self) -> list[str]:
        """Rotate the queue order on every claim so no queue starves the others (the
        queues the backend refuses left out)."""
        queues = self.refusals.serving()
        if len(queues) == 1:
            return queues
        self._rotation = (self._rotation + 1) % len(queues)
        return queues[self._rotation :] + queues[: self._rotation]

    async def _until(
        self,
        awaitable: Awaitable[Any],
        *,
        also: asyncio.Event | None = None,
        timeout: float | None = None,
    ) -> None:
        """Await ``awaitable`` unless the worker is asked to stop first (or ``also`` is set,
        or ``timeout`` passes); re-raise what the awaitable raised."""
        inner = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future((also or self._stopping).wait())
        try:
            await asyncio.wait({inner, stop}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not inner.done():
                inner.cancel()
        if inner.done() and not inner.cancelled():
            inner.result()

    def _start(self, job: Job, now: float, sent: float) -> None:
        r = self._claims.add(job, sent)
        r.task = asyncio.create_task(self._execute(r, now))

    async def _execute(self, r: RunningJob, now: float) -> None:
        try:
            settle = await self._execution.run(r, now)
        finally:
            self._claims.handler_ended(r)
        if settle is not None and settle is r.completed_in:  # committed by the handler
            self._settler.books.settled(r, settle, True)
            self._claims.drop(r)
        elif settle is None or not self._claims.holds(r):
            self._claims.drop(r)  # the claim is lost: another worker owns the job; write nothing
        else:
            self._settler.add(r, settle)

    def _report_progress(self, r: RunningJob, value: Any) -> None:
        """A handler's progress (maybe from a plain function's thread)."""
        if not self._claims.holds(r):
            return
        r.progress = self.serializer.dumps(value)
        loop = r.task.get_loop() if r.task is not None else asyncio.get_running_loop()
        loop.call_soon_threadsafe(self.ops.progress, r.job.queue, r.job.id, value)
