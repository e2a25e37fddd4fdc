"""Events: the names, the ``Event`` record and its wire form (``relaymq.records.events``, the
one home of the format), and a decoded subscription (``Instrumented.publish`` and
``Instrumented.subscribe`` reach the backend's notifier)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from relaymq.records.events import (
    EVENT_NAMES,
    JOB_ACTIVE,
    JOB_BLOCKED,
    JOB_CANCELLED,
    JOB_CLAIM_LOST,
    JOB_COMPLETED,
    JOB_DEDUPLICATED,
    JOB_DELAYED,
    JOB_EXPIRED,
    JOB_FAILED,
    JOB_PROGRESS,
    JOB_REMOVED,
    JOB_RETRYING,
    JOB_STALLED,
    JOB_WAITING,
    QUEUE_PAUSED,
    QUEUE_RESUMED,
    WORKER_OFFLINE,
    WORKER_ONLINE,
    Event,
    decode,
    encode,
    enqueued,
)

__all__ = [
    "EVENT_NAMES",
    "JOB_ACTIVE",
    "JOB_BLOCKED",
    "JOB_CANCELLED",
    "JOB_CLAIM_LOST",
    "JOB_COMPLETED",
    "JOB_DEDUPLICATED",
    "JOB_DELAYED",
    "JOB_EXPIRED",
    "JOB_FAILED",
    "JOB_PROGRESS",
    "JOB_REMOVED",
    "JOB_RETRYING",
    "JOB_STALLED",
    "JOB_WAITING",
    "QUEUE_PAUSED",
    "QUEUE_RESUMED",
    "WORKER_OFFLINE",
    "WORKER_ONLINE",
    "Event",
    "Subscription",
    "decode",
    "encode",
    "enqueued",
]


class Subscription:
    """Decoded events from every process. Safe to wait on with a timeout: a cancelled wait
    loses nothing, because a pump task reads the backend and buffers what arrives."""

    def __init__(self, raw: AsyncGenerator[bytes, None]) -> None:
        self._raw = raw
        self._inbox: asyncio.Queue[Event | None] = asyncio.Queue()
        self._pump = asyncio.create_task(self._run(), name="relaymq-subscription")

    async def _run(self) -> None:
        try:
            async for message in self._raw:
                for event in decode(message):
                    self._inbox.put_nowait(event)
        finally:
            self._inbox.put_nowait(None)  # the backend ended the subscription

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        event = await self._inbox.get()
        if event is None:
            self._inbox.put_nowait(None)
            raise StopAsyncIteration
        return event

    async def aclose(self) -> None:
        self._pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._pump
        await self._raw.aclose()
