"""The instrumented facade is the one place events come from; maintenance survives anything and
applies retention, elected per queue."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from relaymq import events, recovery
from relaymq.backends.memory import InMemoryBackend
from relaymq.instrumented import Instrumented
from relaymq.job import JobState, KeyMode, KeyRule
from relaymq.queue import Queue
from relaymq.records.store import Beat, Outcome, Settle
from relaymq.recovery import KEY_GRACE, Maintenance
from relaymq.settings import Settings
from relaymq.testing import FakeClock
from tests.support.jobs import get_job, new_job


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def backend(clock: FakeClock) -> InMemoryBackend:
    return InMemoryBackend(clock=clock)


@pytest_asyncio.fixture
async def seen(backend: InMemoryBackend) -> AsyncIterator[list[events.Event]]:
    """Every event published, decoded, in order."""
    published: list[events.Event] = []
    original = backend.publish

    async def publish(messages: Any) -> None:
        for m in messages:
            published.extend(events.decode(m))
        await original(messages)

    backend.publish = publish  # type: ignore[method-assign]
    yield published


async def test_enqueue_announces_each_job_before_returning(
    backend: InMemoryBackend, seen: list[events.Event]
) -> None:
    ops = Instrumented(backend)
    await ops.enqueue([new_job("q", "a"), new_job("q", "b", delay=5), new_job("q", "a")])
    assert [(e.name, e.job_id) for e in seen] == [
        ("job:waiting", "a"),
        ("job:delayed", "b"),
        ("job:deduplicated", "a"),
    ]


async def test_worker_events_are_batched_and_a_stale_settle_reports_the_lost_claim(
    backend: InMemoryBackend, clock: FakeClock, seen: list[events.Event]
) -> None:
    ops = Instrumented(backend)
    await backend.enqueue([new_job("q", "a")])
    async with ops.batching():
        [job] = (await ops.claim(["q"], "w1", 1)).jobs
        clock.advance(100)
        await backend.recover_stalled("q", threshold=10, max_stalled=5)  # the claim goes stale
        [applied] = await ops.settle([(job, Settle(job.claim, Outcome.COMPLETE, b"1"))])
    assert applied is False
    names = [(e.name, e.job_id, e.data.get("attempt")) for e in seen]
    assert names == [("job:active", "a", 1), ("job:claim_lost", "a", 1)]
    assert (await get_job(backend, "q", "a")).state is JobState.WAITING  # type: ignore[union-attr]


async def test_a_retry_reports_its_error_and_delay(
    backend: InMemoryBackend, seen: list[events.Event]
) -> None:
    ops = Instrumented(backend)
    await backend.enqueue([new_job("q", "a", max_attempts=3)])
    async with ops.batching():
        [job] = (await ops.claim(["q"], "w1", 1)).jobs
        await ops.settle([(job, Settle(job.claim, Outcome.RETRY, error="E" * 900, delay=2.5))])
    [retrying] = [e for e in seen if e.name == "job:retrying"]
    assert retrying.data == {"attempt": 1, "error": "E" * 500, "delay": 2.5}


async def test_recovery_announces_stalled_jobs(
    backend: InMemoryBackend, clock: FakeClock, seen: list[events.Event]
) -> None:
    ops = Instrumented(backend)
    await backend.enqueue([new_job("q", "a")])
    await backend.claim(["q"], "w1", 1)
    clock.advance(100)
    found = await ops.recover_stalled("q", threshold=10, max_stalled=5)
    assert found.requeued == ["a"]
    assert [(e.name, e.job_id) for e in seen] == [("job:stalled", "a")]


async def test_a_failing_publish_never_stops_recovery(
    backend: InMemoryBackend, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(messages: Any) -> None:
        raise ConnectionResetError("the event channel went away")

    backend.publish = broken  # type: ignore[method-assign]
    m = Maintenance(Instrumented(backend), ["q"], Settings(stalled_threshold=10), "w1")
    await backend.enqueue([new_job("q", "a"), new_job("q", "b")])
    await backend.claim(["q"], "w1", 1)
    clock.advance(100)
    with caplog.at_level(logging.ERROR):
        first = await m.run_once()
    assert first["q"].requeued == ["a"] and "ConnectionResetError" in caplog.text
    await backend.claim(["q"], "w1", 2)
    clock.advance(100)
    second = await m.run_once()  # the next pass works as if nothing happened
    assert sorted(second["q"].requeued) == ["a", "b"]


async def test_an_unexpected_error_in_one_pass_is_logged_and_the_next_pass_runs(
    backend: InMemoryBackend, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    original = backend.recover_stalled
    calls = 0

    async def flaky(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyError("a bug")
        return await original(*args)

    backend.recover_stalled = flaky  # type: ignore[method-assign]
    m = Maintenance(Instrumented(backend), ["q"], Settings(stalled_threshold=10), "w1")
    await backend.enqueue([new_job("q", "a")])
    await backend.claim(["q"], "w1", 1)
    clock.advance(100)
    with caplog.at_level(logging.ERROR):
        assert await m.run_once() == {}
    assert "KeyError" in caplog.text
    assert (await m.run_once())["q"].requeued == ["a"]


async def test_maintenance_holds_off_while_its_worker_loop_was_blocked(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    original = backend.recover_stalled
    passes: list[str] = []

    async def counted(*args: Any) -> Any:
        passes.append("recovery")
        return await original(*args)

    backend.recover_stalled = counted  # type: ignore[method-assign]
    asked: list[int] = []  # recovery passes made before each question
    recovered = asyncio.Event()

    def hold_off() -> bool:  # blocked for three passes, then not
        asked.append(len(passes))
        if len(passes):
            recovered.set()
        return len(asked) <= 3

    settings = Settings(stalled_threshold=10, stalled_check_interval=0.01)
    m = Maintenance(Instrumented(backend), ["q"], settings, "w1", hold_off=hold_off)
    await backend.enqueue([new_job("q", "a")])
    await backend.claim(["q"], "w1", 1)
    clock.advance(100)
    running = asyncio.create_task(m.run())
    try:
        async with asyncio.timeout(5):  # the pass after the hold-off ended
            await recovered.wait()
    finally:
        running.cancel()
    assert asked[:4] == [0, 0, 0, 0] and asked[4] == 1
    job = await get_job(backend, "q", "a")
    assert job is not None and job.state is JobState.WAITING


async def test_only_the_lease_holder_runs_maintenance(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    ops = Instrumented(backend)
    a = Maintenance(ops, ["q"], Settings(), "a")
    b = Maintenance(ops, ["q"], Settings(), "b")
    assert "q" in await a.run_once()
    assert await b.run_once() == {}
    await a.release_locks()
    assert "q" in await b.run_once()


async def test_retention_cleans_old_finished_jobs_of_led_queues(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    backend.retention = 3600.0
    ops = Instrumented(backend)
    await backend.enqueue([new_job("q", "old"), new_job("q", "new")])
    [old] = (await backend.claim(["q"], "w", 1)).jobs
    await backend.settle([Settle(old.claim, Outcome.COMPLETE, b"1")])
    clock.advance(7200)
    [new] = (await backend.claim(["q"], "w", 1)).jobs
    await backend.settle([Settle(new.claim, Outcome.FAIL, error="x")])
    m = Maintenance(ops, ["q"], Settings(), "w")
    await m.run_once()
    assert await get_job(backend, "q", "old") is None
    assert await get_job(backend, "q", "new") is not None


async def test_maintenance_forgets_keys_that_hold_nothing_without_retention(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    rule = KeyRule("k", KeyMode.THROTTLE, 10)
    await backend.enqueue([new_job("q", "a", rule=rule)])
    [job] = (await backend.claim(["q"], "w", 1)).jobs
    await backend.settle([Settle(job.claim, Outcome.COMPLETE, b"1")])
    clock.advance(10 + KEY_GRACE + 1)
    await Maintenance(Instrumented(backend), ["q"], Settings(), "w").run_once()
    assert await backend.prune_keys("q", 0) == 0  # the pass forgot it already
    assert await get_job(backend, "q", "a") is not None  # and kept the job (no retention)


async def test_a_zero_retention_keeps_everything(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    await Queue("q", backend).set_retention(completed=0)
    await backend.enqueue([new_job("q", "a")])
    [job] = (await backend.claim(["q"], "w", 1)).jobs
    await backend.settle([Settle(job.claim, Outcome.COMPLETE, b"1")])
    clock.advance(10**8)
    await Maintenance(Instrumented(backend), ["q"], Settings(), "w").run_once()
    assert await get_job(backend, "q", "a") is not None


async def test_without_a_policy_completed_jobs_go_after_a_day(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    await backend.enqueue([new_job("q", "a")])
    [job] = (await backend.claim(["q"], "w", 1)).jobs
    await backend.settle([Settle(job.claim, Outcome.COMPLETE, b"1")])
    clock.advance(86400 - 1)
    settings = Settings(retention_interval=0.001)
    await Maintenance(Instrumented(backend), ["q"], settings, "w").run_once()
    assert await get_job(backend, "q", "a") is not None
    clock.advance(2)  # a new pass (another worker's, say) on the same stored rule
    await Maintenance(Instrumented(backend), ["q"], settings, "w").run_once()
    assert await get_job(backend, "q", "a") is None


async def test_every_backend_call_goes_through_the_per_call_hook(
    backend: InMemoryBackend, clock: FakeClock
) -> None:
    calls: list[str] = []

    class Counted(Instrumented):
        def _call(self, op: str) -> contextlib.AbstractContextManager[object]:
            calls.append(op)
            return super()._call(op)

    ops = Counted(backend)
    await ops.enqueue([new_job("q", "a")])
    async with ops.batching():
        [job] = (await ops.claim(["q"], "w1", 1)).jobs
        await ops.heartbeat([Beat(job.claim)])
        await ops.settle([(job, Settle(job.claim, Outcome.COMPLETE, b"1"))])
        await ops.enqueue([new_job("q", "b")])
        [second] = (await ops.claim(["q"], "w1", 1)).jobs
        await ops.settle_and_claim(
            [(second, Settle(second.claim, Outcome.COMPLETE, b"1"))], ["q"], "w1", 1
        )
    # the enqueue's events go out with it (enqueue_announced); the worker's in one batch
    assert calls == [
        "enqueue",
        "claim",
        "heartbeat",
        "settle",
        "enqueue",
        "claim",
        "settle_and_claim",
        "publish",
    ]


async def test_leaving_batching_waits_for_a_publish_in_flight(
    backend: InMemoryBackend, seen: list[events.Event]
) -> None:
    ops = Instrumented(backend, window=0.0)
    started, release = asyncio.Event(), asyncio.Event()
    publish = backend.publish

    async def slow(messages: Any) -> None:
        started.set()
        await release.wait()
        await publish(messages)

    backend.publish = slow  # type: ignore[method-assign]
    await backend.enqueue([new_job("q", "a")])
    async with ops.batching():
        await ops.claim(["q"], "w1", 1)
        async with asyncio.timeout(5):  # the batcher publishing job:active
            await started.wait()
        asyncio.get_running_loop().call_soon(release.set)
    assert [e.name for e in seen] == ["job:active"]


async def test_retention_runs_at_most_once_per_interval(
    backend: InMemoryBackend, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    mono = FakeClock(1000.0)
    monkeypatch.setattr(recovery.time, "monotonic", mono)
    backend.retention = 60.0
    ops = Instrumented(backend)
    m = Maintenance(ops, ["q"], Settings(), "w")

    async def finished(job_id: str) -> None:
        await backend.enqueue([new_job("q", job_id)])
        [job] = (await backend.claim(["q"], "w", 1)).jobs
        await backend.settle([Settle(job.claim, Outcome.COMPLETE, b"1")])
        clock.advance(120)  # older than the retention

    await finished("a")
    await m.run_once()
    assert await get_job(backend, "q", "a") is None
    await finished("b")
    mono.advance(Settings().retention_interval - 1)
    await m.run_once()
    assert await get_job(backend, "q", "b") is not None  # not due yet
    mono.advance(1)
    await m.run_once()
    assert await get_job(backend, "q", "b") is None
