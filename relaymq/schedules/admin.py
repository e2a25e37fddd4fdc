"""Schedules at run time: store, list, pause, resume, remove and run them now, from any
process (the CLI's ``relaymq schedule`` commands, a web app, a script)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from relaymq.backends.base import Backend
from relaymq.errors import CorruptRecordError, ScheduleNotFoundError
from relaymq.instrumented import Instrumented
from relaymq.producer import JobHandle
from relaymq.records.store import Clock, StoredSchedule
from relaymq.schedules import store
from relaymq.schedules.spec import Schedule, check_schedule_id


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """A stored schedule and where it stands. ``schedule`` is None when the stored one cannot
    be read (``error`` says why); such a schedule does not fire until saved again or removed."""

    id: str
    schedule: Schedule | None
    next_at: float
    """When its next tick falls, in seconds since the epoch."""
    paused: bool
    error: str | None = None


class Schedules:
    """The schedules stored in a backend, reached through its app's facade (``app.ops``; a
    backend given as such gets a facade of its own). ``clock``: seconds since the epoch (a test
    clock)."""

    def __init__(self, ops: Instrumented | Backend, *, clock: Clock | None = None) -> None:
        self.ops = ops if isinstance(ops, Instrumented) else Instrumented(ops)
        self.clock = clock or time.time

    def _now_ms(self) -> int:
        return round(self.clock() * 1000)

    async def add(self, schedule: Schedule) -> bool:
        """Store ``schedule``, or replace the one with its id (which keeps its pause). Its
        first tick is the first one after now. False when the same schedule was stored."""
        return await store.save(self.ops, schedule.stored(self._now_ms()))

    async def list(self) -> list[ScheduleState]:
        """Every stored schedule, by id."""
        return [_state(s) for s in await store.load(self.ops)]

    async def get(self, schedule_id: str) -> ScheduleState:
        check_schedule_id(schedule_id)
        for s in await store.load(self.ops):
            if s.id == schedule_id:
                return _state(s)
        raise ScheduleNotFoundError(f"no schedule {schedule_id!r}")

    async def remove(self, schedule_id: str) -> None:
        """Delete it; jobs it already enqueued stay."""
        if not await store.remove(self.ops, check_schedule_id(schedule_id)):
            raise ScheduleNotFoundError(f"no schedule {schedule_id!r}")

    async def pause(self, schedule_id: str) -> None:
        """Stop firing it until ``resume``; ticks that fall meanwhile never fire."""
        if not await store.pause(self.ops, check_schedule_id(schedule_id), True):
            raise ScheduleNotFoundError(f"no schedule {schedule_id!r}")

    async def resume(self, schedule_id: str) -> None:
        """Fire it again from its first tick after now."""
        schedule = await self._readable(schedule_id)
        next_ms = schedule.next_after(self._now_ms())
        if not await store.pause(self.ops, schedule_id, False, next_ms):
            raise ScheduleNotFoundError(f"no schedule {schedule_id!r}")

    async def run_now(self, schedule_id: str) -> JobHandle[object]:
        """Enqueue its job once now, outside its ticks (which stay as they are)."""
        schedule = await self._readable(schedule_id)
        job_id = f"{schedule.id}@now-{os.urandom(6).hex()}"
        [answer] = await self.ops.enqueue([schedule.new_job(job_id)])
        return JobHandle(self.ops, schedule.queue, answer.id)

    async def _readable(self, schedule_id: str) -> Schedule:
        state = await self.get(schedule_id)
        if state.schedule is None:
            raise CorruptRecordError(state.error or f"schedule {schedule_id!r} is unreadable")
        return state.schedule


def _state(stored: StoredSchedule) -> ScheduleState:
    try:
        schedule: Schedule | None = Schedule.decode(stored.id, stored.spec)
        error = None
    except CorruptRecordError as e:
        schedule, error = None, str(e)
    return ScheduleState(stored.id, schedule, stored.next_ms / 1000, stored.paused, error)
