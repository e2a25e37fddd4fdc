"""Batched settling: every finished job's outcome, written in one fenced backend call."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from relaymq.backends.base import Beat, Settle
from relaymq.errors import BackendError
from relaymq.instrumented import Instrumented
from relaymq.worker.running import Claims, RunningJob

log = logging.getLogger("relaymq.worker")

RETRY_PAUSE = 0.5
"""Seconds between tries when a settle call fails."""


class Settler:
    """Collects outcomes and writes them together; a failed write is kept and tried again."""

    def __init__(
        self,
        ops: Instrumented,
        claims: Claims,
        record: Callable[[RunningJob, Settle, bool], None],
    ) -> None:
        self.ops = ops
        self.claims = claims
        self.record = record
        self.lock = asyncio.Lock()
        """Held while a settle is in flight: shutdown never cancels the loop inside one."""
        self._outbox: list[tuple[RunningJob, Settle]] = []
        self._wanted = asyncio.Event()

    def __len__(self) -> int:
        return len(self._outbox)

    def add(self, r: RunningJob, settle: Settle) -> None:
        r.settling = True
        self._outbox.append((r, settle))
        self._wanted.set()

    async def _store_progress(self, batch: list[tuple[RunningJob, Settle]]) -> None:
        """Progress reported since the last heartbeat is stored before the outcome (a short
        job may end before any heartbeat): one fenced renewal, only when there is some."""
        beats = [Beat(r.claim, r.progress) for r, _ in batch if r.progress is not None]
        if beats:
            await self.ops.heartbeat(beats)
            for r, _ in batch:
                r.progress = None

    async def run(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            await asyncio.sleep(0)  # let outcomes finishing in the same tick join the batch
            try:
                await self.flush()
            except BackendError as e:
                log.warning("settle failed (%s); retrying", e)
                await asyncio.sleep(RETRY_PAUSE)
                self._wanted.set()
            except Exception:  # a bug must not stop settling: log it and try again
                log.exception("settle failed; retrying")
                await asyncio.sleep(RETRY_PAUSE)
                self._wanted.set()

    async def flush(self) -> None:
        """Settle every pending outcome in one call."""
        async with self.lock:
            batch, self._outbox = self._outbox, []
            if not batch:
                return
            try:
                await self._store_progress(batch)
                applied = await self.ops.settle([(r.job, s) for r, s in batch])
            except BaseException:
                self._outbox[:0] = batch  # keep them for the next try
                raise
            for (r, s), ok in zip(batch, applied, strict=True):
                self.claims.drop(r)
                self.record(r, s, ok)
