"""Batched settling: every finished job's outcome, written in one fenced backend call.

On a backend that can (``capabilities.settle_claims``), the same call may claim jobs for the
worker's free slots: ``ask`` says what to claim, if anything (and reserves the slots), ``took``
gets the answer. The worker asks for that only while its queues run dry, and its claim loop
then leaves the claiming to the settle on its way (``will_claim``).

An outcome that puts its job back in line (a release, a retry without delay) must be written
before the worker's next claim, where that job competes at its priority (RELIABILITY.md I10):
``lined_up`` is clear until it is, unless settling fails (the worker's claims then go on: one
outcome that cannot be written must not stop the others' jobs).

A failed write is kept and tried again, except a refusal for good (``RecordRefusedError``):
that outcome is replaced by a failed attempt naming the refusal. Error texts are made storable
on every backend first (``storable``)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable

from relaymq.errors import BackendError, RecordRefusedError
from relaymq.instrumented import Instrumented
from relaymq.records.store import Beat, Outcome, Settle, SettledClaimed
from relaymq.worker.execution import refused
from relaymq.worker.running import Claims, RunningJob

log = logging.getLogger("relaymq.worker")

Ask = tuple[list[str], str, int]
"""What a settle claims: queues, worker id, limit."""

RETRY_PAUSE = 0.5
"""Seconds between tries when a settle call fails."""


def storable(text: str) -> str:
    """``text`` as every backend can store it: a NUL (which PostgreSQL refuses in text) is
    written as the four characters ``\\x00``, a lone surrogate (which no UTF-8 encoder takes)
    as its ``\\udcff`` escape; any other text is kept as it is. The same on every backend."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode()
    except UnicodeEncodeError:
        text = text.encode(errors="backslashreplace").decode()
    return text


class Settler:
    """Collects outcomes and writes them together; a failed write is kept and tried again."""

    def __init__(
        self,
        ops: Instrumented,
        claims: Claims,
        record: Callable[[RunningJob, Settle, bool], None],
        ask: Callable[[], Ask | None] | None = None,
        took: Callable[[SettledClaimed | None, int], None] | None = None,
    ) -> None:
        self.ops = ops
        self.claims = claims
        self.record = record
        self.ask = ask
        """What to claim with the next settle (queues, worker id, limit), slots reserved; None
        for nothing. Unset: settles never claim."""
        self.took = took
        """Gets the answer of a settle that claimed (None: the call failed) and its limit."""
        self.flushed = asyncio.Event()
        """Set after every flush, whether it wrote, claimed or failed."""
        self._failing = False
        self._claiming = False
        self.lock = asyncio.Lock()
        """Held while a settle is in flight: shutdown never cancels the loop inside one."""
        self._outbox: list[tuple[RunningJob, Settle]] = []
        self._alone = 0
        """Outcomes still to write one by one, to find the one the backend refused."""
        self._replaced: set[RunningJob] = set()
        """Jobs whose refused outcome was replaced by a failed attempt, until it is written."""
        self._wanted = asyncio.Event()
        self._requeues = 0
        self.lined_up = asyncio.Event()
        """Clear while an outcome that puts its job back in line waits or is in flight (and
        the last settle did not fail)."""
        self.lined_up.set()

    def __len__(self) -> int:
        return len(self._outbox)

    @property
    def will_claim(self) -> bool:
        """A settle that claims is on its way (outcomes wait, or one is in flight)."""
        return self.ask is not None and not self._failing and (bool(self._outbox) or self._claiming)

    def add(self, r: RunningJob, settle: Settle) -> None:
        """Queue ``settle`` for the next write; its error made storable (``storable``)."""
        if settle.error is not None:
            error = storable(settle.error)
            if error is not settle.error:
                settle = dataclasses.replace(settle, error=error)
        r.settling = True
        self._outbox.append((r, settle))
        if back_in_line(settle):
            self._requeues += 1
            self._line_up()
        self._wanted.set()

    def _line_up(self) -> None:
        if self._requeues and not self._failing:
            self.lined_up.clear()
        else:
            self.lined_up.set()

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
        """Settle every pending outcome in one call (claiming with it when ``ask`` says so).

        An outcome the backend refuses for good (``RecordRefusedError``: writing it again
        cannot help) is not kept for the next try: the refused batch's outcomes are written one
        by one, and the refused one is replaced by a failed attempt with the refusal as its
        reason (``execution.refused``); the others are written as they are."""
        async with self.lock:
            while self._outbox:
                alone = self._alone > 0
                n = 1 if alone else len(self._outbox)
                try:
                    await self._write(n, claim=not alone)
                except RecordRefusedError as e:
                    self._refused(n, e)
                    continue
                if not alone:
                    return
                self._alone -= 1

    async def _write(self, n: int, *, claim: bool) -> None:
        """Settle the first ``n`` pending outcomes in one call; on failure they stay first."""
        batch, self._outbox = self._outbox[:n], self._outbox[n:]
        ask = self.ask() if self.ask is not None and claim else None
        self._claiming = ask is not None
        try:
            await self._store_progress(batch)
            outcomes = [(r.job, s) for r, s in batch]
            answer = None
            if ask is None:
                applied = await self.ops.settle(outcomes)
            else:
                answer = await self.ops.settle_and_claim(outcomes, *ask)
                applied = answer.applied
        except BaseException:
            self._outbox[:0] = batch  # keep them for the next try
            self._failing = True
            self._line_up()
            self._answer(ask, None)
            raise
        self._failing = False
        self._requeues -= sum(back_in_line(s) for _, s in batch)
        self._line_up()
        for (r, s), ok in zip(batch, applied, strict=True):
            self._replaced.discard(r)
            self.claims.drop(r)
            self.record(r, s, ok)
        self._answer(ask, answer)

    def _refused(self, n: int, e: RecordRefusedError) -> None:
        """The first ``n`` pending outcomes were refused for good: find the one that was (write
        them one by one), or replace it, once, by a failed attempt."""
        if n > 1:
            log.warning("the backend refused one of %d outcomes for good (%s); writing them "
                        "one by one", n, e)  # fmt: skip
            self._alone = n
            return
        r, s = self._outbox[0]
        where = f"{r.job.queue}/{r.job.id}"
        if r in self._replaced:  # the failed attempt written instead was refused too
            log.error("the backend refused the outcome of job %s and the failed attempt "
                      "written instead (%s): its claim is left to be recovered as stalled",
                      where, e, extra=r.log_extra)  # fmt: skip
            del self._outbox[0]
            self._replaced.discard(r)
            self.claims.drop(r)
            self._alone = max(self._alone - 1, 0)
            self._requeues -= back_in_line(s)
            self._line_up()
            return
        log.warning("the backend refused the outcome (%s) of job %s for good (%s); writing a "
                    "failed attempt instead", s.outcome.value, where, e,
                    extra=r.log_extra)  # fmt: skip
        instead = refused(r.job, s, storable(str(e)))
        self._outbox[0] = (r, instead)
        self._replaced.add(r)
        self._requeues += back_in_line(instead) - back_in_line(s)
        self._line_up()

    def _answer(self, ask: Ask | None, answer: SettledClaimed | None) -> None:
        self._claiming = False
        if ask is not None and self.took is not None:
            self.took(answer, ask[2])
        self.flushed.set()


def back_in_line(settle: Settle) -> bool:
    """The outcome returns its job to waiting at once: a release, a retry without delay."""
    return settle.outcome is Outcome.RELEASE or (
        settle.outcome is Outcome.RETRY and settle.delay <= 0
    )
