"""Redis on 127.0.0.1:6379 (the CI service); every test gets its own key prefix."""

from __future__ import annotations

import os
from pathlib import Path

from relaymq.backends.base import Backend
from relaymq.records.store import Clock
from tests.redis import support
from tests.support.cases import BackendCase, Damage

URL = os.environ.get("RELAYMQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


async def make(clock: Clock | None, tmp: Path) -> Backend:
    return await support.make(URL, clock, tmp)


async def corrupt(backend: Backend, queue: str, job_id: str, damage: Damage = "field") -> None:
    await support.corrupt(backend, queue, job_id, damage)


CASE = BackendCase(
    name="redis",
    make=make,
    unavailable=lambda: support.unavailable(URL),
    corrupt=corrupt,
    url=lambda tmp: f"{URL}?prefix={support.test_prefix(tmp)}",
)
