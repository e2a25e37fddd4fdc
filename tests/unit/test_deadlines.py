"""The Redis command path's deadlines, on one shared timer (relaymq.backends.redis.deadlines)."""

from __future__ import annotations

import asyncio
import time

import pytest

from relaymq.backends.redis.deadlines import Deadlines, Expired

SHORT = 0.05


async def never() -> None:
    await asyncio.Event().wait()


async def answers(value: int, after: float = 0.0) -> int:
    await asyncio.sleep(after)
    return value


async def test_a_call_that_never_answers_expires_at_its_deadline() -> None:
    deadlines = Deadlines(SHORT)
    started = time.monotonic()
    with pytest.raises(Expired):
        async with asyncio.timeout(5):  # the deadline must come first
            await deadlines.run(never())
    assert SHORT <= time.monotonic() - started < 1.0
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_call_in_time_returns_and_leaves_its_task_uncancelled() -> None:
    deadlines = Deadlines(SHORT)
    assert await deadlines.run(answers(7)) == 7
    await asyncio.sleep(SHORT * 2)  # the timer armed for that call fires on nothing
    assert await deadlines.run(answers(8)) == 8


async def test_calls_side_by_side_each_keep_their_own_deadline() -> None:
    deadlines = Deadlines(SHORT * 4)

    async def late_start() -> int:
        await asyncio.sleep(SHORT * 2)  # starts while the first call's timer is armed
        return await deadlines.run(answers(3, after=SHORT * 3))

    async def late_stuck() -> None:
        await asyncio.sleep(SHORT * 2)
        await deadlines.run(never())

    stuck = asyncio.create_task(deadlines.run(never()))
    quick = asyncio.create_task(deadlines.run(answers(1)))
    late = asyncio.create_task(late_start())
    stuck_later = asyncio.create_task(late_stuck())
    assert await quick == 1
    with pytest.raises(Expired):
        await stuck  # expired at SHORT * 4, while the late call was still running
    assert await late == 3  # its own deadline was SHORT * 6: not cut short by the first
    with pytest.raises(Expired):
        async with asyncio.timeout(5):  # the timer was armed again for the later calls
            await stuck_later


async def test_a_cancellation_from_outside_is_not_taken_for_an_expiry() -> None:
    deadlines = Deadlines(10.0)
    call = asyncio.create_task(deadlines.run(never()))
    await asyncio.sleep(0)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


async def test_an_outer_timeout_around_an_expired_call_still_sees_the_expiry() -> None:
    deadlines = Deadlines(SHORT)
    with pytest.raises(Expired):
        async with asyncio.timeout(SHORT * 20):
            await deadlines.run(never())
