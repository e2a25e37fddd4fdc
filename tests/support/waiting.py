"""Waiting in tests without sleeping: re-check a condition each time the backend says
something happened (any event), with a deadline that names what was awaited."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from relaymq import events
from relaymq.backends.base import Backend
from relaymq.instrumented import Instrumented
from relaymq.job import JobState
from tests.support.jobs import get_job

Check = Callable[[], bool | Awaitable[bool]]

RECHECK = 0.25
"""Also re-check this often, for conditions no event announces (a handler's own state)."""


class Watch:
    def __init__(self, backend: Backend, subscription: events.Subscription) -> None:
        self.backend = backend
        self.events = subscription

    async def until(self, check: Check, what: str, within: float = 10.0) -> None:
        try:
            async with asyncio.timeout(within):
                while True:
                    if await _holds(check):
                        return
                    try:
                        async with asyncio.timeout(RECHECK):
                            await anext(self.events)
                    except TimeoutError:
                        pass
        except TimeoutError:
            raise AssertionError(f"gave up after {within}s waiting for {what}") from None

    async def state(self, queue: str, job_id: str, state: JobState, within: float = 10) -> None:
        async def reached() -> bool:
            job = await get_job(self.backend, queue, job_id)
            return job is not None and job.state is state

        await self.until(reached, f"job {queue}/{job_id} to be {state.value}", within)


@asynccontextmanager
async def watch(backend: Backend) -> AsyncIterator[Watch]:
    """Subscribe first, then act, then ``await w.until(...)``: no event can be missed."""
    subscription = await Instrumented(backend).subscribe()
    try:
        yield Watch(backend, subscription)
    finally:
        await subscription.aclose()


async def poll_until(check: Check, what: str, within: float = 5.0, every: float = 0.01) -> None:
    """Re-check ``check`` every ``every`` seconds, for state that announces nothing (a
    server's own counters); fails naming ``what`` after ``within`` seconds."""
    try:
        async with asyncio.timeout(within):
            while True:
                if await _holds(check):
                    return
                await asyncio.sleep(every)
    except TimeoutError:
        raise AssertionError(f"gave up after {within}s waiting for {what}") from None


async def _holds(check: Check) -> bool:
    result = check()
    return bool(await result if inspect.isawaitable(result) else result)
