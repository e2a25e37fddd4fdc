"""An observer (metrics, tracing) that raises never fails a job nor stops a worker: it is
logged, and the job ends as it would have."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from relaymq import Queue
from relaymq.app import observe, unobserve
from relaymq.observers import Observer
from tests import tasks
from tests.worker.conftest import RunWorker


class Broken(Observer):
    def __getattribute__(self, name: str) -> Any:
        if name.startswith("__") or name not in vars(Observer):
            return super().__getattribute__(name)

        def hook(*args: Any) -> Any:
            raise RuntimeError(f"{name} is broken")

        return hook


@pytest.fixture
def broken() -> Iterator[Broken]:
    b = Broken()
    observe(b)
    yield b
    unobserve(b)


async def test_a_failing_observer_is_logged_and_the_jobs_still_run(
    queue: Queue, run_worker: RunWorker, broken: Broken, caplog: pytest.LogCaptureFixture
) -> None:
    async with run_worker():
        handle = await queue.add(tasks.add.call(20, 22))
        threaded = await queue.add(tasks.multiply.call(6, 7))
        assert await handle.result(timeout=10) == 42
        assert await threaded.result(timeout=10) == 42
    failed = {
        r.exc_info[1].args[0]
        for r in caplog.records  # type: ignore[index]
        if r.name == "relaymq.observers" and r.exc_info
    }
    expected = {"enqueuing", "enqueued", "claimed", "attempt", "attempt_ended", "settled", "call"}
    assert {f"{name} is broken" for name in expected} <= failed
