"""Concurrent enqueues, coalesced: while an enqueue through a facade is on its way to the
backend, the ``enqueue`` calls that other coroutines make wait, and go together as one batch
(one script call, one statement) in the loop turn after it returns, joined by the calls made
in that turn. A web app enqueueing from many requests at once pays one round trip per batch,
not one per call; a lone producer's calls go straight through, as without coalescing.

Each caller still gets its own answers, in its own order, and only once the backend answered
for the whole batch (so its jobs are accepted, durably where the backend is, before its call
returns). The batch keeps the callers' order, which is what separate calls made one after the
other would have seen: a repeated job id or a held key of an earlier caller makes a later
caller's job a duplicate, as it would have. When the batch fails for a reason other than the
backend being out of reach (a job the server refuses, which stores nothing of the batch),
each caller's jobs are sent again on their own, in order: a bad job fails alone and the others
are stored. A backend that cannot be reached fails every caller of the batch, as it would
have failed their separate calls.

The calls made through one facade (``relaymq.instrumented``: an app's, shared by its queues and
workers, or a ``Queue``'s) coalesce. Only backends whose ``capabilities.coalesce_enqueues``
says so coalesce (Redis, PostgreSQL); batches with dependencies are never coalesced (their
checks read what earlier calls stored).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from relaymq.backends.base import Backend
from relaymq.errors import BackendUnavailableError
from relaymq.job import NewJob
from relaymq.records.store import Enqueued, dependent

BATCH_JOBS = 100
"""Jobs per coalesced batch at most: more callers make several batches, sent side by side (on
PostgreSQL, over the pool's connections; the events of a batch of jobs with short names still
fit in the notification of its statement)."""

Waiting = tuple[Sequence[NewJob], float, "asyncio.Future[list[Enqueued]]"]
"""One caller's jobs, the time its enqueue was announced at, and the future of its answers."""


class Coalescer:
    """Gathers the enqueues made on ``backend`` while one is in flight into one batch."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._waiting: list[Waiting] = []
        self._busy = False
        """An enqueue is in flight, or waiting ones are about to be sent."""
        self._tasks: set[asyncio.Task[None]] = set()

    async def enqueue_announced(self, jobs: Sequence[NewJob], at: float) -> list[Enqueued]:
        if dependent(jobs):
            return await self.backend.enqueue_announced(jobs, at)
        if not self._busy:  # nothing to join: straight through
            self._busy = True
            try:
                return await self.backend.enqueue_announced(jobs, at)
            finally:
                self._done()
        future: asyncio.Future[list[Enqueued]] = asyncio.get_running_loop().create_future()
        self._waiting.append((jobs, at, future))
        return await future

    def _done(self) -> None:
        """An enqueue came back: the waiting ones go on the next turn, with the calls that its
        callers (woken on this one) make meanwhile."""
        if self._waiting:
            asyncio.get_running_loop().call_soon(self._send)
        else:
            self._busy = False

    def _send(self) -> None:
        # a caller cancelled before its jobs left stores nothing
        waiting = [w for w in self._waiting if not w[2].done()]
        self._waiting = []
        if not waiting:
            self._done()
            return
        loop = asyncio.get_running_loop()
        batches = _batches(waiting)
        left = [len(batches)]

        def sent(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            left[0] -= 1
            if not left[0]:
                self._done()

        for batch in batches:
            task = loop.create_task(self._store(batch))
            self._tasks.add(task)  # held until done: the loop keeps only weak references
            task.add_done_callback(sent)

    async def _store(self, batch: list[Waiting]) -> None:
        if len(batch) == 1:
            await _answer(self.backend, batch[0])
            return
        jobs = [j for each, _, _ in batch for j in each]
        try:
            answers = await self.backend.enqueue_announced(jobs, batch[0][1])
        except BackendUnavailableError as e:  # each call would have met it
            for _, _, future in batch:
                _settle(future, exception=e)
            return
        except Exception:  # refused as a whole, nothing stored: each on its own, in order
            for waiting in batch:
                await _answer(self.backend, waiting)
            return
        except BaseException:  # cancelled with the loop: so are the callers
            for _, _, future in batch:
                future.cancel()
            raise
        start = 0
        for each, _, future in batch:
            _settle(future, answers[start : start + len(each)])
            start += len(each)


def _batches(waiting: list[Waiting]) -> list[list[Waiting]]:
    """The callers in order, cut into batches of at most ``BATCH_JOBS`` jobs (a caller with
    more is a batch of its own)."""
    out: list[list[Waiting]] = []
    size = BATCH_JOBS
    for each in waiting:
        if size + len(each[0]) > BATCH_JOBS:
            out.append([])
            size = 0
        out[-1].append(each)
        size += len(each[0])
    return out


async def _answer(backend: Backend, waiting: Waiting) -> None:
    """One caller's jobs alone: its answers or its error."""
    jobs, at, future = waiting
    try:
        answers = await backend.enqueue_announced(jobs, at)
    except Exception as e:
        _settle(future, exception=e)
        return
    except BaseException:
        future.cancel()
        raise
    _settle(future, answers)


def _settle(
    future: asyncio.Future[list[Enqueued]],
    answers: list[Enqueued] | None = None,
    *,
    exception: BaseException | None = None,
) -> None:
    if future.done():  # its caller was cancelled meanwhile
        return
    if exception is not None:
        future.set_exception(exception)
    else:
        assert answers is not None
        future.set_result(answers)


def coalescer(backend: Backend) -> Coalescer | None:
    """A coalescer for a facade over ``backend``; None where the backend does not coalesce."""
    return Coalescer(backend) if backend.capabilities.coalesce_enqueues else None
