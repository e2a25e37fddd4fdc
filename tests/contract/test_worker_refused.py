"""Every backend keeps a worker's refused queues on its registration (``WorkerInfo.refused``,
``relaymq workers``), and clears them when the worker registers again without them."""

from __future__ import annotations

import dataclasses

from relaymq import registry
from relaymq.backends.base import Backend
from relaymq.records.store import WorkerInfo
from relaymq.testing import FakeClock


async def test_a_worker_record_shows_its_refused_queues(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    why = "the RabbitMQ queue 'relaymq.x' already exists with arguments that differ"
    info = WorkerInfo(f"wk-{q}", (q, q + "-x"), 4, "host", 123, clock(), refused=((q + "-x", why),))
    await registry.register(backend, info, ttl=30)
    listed = {w.id: w for w in await registry.list_workers(backend)}
    assert listed[info.id].refused == ((q + "-x", why),)
    await registry.register(backend, dataclasses.replace(info, refused=()), ttl=30)
    listed = {w.id: w for w in await registry.list_workers(backend)}
    assert listed[info.id].refused == ()
    await registry.unregister(backend, info.id)
