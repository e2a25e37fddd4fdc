"""Heartbeats that survive a blocked event loop.

A handler that blocks the worker's event loop (``time.sleep``, a CPU-bound loop, a blocking
driver inside an ``async def``) stops every heartbeat with it: its claims would look stalled
and their jobs would run a second time elsewhere while the first run goes on.

``LoopWatch`` runs a thread with an event loop of its own. The worker's loop ticks every
quarter heartbeat interval; when the thread has seen no tick for half an interval (and never
sooner than 0.2 s), the loop is blocked. The thread then warns once, naming the job whose
handler is on the blocked loop's stack, and renews every held claim (and the worker's
registration) each interval through a handle of its own on the backend
(``Backend.heartbeat_handle``, connected on first need), until the loop ticks again or
``max_blocked`` seconds have passed: a handler stuck for good must not hold its job for ever.
A thread cannot run while a C call holds the GIL; such a block still loses its claims after
``stalled_threshold``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from types import CodeType, FrameType
from typing import Any

from relaymq import registry
from relaymq.backends.base import Backend
from relaymq.instrumented import Instrumented
from relaymq.job import Job
from relaymq.records.store import Beat, WorkerInfo
from relaymq.task import Task
from relaymq.worker.running import Claims, RunningJob

log = logging.getLogger("relaymq.worker")

BLOCKED_AFTER_AT_LEAST = 0.2
"""A loop is blocked after half a heartbeat interval without a turn, and never sooner than
this: a busy machine delays turns by tens of milliseconds without anything being wrong."""


class LoopWatch:
    """Watches the event loop it is started on; renews ``claims`` from its own thread while
    that loop is blocked. ``unblocked(seconds)`` is called on the loop once it runs again."""

    def __init__(
        self,
        backend: Backend,
        claims: Claims,
        info: WorkerInfo,
        *,
        interval: float,
        max_blocked: float,
        registry_ttl: float,
        unblocked: Callable[[float], None],
        tasks: Mapping[str, Task[Any, Any]],
    ) -> None:
        self.claims = claims
        self.tasks = tasks
        """The worker's tasks (its app's), to name the handler that blocks the loop."""
        self.info = info
        self.interval = interval
        self.max_blocked = max_blocked
        self.registry_ttl = registry_ttl
        self.unblocked = unblocked
        self.tick = interval / 4
        self.blocked_after = max(interval / 2, BLOCKED_AFTER_AT_LEAST)
        self.renewed = 0
        """Claims renewed from the thread (a test signal)."""
        self._backend = backend
        self._handle: Instrumented | None = None
        """A facade over the backend's own connection for this thread (``heartbeat_handle``),
        unobserved: the worker's observers live on its loop."""
        self._lock = threading.Lock()
        self._last_tick = time.monotonic()
        self._blocked_since: float | None = None
        self._unblocked_at = -float("inf")
        self._loop_thread = threading.get_ident()
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._wake: Callable[[], object] = lambda: None
        """Wakes the watching thread's loop at once (set once that loop runs)."""

    # -- on the worker's loop ---------------------------------------------------------------

    async def run(self) -> None:
        """Tick until cancelled, with the watching thread beside it."""
        self._loop_thread = threading.get_ident()
        self._thread = threading.Thread(target=self._watch, name="relaymq-loopwatch", daemon=True)
        self._thread.start()
        try:
            while True:
                self._ticked()
                await asyncio.sleep(self.tick)
        finally:
            self._done.set()
            with contextlib.suppress(RuntimeError):  # its loop already ended (a failure)
                self._wake()
            await asyncio.to_thread(self._thread.join, 10.0)  # its handle closes

    def _ticked(self) -> None:
        with self._lock:
            now = time.monotonic()
            self._last_tick = now
            since, self._blocked_since = self._blocked_since, None
            if since is not None:
                self._unblocked_at = now
        if since is not None:
            self.unblocked(now - since)

    def recently_blocked(self) -> bool:
        """Blocked now, or within the last heartbeat interval: claims this worker holds may
        not have been renewed yet, so stalled recovery should wait for the next pass."""
        with self._lock:
            blocked = self._blocked_since is not None
            return blocked or time.monotonic() - self._unblocked_at < self.interval

    # -- on the watching thread -------------------------------------------------------------

    def _watch(self) -> None:
        asyncio.run(self._watching())

    async def _watching(self) -> None:
        renewed_at = -float("inf")
        gave_up: float | None = None
        woken = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._wake = lambda: loop.call_soon_threadsafe(woken.set)
        try:
            while not self._done.is_set():
                with contextlib.suppress(TimeoutError):  # the handle's own tasks run meanwhile
                    await asyncio.wait_for(woken.wait(), self.tick)
                since = self._blocked()
                if since is None:
                    continue
                now = time.monotonic()
                if now - since > self.max_blocked:
                    if gave_up != since:
                        gave_up = since
                        log.error(
                            "the event loop has been blocked for %.1fs, past max_blocked "
                            "(%ss): this worker's claims are no longer renewed and its "
                            "jobs will be recovered as stalled",
                            now - since,
                            self.max_blocked,
                        )
                elif now - renewed_at >= self.interval:
                    renewed_at = now
                    await self._renew()
        finally:
            if self._handle is not None:
                with contextlib.suppress(Exception):
                    await self._handle.backend.close()

    def _blocked(self) -> float | None:
        """When the loop stopped ticking, if it is blocked now; warns once per block."""
        with self._lock:
            if self._blocked_since is not None:
                return self._blocked_since
            lag = time.monotonic() - self._last_tick
            if lag < self.blocked_after:
                return None
            self._blocked_since = since = self._last_tick
        log.warning(
            "the event loop is blocked (no turn for %.1fs) by %s; heartbeats go on from "
            "their own thread for up to %ss. Blocking work belongs in a plain function "
            "(def) or asyncio.to_thread",
            lag,
            self._culprit(),
            self.max_blocked,
        )
        return since

    async def _renew(self) -> None:
        held = [r.claim for r in self._snapshot()]
        try:
            if self._handle is None:
                handle = self._backend.heartbeat_handle()
                if handle is None:
                    return
                try:
                    await handle.connect()
                except BaseException:
                    with contextlib.suppress(Exception):
                        await handle.close()
                    raise
                self._handle = Instrumented(handle)
            if held:
                await self._handle.heartbeat([Beat(c) for c in held])
                self.renewed += len(held)
            await registry.register(self._handle, self.info, self.registry_ttl)
        except Exception as e:  # the next check tries again
            log.warning("heartbeat from the watching thread failed (%s)", e)

    def _snapshot(self) -> list[RunningJob]:
        while True:
            try:
                return self.claims.to_renew()
            except RuntimeError:  # changed while copied: the loop moved on meanwhile
                continue

    def _culprit(self) -> str:
        """The job whose handler is on the blocked loop's stack (with where it is now), or
        what the loop is running when no handler is."""
        frame: FrameType | None = sys._current_frames().get(self._loop_thread)
        if frame is None:
            return "an unknown call"
        where = f"{frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_lineno})"
        handlers: dict[CodeType, Job] = {}
        for r in self._snapshot():
            t = self.tasks.get(r.job.task)
            if t is not None and t.is_async:
                handlers[inspect.unwrap(t.fn).__code__] = r.job
        while frame is not None:
            j = handlers.get(frame.f_code)
            if j is not None:
                return f"job {j.queue}/{j.id} (task {j.task}, attempt {j.attempts}) in {where}"
            frame = frame.f_back
        return where
