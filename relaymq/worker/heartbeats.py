"""Heartbeats: one batched renewal of every held claim, on the worker's own timer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from relaymq.errors import BackendError
from relaymq.instrumented import Instrumented
from relaymq.records.store import Beat
from relaymq.worker.running import Claims, RunningJob, StopReason

log = logging.getLogger("relaymq.worker")

MAX_UNANSWERED = 2
"""Rounds left unanswered at once before the heartbeats wait for one of them."""


class Heartbeats:
    """Renews claims every ``interval`` and stops handlers whose claim was lost or whose job
    was cancelled. ``also`` runs after each round (the worker renews its registration).

    A round that gets no answer within ``deadline`` seconds (a connection that hangs: a network
    cut TCP has not given up on yet, whose data waits for a retransmission that backs off to
    minutes) is left to finish on its own, and the next goes out at once, on another call: one
    hung connection must not keep every claim from being renewed until the stall threshold
    passes, and a slow server's late answer still renews them. At most ``MAX_UNANSWERED``
    rounds wait so; then the next waits for one of them."""

    def __init__(
        self,
        ops: Instrumented,
        claims: Claims,
        interval: float,
        also: Callable[[], Awaitable[None]],
        deadline: float | None = None,
    ) -> None:
        self.ops = ops
        self.claims = claims
        self.interval = interval
        self.also = also
        self.deadline = interval if deadline is None else deadline
        self._asked: list[tuple[RunningJob, asyncio.Future[bool]]] = []

    async def run(self) -> None:
        unanswered: set[asyncio.Task[None]] = set()
        try:
            while True:
                await asyncio.sleep(self.interval)
                while True:
                    beating = asyncio.create_task(self._round())
                    unanswered.add(beating)  # until it answers (cancelled if we stop first)
                    beating.add_done_callback(unanswered.discard)
                    done, _ = await asyncio.wait({beating}, timeout=self.deadline)
                    if done:
                        break
                    # left to finish on its own (a slow server's answer still renews), while
                    # the next round goes out at once, on another call
                    log.warning(
                        "heartbeat got no answer within %gs; sending another", self.deadline
                    )
                    if len(unanswered) >= MAX_UNANSWERED:
                        await asyncio.wait(unanswered, return_when=asyncio.FIRST_COMPLETED)
                        break
        finally:
            for t in list(unanswered):
                t.cancel()
            await asyncio.gather(*unanswered, return_exceptions=True)

    async def _round(self) -> None:
        try:
            await self.beat()
            await self.also()
        except BackendError as e:
            log.warning("heartbeat failed (%s)", e)
        except Exception:  # a bug must not stop the heartbeats of every other job
            log.exception("heartbeat failed")

    async def beat(self) -> None:
        held = self.claims.to_renew()
        if not held:
            return
        beats = [Beat(r.claim, r.progress) for r in held]
        for r in held:
            r.progress = None
        results = await self.ops.heartbeat(beats)
        for r, result in zip(held, results, strict=True):
            if result.held or r.settling:  # settled meanwhile: its own write says how it went
                continue
            if r.stop_reason is not None:  # told already (a thread runs on until it returns)
                continue
            reason = StopReason.CANCELLED if result.cancel_requested else StopReason.LOST
            if reason is StopReason.LOST:
                self.ops.claim_lost(r.job)
                log.warning(
                    "job %s/%s (%s, attempt %d): lost the claim; stopping its handler",
                    r.job.queue,
                    r.job.id,
                    r.job.task,
                    r.job.attempts,
                    extra=r.log_extra,
                )
            r.stop(reason)

    async def check(self, r: RunningJob) -> bool:
        """A fenced start, right before the handler: is ``r``'s claim still held and its job
        not cancelled? (RELIABILITY F12; the spec's second cancellation check.) The checks
        asked for in one turn of the event loop share one round trip."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if not self._asked:
            asyncio.get_running_loop().call_soon(self._check_asked)
        self._asked.append((r, future))
        return await future

    def _check_asked(self) -> None:
        asked, self._asked = self._asked, []
        task = asyncio.ensure_future(self._check(asked))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # handled in _check

    async def _check(self, asked: list[tuple[RunningJob, asyncio.Future[bool]]]) -> None:
        try:
            results = await self.ops.heartbeat([Beat(r.claim) for r, _ in asked])
        except asyncio.CancelledError:
            for _, future in asked:
                future.cancel()
            raise
        except Exception as e:
            for _, future in asked:
                if not future.done():
                    future.set_exception(e)
            return
        for (r, future), result in zip(asked, results, strict=True):
            if not result.held:
                reason = StopReason.CANCELLED if result.cancel_requested else StopReason.LOST
                if reason is StopReason.LOST and r.stop_reason is None:
                    self.ops.claim_lost(r.job)
                r.stop(reason, interrupt=False)  # its own task is waiting for this answer
            if not future.done():
                future.set_result(result.held)
