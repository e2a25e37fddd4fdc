"""The queue page's search: by id prefix, task, age and argument values, with the pages
keeping the search; a bounded scan said where the backend has no query for it; a typo said,
not a 400; bulk "every" offered only where it acts on what is listed."""

from __future__ import annotations

import pytest

from relaymq import Queue
from relaymq.backends.memory import InMemoryBackend
from relaymq.bulk import Found
from tests.dashboard.support import client
from tests.support.jobs import queue_name
from tests.tasks import add


@pytest.fixture
async def memory() -> InMemoryBackend:
    backend = InMemoryBackend()
    await backend.connect()
    return backend


async def test_the_queue_page_searches_by_arguments_and_pages_with_the_search(
    memory: InMemoryBackend,
) -> None:
    q = Queue(queue_name(), memory)
    handles = await q.add_bulk([add.call(i % 3, i) for i in range(7)])  # a = 0, 1, 2, 0, ...
    ids = [h.id for h in handles]
    async with client(memory, page_size=2) as c:
        first = (await c.get(f"/queues/{q.name}?args=args.0%3D0")).text
        second = (await c.get(f"/queues/{q.name}?args=args.0%3D0&page=2")).text
        typo = await c.get(f"/queues/{q.name}?args=args%3D0")
        by_prefix = (await c.get(f"/queues/{q.name}?id={ids[5][:12]}")).text
    assert ids[0] in first and ids[3] in first and ids[6] not in first
    assert "page=2" in first and "args=args.0%3D0" in first  # the next page keeps the search
    assert ids[6] in second and ids[0] not in second
    assert 'name="every"' not in first  # "every waiting job" would not be what is listed
    assert typo.status_code == 200 and "args takes a position first (args.0=...)" in typo.text
    assert ids[5] in by_prefix and "scan-note" not in by_prefix  # memory: its own query


async def test_a_bounded_scan_is_said_on_the_page(
    memory: InMemoryBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = Queue(queue_name(), memory)
    await q.add_bulk([add.call(1, 1)])

    async def scanned(self: Queue, *args: object) -> Found:
        return Found([], scanned=10_000, cut=True)

    monkeypatch.setattr(Queue, "search", scanned)  # what a Redis backend's answer says
    async with client(memory) as c:
        page = (await c.get(f"/queues/{q.name}?args=args.0%3D1")).text
    assert "read 10000 waiting jobs and checked them itself, and stopped there" in page
