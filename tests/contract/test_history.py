"""The per-minute history every backend keeps (the dashboard's charts): counts add up across
handles and processes, read back in minute order per queue, and go with pruning and with
``obliterate``."""

from __future__ import annotations

import asyncio

from relaymq.backends.base import Backend
from relaymq.records.store import Tally
from tests.conftest import MakeBackend
from tests.support.jobs import new_job

DAY = 1440
NOW = 29_000_000  # a minute in 2025: the tests choose their minutes, not the clock


async def test_tallies_add_up_per_minute_and_read_back_in_order(backend: Backend, q: str) -> None:
    await backend.add_tallies(
        [Tally(q, NOW + 1, completed=2), Tally(q, NOW, retried=1), Tally(q, NOW + 1, failed=1)]
    )
    await backend.add_tallies([Tally(q, NOW, completed=5), Tally(q, NOW + 3, completed=1)])
    assert await backend.tallies(q, NOW) == [
        Tally(q, NOW, completed=5, retried=1),
        Tally(q, NOW + 1, completed=2, failed=1),
        Tally(q, NOW + 3, completed=1),
    ]
    assert await backend.tallies(q, NOW + 2) == [Tally(q, NOW + 3, completed=1)]
    assert await backend.tallies(q, NOW + 4) == []
    await backend.add_tallies([])  # nothing to add: no error


async def test_a_queues_history_is_its_own(backend: Backend, q: str) -> None:
    other = q + "-other"
    await backend.add_tallies([Tally(q, NOW, completed=1), Tally(other, NOW, failed=3)])
    assert await backend.tallies(q, 0) == [Tally(q, NOW, completed=1)]
    assert await backend.tallies(other, 0) == [Tally(other, NOW, failed=3)]
    assert await backend.tallies(q + "-none", 0) == []


async def test_concurrent_adds_from_two_handles_lose_nothing(
    make_backend: MakeBackend, q: str
) -> None:
    a, b = await make_backend(), await make_backend()
    one = [Tally(q, NOW, completed=1)]
    await asyncio.gather(*(h.add_tallies(one) for _ in range(20) for h in (a, b)))
    assert await a.tallies(q, NOW) == [Tally(q, NOW, completed=40)]
    assert await b.tallies(q, NOW) == [Tally(q, NOW, completed=40)]


async def test_pruning_forgets_old_minutes_of_every_queue(backend: Backend, q: str) -> None:
    other = q + "-other"
    old, kept = NOW - 3 * DAY, NOW
    await backend.add_tallies(
        [
            Tally(q, old, completed=1),
            Tally(other, old, completed=1),
            Tally(q, kept, completed=2),
            Tally(other, kept + 1, failed=1),
        ]
    )
    await backend.prune_tallies(NOW - DAY)  # keeps the minutes from NOW - DAY on (at least)
    assert await backend.tallies(q, 0) == [Tally(q, kept, completed=2)]
    assert await backend.tallies(other, 0) == [Tally(other, kept + 1, failed=1)]


async def test_obliterate_forgets_the_queues_history(backend: Backend, q: str) -> None:
    await backend.enqueue([new_job(q)])
    await backend.add_tallies([Tally(q, NOW, completed=1), Tally(q, NOW - 2 * DAY, failed=1)])
    await backend.obliterate(q)
    assert await backend.tallies(q, 0) == []


async def test_a_tasks_minutes_keep_their_durations_apart_from_the_queues_counts(
    backend: Backend, q: str
) -> None:
    a, b = "app.tasks:send", "app.tasks:report.build"  # read back by minute, then task
    await backend.add_tallies(
        [
            Tally(q, NOW, completed=2, task=a, run_times=(0, 2), pickups=(1, 0, 1)),
            Tally(q, NOW, failed=1),  # the queue's own count (a dependency failure)
            Tally(q, NOW, completed=1, task=b, run_times=(1,)),
        ]
    )
    await backend.add_tallies(
        [
            Tally(q, NOW, retried=1, task=a, run_times=(0, 0, 0, 4), pickups=(2,)),
            Tally(q, NOW + 1, completed=1, task=a, run_times=(0, 1)),
        ]
    )
    assert await backend.tallies(q, NOW) == [
        Tally(q, NOW, failed=1),
        Tally(q, NOW, completed=1, task=b, run_times=(1,)),
        Tally(q, NOW, completed=2, retried=1, task=a, run_times=(0, 2, 0, 4), pickups=(3, 0, 1)),
        Tally(q, NOW + 1, completed=1, task=a, run_times=(0, 1)),
    ]
    await backend.add_tallies([Tally(q, NOW + 3 * DAY, completed=1, task=b)])
    await backend.prune_tallies(NOW + 2 * DAY)  # a task's minutes go with the queue's
    assert await backend.tallies(q, 0) == [Tally(q, NOW + 3 * DAY, completed=1, task=b)]
    await backend.obliterate(q)
    assert await backend.tallies(q, 0) == []
