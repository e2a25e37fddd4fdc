"""Queue limits with running workers, on every backend: two workers together never run more
of a queue's jobs than its ``max_active``, a rate lets through its number per window, and
limits defined in code are stored by the workers of the queue."""

from __future__ import annotations

import pytest

from relaymq import ConfigError, Limits, Queue, limit
from relaymq.app import default_app
from relaymq.limits import parse_rate
from tests import tasks
from tests.support.jobs import queue_name
from tests.worker.conftest import RunWorker


async def test_two_workers_together_stay_within_max_active(
    queue: Queue, run_worker: RunWorker
) -> None:
    key = queue_name("cap")
    await queue.set_limits(max_active=2)
    job = tasks.wait_for_gate.with_options(queue=queue.name)
    handles = [await queue.add(job.call(key)) for _ in range(6)]
    async with run_worker(concurrency=5) as one, run_worker(concurrency=5) as two:
        await one.until(lambda s: s.claimed + two.stats.claimed >= 2, "claims of two jobs")
        # Both keep claiming and are held back: a few empty claims each, and still two run.
        base = (one.stats.empty_claims, two.stats.empty_claims)
        await one.until(lambda s: s.empty_claims >= base[0] + 3, "claims held back")
        await two.until(lambda s: s.empty_claims >= base[1] + 3, "claims held back")
        assert tasks.LEDGER[key] == 2
        tasks.gate(key).set()
        assert [await h.result(timeout=20) for h in handles] == [key] * 6
    assert tasks.PEAK[key] == 2


async def test_a_rate_lets_its_number_start_per_window(queue: Queue, run_worker: RunWorker) -> None:
    key = queue_name("rate")
    await queue.set_limits(rate=3, per=0.5)
    job = tasks.record_order.with_options(queue=queue.name)
    handles = [await queue.add(job.call(key, str(i))) for i in range(9)]
    async with run_worker(concurrency=10) as worker:
        for h in handles:
            await h.result(timeout=20)
        starts = [j.claimed_at for j in [await h.job() for h in handles]]
    assert worker.stats.claimed == 9
    # By the backend's clock, which decides the windows: three at least, none over its rate.
    windows = sorted({int(t // 0.5) for t in starts if t is not None})
    assert len(windows) >= 3
    for w in windows:
        assert sum(1 for t in starts if t is not None and int(t // 0.5) == w) <= 3


async def test_a_key_rate_holds_per_key_and_lets_other_keys_pass(
    queue: Queue, run_worker: RunWorker
) -> None:
    key = queue_name("keys")
    await queue.set_limits(key_rate="2/0.5")
    job = tasks.record_order.with_options(queue=queue.name)
    a = [await queue.add(job.with_options(limit_key="a").call(key, f"a{i}")) for i in range(6)]
    b = [await queue.add(job.with_options(limit_key="b").call(key, f"b{i}")) for i in range(2)]
    async with run_worker(concurrency=5), run_worker(concurrency=5):
        for h in a + b:
            await h.result(timeout=20)
        started = {h.id: (await h.job()).claimed_at or 0.0 for h in a + b}
    for jobs in (a, b):
        windows = [int(started[h.id] // 0.5) for h in jobs]
        assert max(windows.count(w) for w in windows) <= 2  # never more than 2 per window
    # b's jobs, enqueued behind all of a's, did not wait for them: they started in a's first
    # window or the next (the first claims may straddle a window's end), while a's six took
    # three windows at least.
    a_windows = sorted(int(started[h.id] // 0.5) for h in a)
    assert max(int(started[h.id] // 0.5) for h in b) <= a_windows[0] + 1
    assert a_windows[-1] >= a_windows[0] + 2


async def test_limits_defined_in_code_are_stored_by_the_queues_workers(
    queue: Queue, run_worker: RunWorker
) -> None:
    limit(queue.name, max_active=7, rate="30/m", key_rate="5/s")
    try:
        async with run_worker():
            assert await queue.limits() == Limits(
                max_active=7, rate=30, per=60, key_rate=5, key_per=1
            )
    finally:
        default_app().limits.pop(queue.name)
    assert await queue.set_limits() is None  # neither: removed
    assert await queue.limits() is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100/60", (100, 60.0)),
        ("10/m", (10, 60.0)),
        ("5/s", (5, 1.0)),
        ("1000/h", (1000, 3600.0)),
        ("3/2.5s", (3, 2.5)),
        ("7/ 2m", (7, 120.0)),
    ],
)
def test_rates_are_read_as_count_per_period(text: str, expected: tuple[int, float]) -> None:
    assert parse_rate(text) == expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_active": 0}, "max_active must be a whole number >= 1"),
        ({"rate": 2.5}, "rate must be a whole number >= 1"),
        ({"rate": 1, "per": 0}, "per must be a number of seconds > 0"),
        ({"rate": "ten/m"}, "expected N/PERIOD"),
        ({"rate": "10"}, "expected N/PERIOD"),
    ],
)
async def test_bad_limits_are_refused_and_nothing_is_stored(
    queue: Queue, kwargs: dict[str, object], message: str
) -> None:
    await queue.set_limits(max_active=3)
    with pytest.raises(ConfigError, match=message):
        await queue.set_limits(**kwargs)  # type: ignore[arg-type]
    assert await queue.limits() == Limits(max_active=3)


async def test_local_max_active_caps_each_worker_and_leaves_other_queues_open(
    queue: Queue, run_worker: RunWorker
) -> None:
    capped, other = queue_name("local"), queue_name("other")
    limit(queue.name, local_max_active=2)
    try:
        job = tasks.wait_for_gate.with_options(queue=queue.name)
        handles = [await queue.add(job.call(capped)) for _ in range(5)]
        more = tasks.wait_for_gate.with_options(queue=other)
        extra = [await Queue(other, queue.ops).add(more.call(other)) for _ in range(3)]
        async with run_worker(queues=[queue.name, other], concurrency=10) as w:
            await w.until(lambda s: s.claimed >= 5, "two capped jobs and the other queue's")
            base = w.stats.empty_claims  # it claims on, for the other queue alone
            await w.until(lambda s: s.empty_claims >= base + 3, "claims past the capped queue")
            assert (tasks.LEDGER[capped], tasks.LEDGER[other]) == (2, 3)
            tasks.gate(capped).set()
            tasks.gate(other).set()
            assert [await h.result(timeout=20) for h in handles] == [capped] * 5
            assert [await h.result(timeout=20) for h in extra] == [other] * 3
        assert tasks.PEAK[capped] == 2
    finally:
        default_app().limits.pop(queue.name)
        default_app().local_limits.pop(queue.name)


def test_a_local_cap_below_one_is_refused_and_nothing_is_declared() -> None:
    name = queue_name("bad")
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ConfigError, match="local_max_active"):
            limit(name, local_max_active=bad)  # type: ignore[arg-type]
    assert name not in default_app().limits and name not in default_app().local_limits
