"""Cross-process events on MongoDB without change streams: a trimmed collection, tailed by id.

``publish`` reserves a dense range of ids from ``counters`` (one ``$inc``) and inserts the
events under those ids (one ``insert_many``): 2 round trips per batch. Every
``TRIM_EVERY`` ids it deletes all but the newest ``keep`` events, so the collection stays small.

A subscriber remembers the last id it yielded and polls for greater ones. Because ids are dense,
a hole means a publisher has reserved an id and not yet inserted it; the subscriber waits for
the hole to fill (up to ``gap_timeout``) so a slow publisher's events are not skipped, then
moves past it (a publisher that died mid-call, or events trimmed before they were read). A
subscription outlives server restarts: it retries on connection errors until closed.

A ``Subscription`` tails in a task of its own into a bounded inbox, so a reader that gives up
waiting (``asyncio.timeout`` around ``anext``) cancels only its wait: a plain async generator
would be finished by that cancellation and every later ``anext`` would end at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any, Final

from bson import Binary
from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ConnectionFailure

from relaymq.backends.mongodb.indexes import COUNTERS, EVENTS
from relaymq.errors import BackendError

COUNTER_ID: Final = "events"
TRIM_EVERY: Final = 100
READ_BATCH: Final = 500
INBOX: Final = 10_000
"""Events a subscription holds for a slow reader before it stops reading the log."""


class EventLog:
    def __init__(
        self,
        db: AsyncDatabase[dict[str, Any]],
        *,
        keep: int,
        poll_interval: float,
        gap_timeout: float,
        retry_interval: float = 1.0,
    ) -> None:
        self._events = db[EVENTS]
        self._counters = db[COUNTERS]
        self._keep = keep
        self._poll = poll_interval
        self._gap_timeout = gap_timeout
        self._retry = retry_interval

    async def publish(self, bodies: Sequence[bytes]) -> None:
        if not bodies:
            return
        n = len(bodies)
        counter = await self._counters.find_one_and_update(
            {"_id": COUNTER_ID},
            {"$inc": {"n": n}},
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        last = int(counter["n"]) if counter else n
        first = last - n + 1
        await self._events.insert_many(
            [{"_id": first + i, "body": Binary(body)} for i, body in enumerate(bodies)]
        )
        if (first - 1) // TRIM_EVERY != last // TRIM_EVERY and last > self._keep:
            await self._events.delete_many({"_id": {"$lte": last - self._keep}})

    async def position(self) -> int:
        """The id of the newest event published so far (a subscription starts after it)."""
        counter = await self._counters.find_one({"_id": COUNTER_ID})
        return int(counter["n"]) if counter else 0

    async def tail(self, after: int) -> AsyncGenerator[bytes, None]:
        """Every event with an id greater than ``after``, in id order, until closed."""
        last = after
        hole_since: float | None = None
        while True:
            try:
                cursor = self._events.find({"_id": {"$gt": last}}).sort("_id", 1)
                docs = await cursor.limit(READ_BATCH).to_list()
            except ConnectionFailure:
                await asyncio.sleep(self._retry)  # the server is away: keep the subscription
                continue
            for doc in docs:
                event_id = doc["_id"]
                if not isinstance(event_id, int):
                    continue
                if event_id != last + 1:
                    hole_since = hole_since or time.monotonic()
                    if time.monotonic() - hole_since < self._gap_timeout:
                        break  # a publisher is between reserving this id and inserting it
                hole_since = None
                last = event_id
                body = doc.get("body")
                if isinstance(body, bytes):
                    yield bytes(body)
            if len(docs) < READ_BATCH or hole_since is not None:
                await asyncio.sleep(self._poll)


class Subscription(AsyncGenerator[bytes, None]):
    """Events from ``EventLog.tail``, read ahead by a task; ``aclose`` ends it."""

    def __init__(self, tail: AsyncGenerator[bytes, None]) -> None:
        self._tail = tail
        self._inbox: asyncio.Queue[bytes | BaseException] = asyncio.Queue(INBOX)
        self._feeder: asyncio.Task[None] | None = asyncio.create_task(self._feed())

    async def _feed(self) -> None:
        try:
            async for body in self._tail:
                await self._inbox.put(body)
        except Exception as e:  # not a connection loss (those are retried): tell the reader
            await self._inbox.put(e)

    async def asend(self, value: None) -> bytes:
        if self._feeder is None:
            raise StopAsyncIteration
        item = await self._inbox.get()  # cancelling this wait loses nothing
        if isinstance(item, BaseException):
            await self.aclose()
            raise BackendError(f"event subscription failed: {item}") from item
        return item

    async def athrow(self, typ: Any, val: Any = None, tb: Any = None) -> bytes:
        await self.aclose()
        raise val if isinstance(val, BaseException) else typ

    async def aclose(self) -> None:
        feeder, self._feeder = self._feeder, None
        if feeder is not None:
            feeder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeder
            await self._tail.aclose()
