"""The outbox relay: moves the jobs that callers enqueued in their own transactions into the
app's outbox (``App(url, outbox=...)``: a PostgreSQL or SQLite database of the application's)
on to the app's backend (Redis, MongoDB, RabbitMQ...).

Each transactional enqueue wrote one envelope (``relaymq.records.outbox``), a job of the
outbox's queue ``relaymq.outbox``, visible once its transaction committed. Every worker of the
app runs a ``Relay``; one at a time leads, through a lease on the app's backend. The leader
claims committed envelopes (waking on the outbox's own wake-ups: LISTEN/NOTIFY on PostgreSQL,
polling on SQLite), enqueues their jobs on the backend with their own ids, then deletes the
envelopes. A relay that dies between the two leaves its envelopes claimed; the outbox's stalled
recovery hands them out again and the next move is answered as duplicates: a move may be made
twice, a job is stored once. An envelope the backend refuses for good (a ``ConfigError``) is
failed in the outbox with the reason, where ``relaymq dlq list`` on the outbox's URL shows it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from relaymq.app import App
from relaymq.errors import BackendError, ConfigError, CorruptRecordError
from relaymq.instrumented import Instrumented
from relaymq.job import Job, NewJob
from relaymq.records import outbox
from relaymq.records.store import Outcome, Settle
from relaymq.settings import Settings

log = logging.getLogger("relaymq.outbox")

LEASE = "outbox-relay"
LEASE_TTL = 10.0
"""Seconds the leader's lease lasts; it renews it every third of that."""
BATCH = 100
"""Envelopes claimed per move."""
RETRY_AFTER = 1.0
"""Seconds a relay waits after a failed move before the next."""
NEVER_FAIL = 1_000_000_000
"""The outbox's ``max_stalled``: an envelope is never failed for the relay's crashes."""


class Relay:
    """One worker's part in relaying ``app``'s outbox. ``between`` (tests) is awaited after a
    move and before its envelopes are deleted: a crash there is what it simulates."""

    def __init__(
        self,
        app: App,
        ops: Instrumented,
        owner: str,
        settings: Settings,
        *,
        between: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.app = app
        self.ops = ops
        self.owner = owner
        self.settings = settings
        self.between = between
        self.outbox: Instrumented | None = None
        self._recovered_at = -float("inf")

    async def run(self) -> None:
        """Lead when the lease is free, relay while leading; every error is logged and the
        next turn tries again."""
        try:
            while True:
                try:
                    if await self.ops.lease(LEASE, self.owner, LEASE_TTL):
                        await self.relay_for(LEASE_TTL / 3)
                        continue
                except (BackendError, ConfigError) as e:
                    log.warning("the outbox relay failed: %s", e)
                except Exception:
                    log.exception("the outbox relay failed")
                await asyncio.sleep(RETRY_AFTER if self.outbox is None else LEASE_TTL / 3)
        finally:
            try:
                await self.ops.lease(LEASE, self.owner, 0)  # the next leader need not wait
            except Exception as e:
                log.debug("could not give the outbox lease back: %s", e)

    async def relay_for(self, seconds: float) -> None:
        """Move what the outbox holds, and what it gets, for ``seconds``."""
        box = await self._outbox()
        until = time.monotonic() + seconds
        await self._recover(box)
        while (left := until - time.monotonic()) > 0:
            if not await self.move(box):
                await box.wait([outbox.QUEUE], left)

    async def move(self, box: Instrumented) -> int:
        """One batch of envelopes: their jobs enqueued, then the envelopes deleted; how many
        envelopes were moved."""
        batch = await box.outbox_take(self.owner, BATCH)
        if not batch.jobs:
            return 0
        opened: list[tuple[Job, list[NewJob]]] = []
        refused: list[Settle] = []
        for envelope in batch.jobs:
            try:
                opened.append((envelope, outbox.opened(envelope.payload, batch.now)))
            except CorruptRecordError as e:
                refused.append(Settle(envelope.claim, Outcome.FAIL, error=str(e)))
        try:
            await self.ops.enqueue([j for _, jobs in opened for j in jobs])
        except ConfigError:
            opened = await self._one_by_one(opened, refused)
        except BaseException:
            await _give_back(box, [Settle(e.claim, Outcome.RELEASE) for e, _ in opened])
            raise
        if self.between is not None:
            await self.between()
        if refused:
            await box.outbox_back(refused)
        await box.outbox_done([e.id for e, _ in opened])
        return len(batch.jobs)

    async def _one_by_one(
        self, opened: list[tuple[Job, list[NewJob]]], refused: list[Settle]
    ) -> list[tuple[Job, list[NewJob]]]:
        """After the backend refused a batch: each envelope alone, those it refuses failed in
        the outbox with the reason; the others, moved."""
        moved = []
        for envelope, jobs in opened:
            try:
                await self.ops.enqueue(jobs)
            except ConfigError as e:
                log.error("outbox envelope %s refused by the backend: %s", envelope.id, e)
                refused.append(Settle(envelope.claim, Outcome.FAIL, error=str(e)))
                continue
            moved.append((envelope, jobs))
        return moved

    async def _outbox(self) -> Instrumented:
        if self.outbox is None:
            self.outbox = await self.app.connect_outbox()
            if self.outbox is None:
                raise ConfigError("the app has no outbox to relay")
        return self.outbox

    async def _recover(self, box: Instrumented) -> None:
        """Envelopes claimed by a relay that died before deleting them, handed out again."""
        now = time.monotonic()
        if now - self._recovered_at < self.settings.stalled_check_interval:
            return
        self._recovered_at = now
        await box.recover_stalled(outbox.QUEUE, self.settings.stalled_threshold, NEVER_FAIL)


async def _give_back(box: Instrumented, settles: list[Settle]) -> None:
    """Release envelopes whose move failed, to be moved again at once (best effort: the
    outbox's recovery returns them otherwise)."""
    try:
        await box.outbox_back(settles)
    except Exception as e:
        log.warning("could not give %d outbox envelopes back: %s", len(settles), e)
