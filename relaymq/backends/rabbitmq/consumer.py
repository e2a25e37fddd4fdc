"""The deliveries of one backend handle: one channel, one consumer per relaymq queue.

Window policy (a worker never holds a delivery it cannot start now): every delivery is
unacknowledged from the moment the broker pushes it until the worker is done with it: a stale
one is acknowledged when a claim finds it stale, a claimed one only when its job is settled or
its claim is found lost. The channel's prefetch (``basic.qos``, global: one limit for every
consumer on the channel) is the *window*: each claim sets it to the deliveries held plus the
claim's ``limit`` (the worker's free slots), and settling ``k`` jobs lowers it by ``k`` before
their acknowledgements go out. So the broker pushes a handle no more deliveries than the free
slots its worker last asked for: a busy worker is pushed nothing, and while a frozen worker
holds a job, recovery's replacement delivery goes to another worker.

A paused queue's consumer is cancelled and its buffered deliveries requeued, so they neither
take the window nor wait in this process; a later claim asks the store and consumes again once
the queue is resumed. When the channel closes, the broker requeues every unacknowledged
delivery, so what was buffered or held on it is forgotten.

Quorum queues refuse a channel-wide prefetch. On them (``per_consumer``) each consumer has a
fixed prefetch of ``floor`` deliveries and a claimed delivery is acknowledged at once (its job
is held by the claim in the metadata store, whose stalled recovery publishes it again if the
worker dies): a worker holds at most ``floor`` deliveries per broker queue that it has not
started, and no window is moved.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import aio_pika
import aiormq
from aio_pika.abc import AbstractRobustChannel, AbstractRobustConnection
from aiormq.abc import DeliveredMessage

from relaymq.backends.rabbitmq import topology
from relaymq.errors import BackendUnavailableError, CorruptRecordError

PARK_MAX = 1000
"""Held-back deliveries parked per queue at most (``QueueDeliveries.parked``)."""
FILL_DEADLINE = 1.0
"""Longest a claim waits for deliveries that the broker reported ready."""

Key = tuple[str, str, int]
"""A claimed delivery: (queue, job id, token)."""


@dataclass(order=True, slots=True)
class Delivery:
    priority: int
    arrival: int
    job_id: str = field(compare=False)
    token: int = field(compare=False)
    message: DeliveredMessage = field(compare=False)

    @property
    def live(self) -> bool:
        """False once the channel it came on is gone (the broker has requeued it)."""
        return not self.message.channel.is_closed


class QueueDeliveries:
    """What the broker pushed for one relaymq queue and no claim has taken yet."""

    def __init__(self, queue: str, name: str) -> None:
        self.queue = queue
        self.name = name
        """The broker queue."""
        self.paused = False
        """A claim found the queue paused: not consuming; the next claim asks the store."""
        self.tag: str | None = None
        self._heap: list[Delivery] = []
        self.parked: list[Delivery] = []
        """Deliveries the queue's limits held back (their key used its window): kept aside,
        unacknowledged, and offered first on each claim, so the deliveries behind them are
        taken meanwhile (``PARK_MAX`` at most; beyond it they go back to the broker)."""

    @property
    def buffered(self) -> int:
        return len(self._heap)

    def unpark(self) -> list[Delivery]:
        """The parked deliveries still live, taken out to be offered again."""
        out, self.parked = [d for d in self.parked if d.live], []
        return out

    def has_work(self) -> bool:
        return bool(self._heap) and not self.paused

    def push(self, d: Delivery) -> None:
        heapq.heappush(self._heap, d)

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

    def give_back(self, deliveries: Iterable[Delivery]) -> None:
        for d in deliveries:
            heapq.heappush(self._heap, d)

    def forget(self) -> list[Delivery]:
        out, self._heap, self.parked = [*self._heap, *self.parked], [], []
        return out


class Inbox:
    """The deliveries channel of one handle, its window, and the deliveries it holds."""

    def __init__(
        self,
        connection: AbstractRobustConnection,
        floor: int,
        on_arrival: Callable[[], None],
        per_consumer: bool = False,
    ) -> None:
        self.floor = floor
        self.per_consumer = per_consumer
        """Quorum queues: a prefetch per consumer, claimed deliveries acknowledged at once."""
        """The smallest window (the URL's ``prefetch``; 0 would mean no limit at all)."""
        self.window = 0
        self.bad_messages = 0
        self._connection = connection
        self._on_arrival = on_arrival
        self._channel: AbstractRobustChannel | None = None
        self._queues: dict[str, QueueDeliveries] = {}
        self._held: dict[Key, tuple[DeliveredMessage | None, int]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._arrivals = itertools.count()
        self._arrived = asyncio.Event()
        self._window_lock = asyncio.Lock()

    async def open(self) -> None:
        if self._connection.transport is None:  # aio-pika would raise a bare RuntimeError
            raise BackendUnavailableError("RabbitMQ connection is down; reconnecting")
        channel = await self._connection.channel(publisher_confirms=False)
        assert isinstance(channel, aio_pika.RobustChannel)
        channel.reopen_callbacks.add(self._on_reopen)
        self._channel = channel
        if self.per_consumer:  # for every consumer started on the channel from now on
            await channel.set_qos(prefetch_count=self.floor, global_=False)
            self.window = self.floor
        else:
            await self._set_window(self.floor)

    async def close(self) -> None:
        for task in self._background:
            task.cancel()
        if self._channel is not None:
            with contextlib.suppress(Exception):
                await self._channel.close()
        self._queues.clear()
        self._held.clear()

    def get(self, queue: str) -> QueueDeliveries | None:
        return self._queues.get(queue)

    async def consume(self, queue: str, name: str) -> QueueDeliveries:
        """Start consuming the broker queue ``name`` (declared already) for ``queue``.

        The consumer lives on the underlying aiormq channel (no per-delivery message object
        or task of aio-pika's); after a reconnect ``_on_reopen`` starts it again."""
        qd = self._queues.get(queue) or QueueDeliveries(queue, name)
        raw = await self._raw()
        ok = await raw.basic_consume(name, functools.partial(self._on_message, qd))
        qd.tag = ok.consumer_tag
        qd.paused = False
        self._queues[queue] = qd
        return qd

    async def pause(self, qd: QueueDeliveries, kept: Iterable[Delivery]) -> None:
        """Stop consuming a paused queue and requeue what it buffered, for other consumers
        once the queue is resumed."""
        qd.paused = True
        if qd.tag is not None:
            with contextlib.suppress(aiormq.exceptions.AMQPError, RuntimeError):
                await (await self._raw()).basic_cancel(qd.tag)
            qd.tag = None
        for d in [*kept, *qd.forget()]:
            with contextlib.suppress(aiormq.exceptions.AMQPError, RuntimeError):
                await _settle(d.message, requeue=True)

    async def _raw(self) -> aiormq.abc.AbstractChannel:
        assert self._channel is not None, "open() first"
        return await self._channel.get_underlay_channel()

    # -- the window -------------------------------------------------------------------------

    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def room(self) -> int:
        """Deliveries the broker may still push before the window is full."""
        return (
            self.window - self.held - sum(q.buffered + len(q.parked) for q in self._queues.values())
        )

    def room_for(self, qd: QueueDeliveries) -> int:
        """Deliveries the broker may still push for ``qd``."""
        if self.per_consumer:
            return self.floor - qd.buffered - len(qd.parked)
        return self.room

    def window_for(self, limit: int) -> int:
        """The window a claim for ``limit`` jobs needs: the held and parked deliveries plus
        ``limit``."""
        if self.per_consumer:
            return self.window  # fixed per consumer
        parked = sum(len(q.parked) for q in self._queues.values())
        return max(self.floor, self.held + parked + limit)

    async def open_window(self, limit: int) -> None:
        """A claim for ``limit`` jobs: the window becomes ``window_for(limit)``."""
        await self._set_window(self.window_for(limit))

    def hold(self, claim: Key, d: Delivery, priority: int) -> None:
        """A delivery whose job a claim took: unacknowledged until that claim is settled
        (``per_consumer``: acknowledged by the claim; only its priority is kept)."""
        self._held[claim] = (None if self.per_consumer else d.message, priority)

    def priority(self, key: Key) -> int | None:
        held = self._held.get(key)
        return None if held is None else held[1]

    async def done(self, keys: Iterable[Key]) -> None:
        """The worker is done with these claims (settled, or lost): shrink the window by as
        many, so acknowledging them opens no room, then acknowledge them."""
        popped = filter(None, (self._held.pop(k, None) for k in keys))
        messages = [m for m, _ in popped if m is not None]
        # One that came on a closed channel was requeued by the broker already: nothing to
        # acknowledge, and no window to wait for while the connection is down (a settle waits
        # for this, and outcomes queue behind it).
        messages = [m for m in messages if not m.channel.is_closed]
        if not messages:
            return
        await self._set_window(max(self.floor, self.window - len(messages)))
        await ack(messages)

    async def _set_window(self, window: int) -> None:
        async with self._window_lock:
            if window == self.window or self._channel is None:
                return
            await self._channel.set_qos(prefetch_count=window, global_=True)
            self.window = window

    # -- deliveries -------------------------------------------------------------------------

    async def _on_message(self, qd: QueueDeliveries, message: DeliveredMessage) -> None:
        try:
            job_id, token, priority = topology.decode(message.body)
        except CorruptRecordError:
            self.bad_messages += 1
            await ack([message])
            return
        if qd.paused:  # pushed before the consumer was cancelled: let another take it
            with contextlib.suppress(aiormq.exceptions.AMQPError, RuntimeError):
                await _settle(message, requeue=True)
            return
        qd.push(Delivery(priority, next(self._arrivals), job_id, token, message))
        self._arrived.set()
        self._on_arrival()

    def _on_reopen(self, *_: Any) -> None:
        # The broker requeued every unacknowledged delivery when the old channel closed, and
        # the consumers went with it: consume again on the new one.
        for qd in self._queues.values():
            qd.forget()
            qd.tag = None
        self._held.clear()
        task = asyncio.create_task(self._consume_again(), name="relaymq-reconsume")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _consume_again(self) -> None:
        for qd in list(self._queues.values()):
            if not qd.paused:
                with contextlib.suppress(aiormq.exceptions.AMQPError, ConnectionError):
                    await self.consume(qd.queue, qd.name)

    async def fill(self, qd: QueueDeliveries, want: int) -> None:
        """Make sure every delivery the broker has for ``qd`` right now is buffered.

        Returns once ``want`` deliveries are buffered, the window is full, or the broker
        reports nothing ready. The broker sends a queue's deliveries on the consumer's channel
        before the reply to any later method on that channel, so when a passive declare says
        nothing is ready, a second one proves that what was dispatched before has arrived.
        """
        if self._channel is None or qd.paused:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FILL_DEADLINE
        while qd.buffered < want and self.room_for(qd) > 0:
            channel = await self._channel.get_underlay_channel()
            self._arrived.clear()
            # Shielded: aiormq closes a channel whose RPC is cancelled midway.
            declared = await asyncio.shield(channel.queue_declare(qd.name, passive=True))
            if not declared.message_count:
                await asyncio.shield(channel.queue_declare(qd.name, passive=True))
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, 0.05)):
                    await self._arrived.wait()


async def ack(messages: list[DeliveredMessage]) -> None:
    """Acknowledge ``messages``; one whose channel is gone was requeued by the broker already."""
    for message in messages:
        with contextlib.suppress(aiormq.exceptions.AMQPError, RuntimeError):
            await _settle(message)


async def _settle(message: DeliveredMessage, *, requeue: bool | None = None) -> None:
    """Ack (or with ``requeue``, nack) without waiting for the frame to be written: the
    broker learns in order, and a lost connection requeues whatever it did not learn."""
    tag = message.delivery_tag
    assert tag is not None
    if requeue is None:
        await message.channel.basic_ack(tag, wait=False)
    else:
        await message.channel.basic_nack(tag, requeue=requeue, wait=False)
