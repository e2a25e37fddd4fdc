"""Stored schedules on every backend: the upsert that keeps an unchanged schedule's state, the
compare-and-set that moves a schedule past its ticks, pause and remove; and the elected
scheduler over them, which fires each tick exactly once however many processes run it and
whichever of them stops."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from relaymq.backends.base import Backend
from relaymq.job import JobState
from relaymq.records.store import StoredSchedule
from relaymq.schedules import Schedule, Scheduler, Schedules, store
from relaymq.testing import FakeClock
from tests.conftest import MakeBackend
from tests.support.jobs import queue_name


@pytest_asyncio.fixture
async def sid(backend: Backend, q: str) -> AsyncIterator[str]:
    """A schedule id prefix no other test uses; this test's schedules are removed after it
    (the schedules of a shared backend are global, not per queue)."""
    yield q
    for s in await store.load(backend):
        if s.id.startswith(q):
            await store.remove(backend, s.id)


def mine(schedules: list[StoredSchedule], prefix: str) -> list[StoredSchedule]:
    return [s for s in schedules if s.id.startswith(prefix)]


async def test_saving_creates_and_an_unchanged_spec_keeps_its_state(
    backend: Backend, sid: str
) -> None:
    a = StoredSchedule(f"{sid}-a", b'{"v":1}', 1000)
    assert await store.save(backend, a) is True
    assert await store.save(backend, StoredSchedule(f"{sid}-b", b'{"v":2}', 5, True)) is True
    assert mine(await store.load(backend), sid) == [
        a,
        StoredSchedule(f"{sid}-b", b'{"v":2}', 5, True),
    ]
    assert await store.advance(backend, a.id, 1000, 2000) is True
    assert await store.pause(backend, a.id, True) is True
    # The same spec again (a worker restarting): the stored tick and pause stand.
    assert await store.save(backend, StoredSchedule(a.id, a.spec, 1000)) is False
    [stored, _] = mine(await store.load(backend), sid)
    assert (stored.next_ms, stored.paused) == (2000, True)
    # A changed spec replaces the spec and the tick, and keeps the pause.
    assert await store.save(backend, StoredSchedule(a.id, b'{"v":3}', 7000)) is True
    [stored, _] = mine(await store.load(backend), sid)
    assert stored == StoredSchedule(a.id, b'{"v":3}', 7000, True)


async def test_advance_is_a_compare_and_set(backend: Backend, sid: str) -> None:
    s = StoredSchedule(f"{sid}-a", b"{}", 1_700_000_000_000)
    await store.save(backend, s)
    assert await store.advance(backend, s.id, s.next_ms, s.next_ms + 60_000) is True
    assert await store.advance(backend, s.id, s.next_ms, s.next_ms + 120_000) is False  # stale
    assert await store.advance(backend, f"{sid}-none", 0, 1) is False
    [stored] = mine(await store.load(backend), sid)
    assert stored.next_ms == s.next_ms + 60_000


async def test_concurrent_advances_of_one_tick_let_exactly_one_through(
    make_backend: MakeBackend, sid: str
) -> None:
    handles = [await make_backend() for _ in range(3)]
    s = StoredSchedule(f"{sid}-a", b"{}", 1000)
    await store.save(handles[0], s)
    answers = await asyncio.gather(
        *(store.advance(h, s.id, 1000, 2000 + i) for i, h in enumerate(handles * 4))
    )
    assert answers.count(True) == 1
    [stored] = mine(await store.load(handles[1]), sid)
    assert stored.next_ms == 2000 + answers.index(True)


async def test_pause_resume_and_remove(backend: Backend, sid: str) -> None:
    s = StoredSchedule(f"{sid}-a", b"{}", 1000)
    await store.save(backend, s)
    assert await store.pause(backend, s.id, True) is True
    assert mine(await store.load(backend), sid) == [StoredSchedule(s.id, b"{}", 1000, True)]
    assert await store.pause(backend, s.id, False, 9000) is True
    assert mine(await store.load(backend), sid) == [StoredSchedule(s.id, b"{}", 9000)]
    assert await store.pause(backend, f"{sid}-none", True) is False
    assert await store.remove(backend, s.id) is True
    assert await store.remove(backend, s.id) is False
    assert mine(await store.load(backend), sid) == []
    assert await store.pause(backend, s.id, True) is False  # nothing is created


# -- the scheduler over each backend --------------------------------------------------------


def every_minute(sid: str, queue: str, **how: object) -> Schedule:
    return Schedule(id=f"{sid}-m", task="tests.tasks:noop", queue=queue, every=60, **how)  # type: ignore[arg-type]


async def ids_in(backend: Backend, queue: str) -> list[str]:
    return sorted(j.id for j in await backend.list_jobs(queue, JobState.WAITING, limit=1000))


async def test_three_schedulers_fire_each_tick_once_and_survive_the_leaders_end(
    make_backend: MakeBackend, clock: FakeClock, sid: str, q: str
) -> None:
    clock.now = 1_800_000_030.0  # half a minute past a minute
    handles = [await make_backend(clock) for _ in range(3)]
    lease = f"scheduler-{sid}"
    schedulers = [
        Scheduler(h, f"s{i}", clock=clock, lease=lease, lease_ttl=10) for i, h in enumerate(handles)
    ]
    await Schedules(handles[0], clock=clock).add(every_minute(sid, q))
    fired: list[str] = []
    for _ in range(3):  # three minutes, each with a pass of every scheduler at once
        clock.advance(60)
        for got in await asyncio.gather(*(s.run_once() for s in schedulers)):
            fired += got
    assert sum(s.leading for s in schedulers) == 1
    leader = next(s for s in schedulers if s.leading)
    # The leader stops without giving up its lease; the others take over once it lapses.
    survivors = [s for s in schedulers if s is not leader]
    clock.advance(11)
    for got in await asyncio.gather(*(s.run_once() for s in survivors)):
        fired += got
    clock.advance(49)
    for got in await asyncio.gather(*(s.run_once() for s in survivors)):
        fired += got
    expected = [f"{sid}-m@2027-01-15T08:{m:02d}:00Z" for m in (1, 2, 3, 4)]
    assert sorted(fired) == expected
    assert await ids_in(handles[0], q) == expected


async def test_a_tick_enqueued_before_a_crash_is_not_enqueued_twice(
    backend: Backend, clock: FakeClock, sid: str, q: str
) -> None:
    clock.now = 1_800_000_030.0
    schedule = every_minute(sid, q)
    await Schedules(backend, clock=clock).add(schedule)
    clock.advance(60)
    # A scheduler enqueued the tick and died before moving the schedule past it.
    tick = schedule.job_id(1_800_000_060_000)
    await backend.enqueue([schedule.new_job(tick)])
    scheduler = Scheduler(backend, "next", clock=clock, lease=f"scheduler-{sid}")
    assert await scheduler.run_once() == []  # fired again: answered as a duplicate
    assert await ids_in(backend, q) == [tick]
    [stored] = mine(await store.load(backend), sid)
    assert stored.next_ms == 1_800_000_120_000  # and moved past it this time


@pytest.mark.parametrize(
    ("missed", "fired_minutes"),
    [("skip", [10]), ("once", [9, 10]), ("all", [7, 8, 9, 10])],
)
async def test_ticks_missed_while_no_scheduler_ran_follow_the_policy(
    backend: Backend, clock: FakeClock, sid: str, missed: str, fired_minutes: list[int]
) -> None:
    q = queue_name()
    clock.now = 1_800_000_030.0  # 08:00:30
    await Schedules(backend, clock=clock).add(every_minute(sid, q, missed=missed, max_missed=3))
    clock.advance(10 * 60)  # 08:10:30: the ticks from 08:01 to 08:09 were missed
    scheduler = Scheduler(backend, "late", clock=clock, lease=f"scheduler-{sid}")
    fired = await scheduler.run_once()
    assert fired == [f"{sid}-m@2027-01-15T08:{m:02d}:00Z" for m in fired_minutes]
    assert await scheduler.run_once() == []  # each fires once


async def test_a_paused_schedule_does_not_fire_and_resumes_from_now(
    backend: Backend, clock: FakeClock, sid: str, q: str
) -> None:
    clock.now = 1_800_000_030.0
    book = Schedules(backend, clock=clock)
    await book.add(every_minute(sid, q, missed="all"))
    scheduler = Scheduler(backend, "s", clock=clock, lease=f"scheduler-{sid}")
    await book.pause(f"{sid}-m")
    clock.advance(300)
    assert await scheduler.run_once() == []
    await book.resume(f"{sid}-m")  # the ticks that fell while paused never fire
    assert await scheduler.run_once() == []
    clock.advance(60)
    assert await scheduler.run_once() == [f"{sid}-m@2027-01-15T08:06:00Z"]
