"""The live part: one backend subscription fanned out to every browser; counts pushed after
jobs change, a job's events to the pages following it, and no read per browser or per event."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from relaymq import Queue
from relaymq.backends.base import Backend
from relaymq.dashboard.live import Hub
from relaymq.instrumented import Instrumented
from tests.dashboard.support import waiting
from tests.support.jobs import queue_name


async def messages(stream: AsyncIterator[bytes]) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """The named events of an SSE stream, decoded (comments and the retry line skipped)."""
    async for chunk in stream:
        lines = dict(
            line.split(": ", 1)
            for line in chunk.decode().strip().splitlines()
            if ": " in line and not line.startswith(":")
        )
        if "event" in lines:
            yield lines["event"], orjson.loads(lines["data"])


async def next_matching(
    stream: AsyncIterator[tuple[str, dict[str, Any]]],
    kind: str,
    what: str,
    waiting: int | None = None,
    **fields: object,
) -> dict[str, Any]:
    """The next ``kind`` message whose fields are ``fields`` (and, given ``waiting``, whose
    counts say that many jobs wait)."""
    async with asyncio.timeout(10):  # the message `what` reaching the browser
        async for event, data in stream:
            if event != kind or any(data.get(k) != v for k, v in fields.items()):
                continue
            if waiting is None or data["counts"].get("waiting", 0) == waiting:
                return data
    raise AssertionError(f"the stream ended before {what}")


@pytest.fixture
async def hub(backend: Backend) -> AsyncIterator[Hub]:
    h = Hub(Instrumented(backend), interval=0.2)
    yield h
    await h.close()


async def test_counts_are_pushed_after_jobs_change(backend: Backend, hub: Hub) -> None:
    q = Queue(queue_name(), backend)
    stream = messages(hub.stream())
    # The browser connects (its stream is read), and the hub subscribes.
    pending = asyncio.create_task(next_matching(stream, "counts", "waiting=2", 2, queue=q.name))
    async with asyncio.timeout(10):  # the hub's subscription going live
        await hub.ready.wait()
    await waiting(q, 2)
    assert (await pending)["paused"] is False
    await q.pause()
    await next_matching(stream, "counts", "the pause", queue=q.name, paused=True)


async def test_a_jobs_events_go_to_the_pages_following_it(backend: Backend, hub: Hub) -> None:
    q = Queue(queue_name(), backend)
    [followed, other] = await waiting(q, 2)
    on_page = messages(hub.stream((q.name, followed)))
    elsewhere = messages(hub.stream((q.name, other)))
    # By name: on Redis Cluster the job:waiting of the enqueue above may still be on its way
    # between nodes when the hub subscribes, and then it reaches the page first.
    pending = asyncio.create_task(
        next_matching(on_page, "job", "the cancel", job_id=followed, name="job:cancelled")
    )
    leaked = asyncio.create_task(next_matching(elsewhere, "job", "nothing", job_id=followed))
    async with asyncio.timeout(10):
        await hub.ready.wait()
    await q.cancel(followed)
    await pending  # the cancel reached the page following the job
    await q.cancel(other)  # the other page hears of its own job only
    await next_matching(on_page, "counts", "the second cancel's counts", queue=q.name)
    assert not leaked.done()
    leaked.cancel()


async def test_many_browsers_share_one_reading_of_the_counts(backend: Backend, hub: Hub) -> None:
    q = Queue(queue_name(), backend)
    streams = [messages(hub.stream()) for _ in range(10)]
    seen = [
        asyncio.create_task(next_matching(s, "counts", "all thirty", 30, queue=q.name))
        for s in streams
    ]
    async with asyncio.timeout(10):
        await hub.ready.wait()
    began = time.monotonic()
    for _ in range(30):  # thirty changes, one at a time
        await waiting(q, 1)
    await asyncio.gather(*seen)
    elapsed = time.monotonic() - began
    # One reading per interval at most, shared by all ten browsers: per browser and per
    # event it would be 300.
    assert hub.counts_read <= elapsed / hub.interval + 2, (hub.counts_read, elapsed)
