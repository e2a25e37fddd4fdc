"""Shared by the RabbitMQ cases: one broker-queue prefix per test, queues deleted afterwards.

A case is RabbitMQ on 127.0.0.1:5672 (``RELAYMQ_TEST_AMQP_URL``) over a metadata store given
by another case; the store case's ``url(tmp)`` is that test's store namespace.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, urlsplit

from relaymq.backends import from_url
from relaymq.backends.base import Backend
from relaymq.backends.rabbitmq import RabbitMQBackend
from relaymq.records.store import Clock
from tests.support.cases import BackendCase, Damage

AMQP_URL = os.environ.get("RELAYMQ_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
SAFETY_EXPIRES_MS = 15 * 60 * 1000
"""``x-expires`` on test queues: the broker drops what a crashed test could not delete."""


def prefix(tmp: Path) -> str:
    return "t-" + hashlib.sha1(str(tmp).encode()).hexdigest()[:12] + "."


def url(tmp: Path, store_url: str, amqp_url: str = AMQP_URL) -> str:
    joint = "&" if "?" in amqp_url else "?"  # (RELAYMQ_TEST_AMQP_URL=...?queue_type=quorum)
    return (
        f"{amqp_url}{joint}prefix={prefix(tmp)}&queue_expires={SAFETY_EXPIRES_MS}"
        f"&store={quote(store_url, safe='')}"
    )


class TestRabbitMQBackend(RabbitMQBackend):
    """Deletes the test's broker queues when the last handle of the test closes."""

    open_handles: dict[str, list[TestRabbitMQBackend]] = {}

    async def connect(self) -> None:
        await super().connect()
        self.open_handles.setdefault(self.options.prefix, []).append(self)

    async def close(self) -> None:
        handles = self.open_handles.get(self.options.prefix, [])
        if self in handles:
            handles.remove(self)
        if not handles and self._broker.connection is not None:
            names = set(self.broker_queues)
            for other in _closed.pop(self.options.prefix, []):
                names |= other
            self._broker.declared = names
            for inbox in self._inboxes.values():
                await inbox.close()
            self._inboxes.clear()
            try:
                await self.delete_broker_queues()
            finally:
                await super().close()
            return
        _closed.setdefault(self.options.prefix, []).append(set(self.broker_queues))
        await super().close()


_closed: dict[str, list[set[str]]] = {}


def broker_unavailable(amqp_url: str = AMQP_URL) -> str | None:
    parts = urlsplit(amqp_url)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), 2).close()
    except OSError as e:
        return f"no RabbitMQ at {parts.hostname}:{parts.port}: {e}"
    return None


def case(name: str, store: BackendCase, store_url: Callable[[Path], str]) -> BackendCase:
    async def make(clock: Clock | None, tmp: Path) -> Backend:
        store = from_url(store_url(tmp), clock=clock)
        backend = TestRabbitMQBackend(url(tmp, store_url(tmp)), store=store, clock=clock)
        await backend.connect()
        return backend

    def unavailable() -> str | None:
        return broker_unavailable() or store.unavailable()

    async def corrupt(backend: Backend, queue: str, job_id: str, damage: Damage = "field") -> None:
        assert isinstance(backend, RabbitMQBackend) and store.corrupt is not None
        await store.corrupt(backend.store, queue, job_id, damage)

    return BackendCase(
        name=name,
        make=make,
        unavailable=unavailable,
        corrupt=corrupt if store.corrupt is not None else None,
        url=lambda tmp: url(tmp, store_url(tmp)),
    )
