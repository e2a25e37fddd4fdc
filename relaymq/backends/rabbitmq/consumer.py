"""One broker consumer per relaymq queue: it buffers pushed deliveries until a claim takes them.

Prefetch policy: each queue's consumer has its own channel whose prefetch (``basic.qos`` with
``global``, so it can grow while the consumer runs) is the largest ``limit`` any claim on that
queue has asked for, and at least the URL's ``prefetch``. A worker claims with limit = its free
slots, so its prefetch is its concurrency: the broker never pushes more deliveries than the
worker could start at once, and the rest stay ready for other workers.

Buffered deliveries are unacknowledged until a claim settles them: claimed or stale ones are
acknowledged, deliveries of a paused queue are kept. When the connection drops, the broker
requeues every unacknowledged delivery, so the buffer of a closed channel is thrown away.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aio_pika
import aiormq
from aio_pika.abc import AbstractIncomingMessage, AbstractRobustChannel, AbstractRobustConnection

from relaymq.backends.rabbitmq import topology
from relaymq.errors import CorruptRecordError

FILL_DEADLINE = 1.0
"""Longest a claim waits for deliveries that the broker reported ready."""


@dataclass(order=True, slots=True)
class Delivery:
    priority: int
    arrival: int
    job_id: str = field(compare=False)
    token: int = field(compare=False)
    message: AbstractIncomingMessage = field(compare=False)

    @property
    def live(self) -> bool:
        """False once the channel it came on is gone (the broker has requeued it)."""
        return _channel_open(self.message)


def _channel_open(message: AbstractIncomingMessage) -> bool:
    try:
        message.channel  # noqa: B018 - raises once the channel is closed
    except aiormq.exceptions.ChannelInvalidStateError:
        return False
    return True


class Consumer:
    """The consumer of one broker queue and the deliveries it has buffered."""

    def __init__(
        self,
        connection: AbstractRobustConnection,
        name: str,
        arguments: dict[str, Any],
        on_arrival: Callable[[], None],
    ) -> None:
        self.name = name
        self.prefetch = 0
        self.paused_hint = False
        """Set when a claim found the queue paused; the next claim asks the store first."""
        self.bad_messages = 0
        self._connection = connection
        self._arguments = arguments
        self._on_arrival = on_arrival
        self._channel: AbstractRobustChannel | None = None
        self._heap: list[Delivery] = []
        self._arrivals = itertools.count()
        self._arrived = asyncio.Event()

    async def start(self, prefetch: int) -> None:
        channel = await self._connection.channel(publisher_confirms=False)
        assert isinstance(channel, aio_pika.RobustChannel)
        self._channel = channel
        self.prefetch = prefetch
        await channel.set_qos(prefetch_count=prefetch, global_=True)
        queue = await channel.declare_queue(self.name, durable=True, arguments=self._arguments)
        channel.reopen_callbacks.add(self._on_reopen)
        await queue.consume(self._on_message)

    async def grow(self, prefetch: int) -> None:
        """Raise the prefetch (a claim asked for more than it)."""
        if prefetch > self.prefetch and self._channel is not None:
            self.prefetch = prefetch
            await self._channel.set_qos(prefetch_count=prefetch, global_=True)

    async def close(self) -> None:
        if self._channel is not None:
            with contextlib.suppress(Exception):
                await self._channel.close()
        self._heap.clear()

    # -- deliveries -------------------------------------------------------------------------

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        try:
            job_id, token, priority = topology.decode(message.body)
        except CorruptRecordError:
            self.bad_messages += 1
            await ack([message])
            return
        heapq.heappush(self._heap, Delivery(priority, next(self._arrivals), job_id, token, message))
        self._arrived.set()
        self._on_arrival()

    def _on_reopen(self, *_: Any) -> None:
        self._heap.clear()  # the broker requeued them when the old channel closed

    @property
    def buffered(self) -> int:
        return len(self._heap)

    def take(self, limit: int) -> list[Delivery]:
        """Up to ``limit`` live deliveries, by priority then arrival, one per job."""
        taken: list[Delivery] = []
        seen: set[str] = set()
        deferred: list[Delivery] = []
        while self._heap and len(taken) < limit:
            d = heapq.heappop(self._heap)
            if not d.live:
                continue
            if d.job_id in seen:
                deferred.append(d)  # a duplicate: offered again next time (then stale)
                continue
            seen.add(d.job_id)
            taken.append(d)
        for d in deferred:
            heapq.heappush(self._heap, d)
        return taken

    def give_back(self, deliveries: list[Delivery]) -> None:
        for d in deliveries:
            heapq.heappush(self._heap, d)

    async def fill(self, want: int) -> None:
        """Make sure every delivery the broker has for us right now is in the buffer.

        Returns once ``want`` deliveries are buffered, the prefetch is used up, or the broker
        reports nothing ready. The broker sends a queue's deliveries on the consumer's channel
        before the reply to any later method on that channel, so when a passive declare says
        nothing is ready, a second one proves that what was dispatched before has arrived.
        """
        if self._channel is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FILL_DEADLINE
        while self.buffered < want and self.buffered < self.prefetch:
            channel = await self._channel.get_underlay_channel()
            self._arrived.clear()
            # Shielded: aiormq closes a channel whose RPC is cancelled midway.
            declared = await asyncio.shield(channel.queue_declare(self.name, passive=True))
            if not declared.message_count:
                await asyncio.shield(channel.queue_declare(self.name, passive=True))
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, 0.05)):
                    await self._arrived.wait()

    def has_work(self) -> bool:
        return bool(self._heap) and not self.paused_hint


async def ack(messages: list[AbstractIncomingMessage]) -> None:
    """Acknowledge ``messages``; one whose channel is gone was requeued by the broker already."""
    for message in messages:
        with contextlib.suppress(aiormq.exceptions.AMQPError, RuntimeError):
            await message.ack()
