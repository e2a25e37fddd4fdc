"""The local 3-master Redis Cluster (scripts/services.d/redis-cluster.sh); a key prefix per test."""

from __future__ import annotations

import os
from pathlib import Path

from relaymq.backends.base import Backend
from relaymq.records.store import Clock
from tests.redis import support
from tests.support.cases import BackendCase, Damage

URL = os.environ.get("RELAYMQ_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101")


async def make(clock: Clock | None, tmp: Path) -> Backend:
    return await support.make(URL, clock, tmp)


async def corrupt(backend: Backend, queue: str, job_id: str, damage: Damage = "field") -> None:
    await support.corrupt(backend, queue, job_id, damage)


CASE = BackendCase(
    name="redis_cluster",
    make=make,
    unavailable=lambda: support.unavailable(URL),
    corrupt=corrupt,
    url=lambda tmp: f"{URL}?prefix={support.test_prefix(tmp)}",
)
