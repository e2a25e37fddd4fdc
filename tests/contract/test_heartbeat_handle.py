"""``Backend.heartbeat_handle``: a second handle, used from another thread's event loop, renews
the claims of the first (the worker's heartbeats while a handler blocks its loop)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from relaymq.backends.base import Backend
from relaymq.job import JobState
from relaymq.records.store import Beat
from relaymq.testing import FakeClock
from tests.support.jobs import get_job, new_job

T = TypeVar("T")


def on_another_thread(work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work`` to the end on a new thread with its own event loop, as the worker does."""
    out: list[T] = []
    errors: list[BaseException] = []

    def main() -> None:
        try:
            out.append(asyncio.run(work()))  # type: ignore[arg-type]
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=main)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the other thread's heartbeat did not end within 30 s"
    if errors:
        raise errors[0]
    return out[0]


async def test_a_handle_on_another_thread_renews_claims_fenced(
    backend: Backend, q: str, clock: FakeClock
) -> None:
    handle = backend.heartbeat_handle()
    if not backend.capabilities.cross_process:
        assert handle is None  # in-memory state has no second way in
        return
    assert handle is not None and handle is not backend
    await backend.enqueue([new_job(q, "held"), new_job(q, "stale")])
    jobs = {j.id: j for j in (await backend.claim([q], "w", 2)).jobs}
    stale = dataclasses.replace(jobs["stale"].claim, token=jobs["stale"].claim.token + 1)

    async def beat() -> list[bool]:
        async with handle:
            results = await handle.heartbeat([Beat(jobs["held"].claim), Beat(stale)])
            return [r.held for r in results]

    clock.advance(25)
    assert await asyncio.to_thread(on_another_thread, beat) == [True, False]
    clock.advance(10)  # "held": renewed 10 s ago; "stale": its claim is 35 s old
    recovered = await backend.recover_stalled(q, threshold=30, max_stalled=5)
    assert recovered.requeued == ["stale"]
    held = await get_job(backend, q, "held")
    assert held is not None and held.state is JobState.ACTIVE
