"""``patiently``: what a starting worker waits out, and what it refuses at once (issue 38)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from relaymq.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigError,
    CorruptRecordError,
    RecordRefusedError,
)
from relaymq.worker.startup import patiently


class Clock:
    """A test clock that the recorded sleeps move forward."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def failing(errors: list[BaseException], answer: str = "up") -> Callable[[], Awaitable[str]]:
    """A call that raises each of ``errors`` in turn, then answers."""

    async def call() -> str:
        if errors:
            raise errors.pop(0)
        return answer

    return call


@pytest.mark.parametrize(
    "error",
    [
        BackendUnavailableError("PostgreSQL at 127.0.0.1:5432 unreachable"),
        BackendError("MongoDB error: database is locked"),  # a passing server error
    ],
)
async def test_a_passing_outage_is_waited_out(error: BackendError) -> None:
    clock = Clock()
    call = failing([error, error])
    answer = await patiently(call, "the server", 60, clock=clock, sleep=clock.sleep)
    assert answer == "up" and len(clock.slept) == 2


@pytest.mark.parametrize(
    "error",
    [
        ConfigError("queue refused"),
        CorruptRecordError("record unreadable"),
        RecordRefusedError("document too large"),
    ],
)
async def test_what_cannot_succeed_on_a_second_try_goes_up_at_once(error: Exception) -> None:
    clock = Clock()
    with pytest.raises(type(error)):
        await patiently(failing([error]), "the server", 60, clock=clock, sleep=clock.sleep)
    assert clock.slept == []


async def test_past_the_timeout_the_last_error_goes_up() -> None:
    clock = Clock()
    errors: list[BaseException] = [BackendUnavailableError("down")] * 100
    with pytest.raises(BackendUnavailableError, match="gave up after waiting 10s"):
        await patiently(failing(errors), "the server", 10, clock=clock, sleep=clock.sleep)
    assert sum(clock.slept) == pytest.approx(10)
