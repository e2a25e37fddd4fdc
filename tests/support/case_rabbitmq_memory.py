"""RabbitMQ over an in-process memory store: for developing the backend, not listed in
CASE_MODULES (a memory store is process-local, so it has no URL for other processes)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from relaymq.backends.base import Backend
from relaymq.backends.memory import InMemoryBackend
from relaymq.records.store import Clock
from tests.rabbitmq import support
from tests.support.cases import BackendCase

_stores: dict[Path, InMemoryBackend] = {}


async def make(clock: Clock | None, tmp: Path) -> Backend:
    store = _stores.setdefault(tmp, InMemoryBackend(clock=clock))
    backend = support.TestRabbitMQBackend(support.url(tmp, "memory://"), clock=clock, store=store)
    await backend.connect()
    return backend


CASE = replace(
    support.case("rabbitmq_memory", BackendCase("memory", make), lambda tmp: "memory://"),
    make=make,
    url=None,
    corrupt=None,
)
