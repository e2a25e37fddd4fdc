"""Shared by the dashboard tests: an app over a backend, its CSRF value, jobs in each state."""

from __future__ import annotations

import re
from typing import Any

import httpx

from relaymq import Queue
from relaymq.backends.base import Backend
from relaymq.dashboard import create_app
from relaymq.job import Job
from relaymq.records.store import Outcome, Settle
from tests.tasks import add

ERROR = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: card declined'


def client(backend: Backend, **options: Any) -> httpx.AsyncClient:
    app = create_app(backend, **options)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://dash")


async def csrf(c: httpx.AsyncClient, page: str = "/") -> str:
    """The CSRF value of ``page``'s forms (its cookie is in the client from then on)."""
    r = await c.get(page)
    assert r.status_code == 200, r.text
    found = re.search(r'name="csrf" value="([^"]+)"', r.text)
    assert found, "the page has no form with a CSRF field"
    assert c.cookies.get("relaymq_csrf") == found.group(1)
    return found.group(1)


async def waiting(queue: Queue, n: int) -> list[str]:
    return [h.id for h in await queue.add_bulk([add.call(i, i) for i in range(n)])]


async def failed(queue: Queue, n: int) -> list[Job]:
    """``n`` jobs failed for good (in the dead-letter queue), each with a traceback; call it
    while ``queue`` has nothing else waiting."""
    ids = await waiting(queue, n)
    batch = await queue.backend.claim([queue.name], "w-test", n)
    assert sorted(j.id for j in batch.jobs) == sorted(ids)
    settles = [Settle(j.claim, Outcome.FAIL, error=ERROR) for j in batch.jobs]
    assert all(await queue.backend.settle(settles))
    return [j for j in await queue.get_jobs(ids) if j is not None]
