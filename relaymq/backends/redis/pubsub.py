"""Events across processes: one pub/sub channel per key prefix, a batch per message.

``publish`` sends a batch of events as ONE message (each event prefixed by its length), so a
worker's flush is one PUBLISH. A subscription's connection is driven by a reader task: after a
server restart it subscribes again as soon as the server is back, whether or not anyone is
iterating. Pub/sub is at most once: events published while a subscriber is disconnected are
not delivered to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Iterator, Sequence
from typing import Any

from redis import exceptions as rex

from relaymq.backends.redis.errors import UNAVAILABLE, translated
from relaymq.errors import BackendError, BackendUnavailableError


def frame(events: Sequence[bytes]) -> bytes:
    """A batch of events as one pub/sub message: each one prefixed by its 4-byte length."""
    return b"".join(len(e).to_bytes(4, "big") + e for e in events)


def _unframe(message: bytes) -> Iterator[bytes]:
    at = 0
    while at + 4 <= len(message):
        size = int.from_bytes(message[at : at + 4], "big")
        yield message[at + 4 : at + 4 + size]
        at += 4 + size


async def subscribe(client: Any, channel: str) -> AsyncGenerator[bytes, None]:
    """A live subscription to ``channel`` (confirmed by the server when this returns)."""
    pubsub = await _open(client, channel)
    inbox: asyncio.Queue[bytes] = asyncio.Queue()
    reader = asyncio.create_task(
        _read_events(client, channel, pubsub, inbox), name="relaymq-redis-sub"
    )
    return _Subscription(inbox, reader)


async def _read_events(client: Any, channel: str, pubsub: Any, inbox: asyncio.Queue[bytes]) -> None:
    ps = pubsub
    try:
        while True:
            try:
                message = await ps.get_message(ignore_subscribe_messages=True, timeout=1.0)
            except (*UNAVAILABLE, rex.RedisError):
                # Events published while the server is away are lost (pub/sub is at most
                # once); subscribe again as soon as it is back.
                await _close_pubsub(ps)
                ps = await _reopen(client, channel)
                continue
            if message is not None and message.get("type") in (b"message", "message"):
                for event in _unframe(message["data"]):
                    inbox.put_nowait(event)
    finally:
        await _close_pubsub(ps)


async def _open(client: Any, channel: str) -> Any:
    """A pub/sub connection subscribed to the events channel, confirmed by the server."""
    with translated("subscribe"):
        ps = client.pubsub()
        try:
            await ps.subscribe(channel)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                message = await ps.get_message(timeout=1.0)
                if message is not None and message.get("type") in (b"subscribe", "subscribe"):
                    return ps
            raise BackendUnavailableError("Redis did not confirm the subscription")
        except BaseException:
            await _close_pubsub(ps)
            raise


async def _reopen(client: Any, channel: str) -> Any:
    delay = 0.05
    while True:
        await asyncio.sleep(delay)
        try:
            return await _open(client, channel)
        except BackendError:
            delay = min(delay * 2, 1.0)


class _Subscription(AsyncGenerator[bytes, None]):
    """The iterator ``subscribe`` returns. Unlike an ``async def`` generator, a cancelled
    ``anext()`` (a caller's timeout) does not end it; only ``aclose()`` does."""

    def __init__(self, inbox: asyncio.Queue[bytes], reader: asyncio.Task[None]) -> None:
        self._inbox = inbox
        self._reader = reader

    async def asend(self, value: None) -> bytes:
        if self._reader.done() and self._inbox.empty():
            raise StopAsyncIteration
        return await self._inbox.get()

    async def athrow(self, *args: Any) -> bytes:
        await self.aclose()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)


async def _close_pubsub(ps: Any) -> None:
    with contextlib.suppress(rex.RedisError, OSError, RuntimeError):
        await ps.aclose()
