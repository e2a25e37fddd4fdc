"""Settling and claiming: the one object between a worker and its backend's job writes.

Every finished job's outcome goes in (``add``) and is written with the others in one fenced
call; the claim loop asks for jobs (``claim``) and gets them back with the claim's answers.
The ``Settler`` decides how the two share round trips, so the worker never hears from it but
through ``claim``'s return:

- while the queues run dry (the last claim came back short), on a backend that settles and
  claims in one round trip (``capabilities.settle_claims``), a claim asked for while outcomes
  wait is made by their settle: one round trip instead of two. Under a backlog (the last claim
  took all it asked for) claims are made beside the settles, the two round trips overlapping;
- an outcome that puts its job back in line (a release, a retry without delay) is written
  before the next claim, where that job competes at its priority (RELIABILITY.md I10):
  ``lined_up`` is clear until it is, unless settling fails (claims then go on: one outcome that
  cannot be written must not stop the others' jobs).

A failed write is kept and tried again, except a refusal for good (``RecordRefusedError``):
that outcome is replaced by a failed attempt naming the refusal. Error texts are made storable
on every backend first (``storable``). What is noted per settled job (counts, history, a log
line) is the ``Bookkeeping``'s; the facade reports events and metrics."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

from relaymq.errors import BackendError, RecordRefusedError
from relaymq.instrumented import Instrumented
from relaymq.job import ATTEMPTS_KEPT
from relaymq.records.store import Beat, ClaimBatch, Outcome, Settle, SettledClaimed
from relaymq.worker.execution import refused
from relaymq.worker.running import Claims, RunningJob

log = logging.getLogger("relaymq.worker")

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
    """Collects outcomes and writes them together; a failed write is kept and tried again.
    Makes the worker's claims, alone or with a settle (``claim``)."""

    def __init__(
        self,
        ops: Instrumented,
        claims: Claims,
        books: Books,
        *,
        coalesce: bool = False,
        keep: int = ATTEMPTS_KEPT,
    ) -> None:
        self.ops = ops
        self.keep = keep
        """Attempts each job's history keeps (``Settings.attempt_history``)."""
        self.claims = claims
        self.books = books
        self.coalesce = coalesce
        """Claims may go with settles (the backend makes the two in one round trip)."""
        self._failing = False
        self._backlog = False
        """The last claim took every job it asked for: claim beside the settles."""
        self._asked: _Asked | None = None
        """A claim waiting for the next settle to make it."""
        self.sent = 0.0
        """When the call that made the claim ``claim`` returned last was sent (monotonic): its
        claims are no younger, however late the answer came back."""
        self._closed = asyncio.Event()
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

    # -- claiming ---------------------------------------------------------------------------

    async def claim(self, queues: list[str], worker_id: str, limit: int) -> ClaimBatch | None:
        """Claim up to ``limit`` jobs from ``queues`` (in that order) for ``worker_id``.

        Waits first for an outcome going back in line to be written (I10), unless the settle
        that writes it makes this claim. Raises what a claim raises (``ConfigError`` for a
        queue the backend refuses), also when made with a settle. None once ``close`` was
        called: nothing is claimed from then on, and the jobs that a claim in flight still
        brings are given back (released with the next settle)."""
        while not self._closed.is_set():
            if self._carries:
                answer = await self._with_next_settle(queues, worker_id, limit)
                if answer is not None and answer.claim_error is not None:
                    raise answer.claim_error
                if answer is not None and answer.batch is not None:
                    return self._took(answer.batch, limit)
                continue  # that settle made no claim (it failed, or wrote outcomes alone)
            if not self.lined_up.is_set():
                await self._unless_closed(self.lined_up.wait())
                continue
            self.sent = time.monotonic()
            return self._took(await self.ops.claim(queues, worker_id, limit), limit)
        return None

    def close(self) -> None:
        """Claim nothing more: a claim waiting returns None, and one in flight gives back what
        it takes. Outcomes are still written (``flush``)."""
        self._closed.set()

    @property
    def _carries(self) -> bool:
        """The next claim goes with the next settle: the queues run dry and outcomes wait."""
        ready = self.coalesce and not self._backlog and not self._failing
        return ready and not self._alone and bool(self._outbox)

    async def _with_next_settle(
        self, queues: list[str], worker_id: str, limit: int
    ) -> SettledClaimed | None:
        """Leave the claim to the next settle; its answer, or None when it made no claim (the
        settle wrote outcomes alone, failed, or the settler was closed meanwhile)."""
        asked = _Asked(queues, worker_id, limit, asyncio.get_running_loop().create_future())
        self._asked = asked
        try:
            await self._unless_closed(asked.answer)  # closed first: the answer is cancelled
        finally:
            if self._asked is asked:
                self._asked = None
        return None if asked.answer.cancelled() else asked.answer.result()

    def _took(self, batch: ClaimBatch, limit: int) -> ClaimBatch | None:
        self._backlog = len(batch.jobs) >= limit
        self.books.claimed(len(batch.jobs))
        if self._closed.is_set():  # claimed as the worker stops: give back
            self._give_back(batch)
            return None
        return batch

    def _give_back(self, batch: ClaimBatch) -> None:
        """Release jobs claimed for a worker that will not start them, with the next settle."""
        for job in batch.jobs:
            r = self.claims.add(job)
            self.claims.handler_ended(r)
            self.add(r, Settle(job.claim, Outcome.RELEASE))

    async def _unless_closed(self, waited: Awaitable[Any]) -> None:
        """Await ``waited`` unless the settler is closed first (``waited`` is then cancelled)."""
        inner = asyncio.ensure_future(waited)
        closed = asyncio.ensure_future(self._closed.wait())
        try:
            await asyncio.wait({inner, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            inner.cancel()

    # -- settling ---------------------------------------------------------------------------

    def add(self, r: RunningJob, settle: Settle) -> None:
        """Queue ``settle`` for the next write; its error made storable (``storable``), the
        handler's run time and the history's length on it for the attempt's record."""
        if settle.error is not None:
            error = storable(settle.error)
            if error is not settle.error:
                settle = dataclasses.replace(settle, error=error)
        settle.ran_for = r.ran_for  # made for this write alone: filled in, not copied
        settle.keep = self.keep
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
        """Settle every pending outcome in one call (making the claim waiting for it, if any).

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
        """Settle the first ``n`` pending outcomes in one call; on failure they stay first.
        With ``claim``, the claim waiting for a settle is made in the same call."""
        batch, self._outbox = self._outbox[:n], self._outbox[n:]
        asked = self._asked if claim and not self._closed.is_set() else None
        if asked is not None:
            self._asked = None
        answer = None
        try:
            await self._store_progress(batch)
            outcomes = [(r.job, s) for r, s in batch]
            if asked is None:
                applied = await self.ops.settle(outcomes)
            else:
                self.sent = time.monotonic()
                answer = await self.ops.settle_and_claim(
                    outcomes, asked.queues, asked.worker_id, asked.limit
                )
                applied = answer.applied
        except BaseException:
            self._outbox[:0] = batch  # keep them for the next try
            self._failing = True
            self._line_up()
            raise
        finally:
            if asked is not None:
                self._answer(asked, answer)
            if self._asked is not None:  # a claim this settle did not make: it decides again
                self._answer(self._asked, None)
                self._asked = None
        self._failing = False
        self._requeues -= sum(back_in_line(s) for _, s in batch)
        self._line_up()
        for (r, s), ok in zip(batch, applied, strict=True):
            self._replaced.discard(r)
            self.claims.drop(r)
            self.books.settled(r, s, ok)

    def _answer(self, asked: _Asked, answer: SettledClaimed | None) -> None:
        """Hand the claim's answer (None: the call failed) to the claim waiting for it; the
        jobs of one that left (the settler was closed) are given back."""
        if not asked.answer.done():
            asked.answer.set_result(answer)
        elif answer is not None and answer.batch is not None:
            self.books.claimed(len(answer.batch.jobs))
            self._give_back(answer.batch)

    def _refused(self, n: int, e: RecordRefusedError) -> None:
        """The first ``n`` pending outcomes were refused for good: find the one that was (write
        them one by one), or replace it, once, by a failed attempt."""
        if n > 1:
            log.warning(
                "the backend refused one of %d outcomes for good (%s); writing them one by one",
                n,
                e,
            )
            self._alone = n
            return
        r, s = self._outbox[0]
        where = f"{r.job.queue}/{r.job.id}"
        if r in self._replaced:  # the failed attempt written instead was refused too
            log.error(
                "the backend refused the outcome of job %s and the failed attempt "
                "written instead (%s): its claim is left to be recovered as stalled",
                where,
                e,
                extra=r.log_extra,
            )
            del self._outbox[0]
            self._replaced.discard(r)
            self.claims.drop(r)
            self._alone = max(self._alone - 1, 0)
            self._requeues -= back_in_line(s)
            self._line_up()
            return
        log.warning(
            "the backend refused the outcome (%s) of job %s for good (%s); writing a "
            "failed attempt instead",
            s.outcome.value,
            where,
            e,
            extra=r.log_extra,
        )
        instead = refused(r.job, s, storable(str(e)))
        instead.ran_for, instead.keep = s.ran_for, s.keep
        self._outbox[0] = (r, instead)
        self._replaced.add(r)
        self._requeues += back_in_line(instead) - back_in_line(s)
        self._line_up()


@dataclass(slots=True)
class _Asked:
    """A claim left to the next settle, and where its answer goes."""

    queues: list[str]
    worker_id: str
    limit: int
    answer: asyncio.Future[SettledClaimed | None]


class Books(Protocol):
    """What the settler notes once the backend answered (``bookkeeping.Bookkeeping``)."""

    def claimed(self, n: int) -> None: ...

    def settled(self, r: RunningJob, s: Settle, applied: bool) -> None: ...


def back_in_line(settle: Settle) -> bool:
    """The outcome returns its job to waiting at once: a release, a retry without delay."""
    return settle.outcome is Outcome.RELEASE or (
        settle.outcome is Outcome.RETRY and settle.delay <= 0
    )
