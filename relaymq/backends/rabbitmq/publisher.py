"""The broker side of the RabbitMQ backend: one robust connection, broker queues declared once
per handle, and deliveries published persistent with confirms.

A delivery is ``(queue, job id, token, priority)``. One the broker does not confirm (it is
down, a channel closed, a publish was refused) is kept and published again: after the
reconnect, and on a timer until it goes through. Its job is already stored, so nothing is lost,
at worst delivered later (a duplicate is harmless: only one token matches); beyond
``MAX_PENDING`` reconciliation republishes. Only a ``ConfigError`` (a queue declared with other
arguments) reaches the caller: trying again cannot fix it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import aio_pika
import aiormq
from aio_pika.abc import AbstractRobustChannel, AbstractRobustConnection

from relaymq.backends.rabbitmq import topology
from relaymq.backends.rabbitmq.config import Options
from relaymq.backends.rabbitmq.connection import connect
from relaymq.backends.rabbitmq.errors import guarded
from relaymq.errors import BackendUnavailableError, ConfigError

T = TypeVar("T")

Outgoing = tuple[str, str, int, int]
"""A delivery to publish: (queue, job id, token, priority)."""

PUBLISH_CHUNK = 2000
MAX_PENDING = 100_000
"""Unpublished deliveries kept for the reconnect; beyond that, reconciliation republishes."""
RETRY_PAUSES = (0.2, 0.5, 1.0, 2.0, 5.0)
"""Seconds between tries to publish what is pending (the last one repeats)."""


class Publisher:
    def __init__(self, options: Options, arguments: dict[str, Any]) -> None:
        self.options = options
        self.arguments = arguments
        """The broker queues' declaration arguments (priority, expiry)."""
        self.connection: AbstractRobustConnection | None = None
        self.declared: set[str] = set()
        """Broker queues this handle has declared."""
        self._channel: AbstractRobustChannel | None = None
        self._stale_channel = False
        self._side: aiormq.abc.AbstractChannel | None = None
        self._pending: list[Outgoing] = []
        self._retrying: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self.failures = 0
        """Publishes that failed and were kept for another try (for tests and operators)."""

    async def open(self) -> None:
        if self.connection is not None:
            return
        try:
            self.connection = await connect(self.options.broker_urls, self.options.timeout)
            channel = await self._open_channel()
        except (
            aiormq.exceptions.AuthenticationError,
            aiormq.exceptions.ProbableAuthenticationError,
        ) as e:
            raise ConfigError(
                f"RabbitMQ at {self._where()} refused the login of user {self._user()!r}: "
                "check the user name and password in the URL"
            ) from e
        except (aiormq.exceptions.AMQPError, ConnectionError, OSError) as e:
            reason = f"{type(e).__name__}: {e}" if str(e) else f"no answer ({type(e).__name__})"
            raise BackendUnavailableError(
                f"cannot reach RabbitMQ at {self._where()}: {reason}"
            ) from e
        self._channel = channel
        self.connection.reconnect_callbacks.add(self._on_reconnect)

    async def _open_channel(self) -> AbstractRobustChannel:
        assert self.connection is not None
        channel = await self.connection.channel(publisher_confirms=True, on_return_raises=True)
        assert isinstance(channel, aio_pika.RobustChannel)
        return channel

    async def close(self) -> None:
        if self._retrying is not None:
            self._retrying.cancel()
            self._retrying = None
        if self.connection is not None:
            with contextlib.suppress(Exception):
                await self.connection.close()
            self.connection = None

    def _where(self) -> str:
        return ",".join(
            f"{p.hostname or 'localhost'}:{p.port or 5672}"
            for p in map(urlsplit, self.options.broker_urls)
        )

    def _user(self) -> str:
        return unquote(urlsplit(self.options.broker_url).username or "guest")

    @property
    def unpublished(self) -> int:
        """Deliveries waiting for the broker to come back."""
        return len(self._pending)

    def names(self, queue: str) -> list[str]:
        """The broker queues of ``queue``: one, or one per priority band (0 first)."""
        o = self.options
        if o.queue_type != "quorum":
            return [topology.broker_name(o.prefix, queue)]
        return [topology.broker_name(o.prefix, queue, b) for b in range(o.priority_bands)]

    def name(self, queue: str, priority: int = 0) -> str:
        """The broker queue a delivery of ``priority`` goes to."""
        o = self.options
        if o.queue_type != "quorum":
            return topology.broker_name(o.prefix, queue)
        return topology.broker_name(
            o.prefix, queue, topology.band(priority, o.priority_bands, o.max_priority)
        )

    async def declare(self, queue: str) -> list[str]:
        """The broker queues of ``queue``, declared once per handle (durable queues persist)."""
        names = self.names(queue)
        for name in names:
            if name not in self.declared:
                await self.on_side_channel(self._declaring(name))
                self.declared.add(name)
        return names

    def _declaring(
        self, name: str
    ) -> Callable[[aiormq.abc.AbstractChannel], Awaitable[aiormq.spec.Queue.DeclareOk]]:
        return lambda channel: topology.declare(channel, name, self.arguments)

    async def ready_count(self, queue: str) -> int:
        """Messages ready in ``queue``'s broker queues (re-declared: the reply says how many;
        a queue declared with other arguments is the same ``ConfigError`` as at enqueue)."""
        ready = 0
        for name in self.names(queue):
            self.declared.discard(name)
            ok = await guarded(
                self.on_side_channel(self._declaring(name)), self.options.call_timeout
            )
            self.declared.add(name)
            ready += int(ok.message_count or 0)
        return ready

    async def on_side_channel(self, use: Callable[[aiormq.abc.AbstractChannel], Awaitable[T]]) -> T:
        """Run ``use`` on the side channel, kept apart because a failed declare closes its
        channel. Shielded: aiormq closes a channel whose RPC is cancelled midway."""
        assert self.connection is not None, "connect() first"
        if self._side is None or self._side.is_closed:
            transport = self.connection.transport
            if transport is None:
                raise BackendUnavailableError("RabbitMQ connection is down; reconnecting")
            self._side = await transport.connection.channel()
        return await asyncio.shield(use(self._side))

    async def publish(self, out: Sequence[Outgoing]) -> None:
        """Publish deliveries with confirms (and any still pending); keep what the broker did
        not confirm and try it again later. Raises only ``ConfigError``, for a queue declared
        with other arguments: its deliveries are dropped (their jobs stay stored, and
        reconciliation republishes them once the queue is fixed); the rest go out."""
        todo, self._pending = [*self._pending, *out], []
        if not todo:
            return
        try:
            refused = await guarded(self._publish_now(todo), self.options.call_timeout)
        except BaseException as e:  # kept: published again after a pause or the reconnect
            self._pending = [*todo, *self._pending][-MAX_PENDING:]
            if isinstance(e.__cause__, aiormq.exceptions.DeliveryError):
                # Refused (nacked): after a cluster node died, a channel can go on refusing
                # every publish to a quorum queue that has a new leader; a new channel does not.
                self._stale_channel = True
            if not isinstance(e, Exception):
                raise  # cancelled: what was taken is pending again
            self.failures += 1
            self._retry_later()
            return
        if refused is not None:
            raise refused

    def _retry_later(self) -> None:
        if self._retrying is None or self._retrying.done():
            self._retrying = asyncio.create_task(self._retry(), name="relaymq-republish")

    async def _retry(self) -> None:
        """Publish what is pending until nothing is: after a pause, or at once on a reconnect."""
        tries = 0
        while self._pending:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RETRY_PAUSES[min(tries, len(RETRY_PAUSES) - 1)]):
                    await self._kick.wait()
            self._kick.clear()
            tries += 1
            with contextlib.suppress(ConfigError):  # reconciliation reports it
                await self.publish([])

    async def _publish_now(self, todo: list[Outgoing]) -> ConfigError | None:
        """Publish ``todo``; the first ``ConfigError`` of a queue whose deliveries were dropped."""
        assert self._channel is not None, "connect() first"
        refused: ConfigError | None = None
        for queue in {q for q, _, _, _ in todo}:
            try:
                await self.declare(queue)
            except ConfigError as e:
                refused = refused or e
                todo = [item for item in todo if item[0] != queue]
        if self._stale_channel and self.connection is not None:
            self._stale_channel = False
            old, self._channel = self._channel, await self._open_channel()
            with contextlib.suppress(Exception):
                await old.close()
        async with asyncio.timeout(10):  # (asyncio.wait_for may swallow a cancel on 3.11)
            channel = await self._channel.get_underlay_channel()
        assert isinstance(channel, aiormq.Channel)
        for chunk in _chunks(todo, PUBLISH_CHUNK):
            await asyncio.gather(*(self._publish_one(channel, item) for item in chunk))
        return refused

    async def _publish_one(self, channel: aiormq.Channel, item: Outgoing) -> None:
        queue, job_id, token, priority = item
        properties = aiormq.spec.Basic.Properties(
            delivery_mode=2,
            priority=topology.broker_priority(priority, self.options.max_priority),
            message_id=f"{token}:{job_id}",  # (else aiormq makes a random UUID per message)
        )
        name = self.name(queue, priority)
        body = topology.encode(job_id, token, priority)
        try:  # wait=False: not for the write, only for the broker's confirm
            await channel.basic_publish(
                body, routing_key=name, properties=properties, mandatory=True, wait=False
            )
        except aiormq.exceptions.PublishError:  # the queue vanished: declare it and go again
            self.declared.discard(name)
            await self.declare(queue)
            await channel.basic_publish(
                body, routing_key=name, properties=properties, mandatory=True, wait=False
            )

    def _on_reconnect(self, *_: Any) -> None:
        if self._pending:
            self._kick.set()
            self._retry_later()


def _chunks(items: list[Outgoing], size: int) -> Iterator[list[Outgoing]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
