"""Deadlines for the Redis command path, kept by one timer instead of one per call.

``asyncio.timeout`` arms and cancels a loop timer on every call; on the path every enqueue,
claim and settle takes, that was about a tenth of a ``Queue.add``'s instructions. Here a call
only notes its task and its deadline; a single timer, armed while calls are in flight, fires at
the earliest deadline and cancels the calls past theirs. Every call has the same length, so
the earliest deadline is the oldest call's, and no call is cancelled late.

The cancellation is told apart from any other the way ``asyncio.timeout`` does it: by the
task's count of pending cancellation requests, taken when the call started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


class Expired(Exception):
    """The call ran past its deadline (the caller says what did not answer)."""


class Deadlines:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._due: dict[asyncio.Task[Any], float] = {}
        self._expired: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self, call: Awaitable[T]) -> T:
        """Await ``call`` in the current task; ``Expired`` once it runs ``seconds`` long."""
        task = asyncio.current_task()
        if task is None or task in self._due:  # not in a task, or nested: no deadline here
            return await call
        loop = task.get_loop()
        self._due[task] = due = loop.time() + self.seconds
        if self._timer is None or self._loop is not loop:  # none armed (on this loop)
            self._loop, self._timer = loop, loop.call_at(due, self._fire)
        cancelling = task.cancelling()
        delivered = False
        try:
            return await call
        except asyncio.CancelledError:
            delivered = task in self._expired
            if delivered and task.uncancel() <= cancelling:
                raise Expired from None  # cancelled by the deadline, and by nothing else
            raise
        finally:
            del self._due[task]
            if task in self._expired:
                self._expired.discard(task)
                if not delivered:  # the call swallowed the cancellation and returned
                    task.uncancel()

    def _fire(self) -> None:
        assert self._loop is not None
        self._timer = None
        now = self._loop.time()
        for task, due in self._due.items():
            if due <= now and task not in self._expired:
                self._expired.add(task)
                task.cancel()
        later = [due for task, due in self._due.items() if task not in self._expired]
        if later:
            self._timer = self._loop.call_at(min(later), self._fire)
