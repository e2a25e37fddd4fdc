"""Throttle and debounce through the producer API and a running worker, on every backend: of a
burst of debounced enqueues only the last runs; of throttled ones, the first, and every handle
names it."""

from __future__ import annotations

import pytest

from relaymq import ConfigError, JobNotFoundError, Queue
from tests import tasks
from tests.worker.conftest import RunWorker


async def test_of_a_debounced_burst_only_the_last_runs(queue: Queue, run_worker: RunWorker) -> None:
    debounced = tasks.add.with_options(queue=queue.name, debounce=("sum", 0.3))
    handles = [await queue.add(debounced.call(i, 100)) for i in range(5)]
    assert [h.duplicate for h in handles] == [False] * 5
    async with run_worker():
        assert await handles[-1].result(timeout=20) == 104
    for h in handles[:-1]:  # replaced: deleted before they ran
        with pytest.raises(JobNotFoundError):
            await h.job()


async def test_of_throttled_enqueues_the_first_runs_and_every_handle_names_it(
    queue: Queue, run_worker: RunWorker
) -> None:
    throttled = tasks.add.with_options(queue=queue.name, throttle=("sum", 60))
    first, *others = [await queue.add(throttled.call(i, 1)) for i in range(3)]
    assert not first.duplicate and all(h.duplicate and h.id == first.id for h in others)
    async with run_worker():
        assert [await h.result(timeout=20) for h in (first, *others)] == [1, 1, 1]
    # The job ran and ended, but the window holds the key for 60 s from its enqueue.
    assert (await queue.add(throttled.call(5, 5))).id == first.id


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"throttle": ("k", 5), "debounce": ("k", 5)}, "throttled or debounced, not both"),
        ({"throttle": ("k", 0)}, "seconds positive"),
        ({"debounce": ("", 1)}, "key must be 1 to 255 characters"),
        ({"throttle": "k"}, "throttle must be \\(key, seconds\\)"),
        ({"debounce": ("k", 1), "delay": 3}, "debounce sets the delay itself"),
    ],
)
def test_bad_key_options_are_refused_at_once(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        tasks.add.with_options(**options)  # type: ignore[arg-type]
