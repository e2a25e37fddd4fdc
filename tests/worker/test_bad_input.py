"""Bad input, one catalogue: each case gets a clear error, and nothing that was accepted is
lost. Every case runs on every backend (those with storage that cannot be damaged from outside,
or with no server to lose, skip only the cases that need it, saying why).

- arguments that cannot be serialized: ``SerializationError`` at enqueue; the batch stores
  nothing;
- a payload over ``max_payload_bytes``: ``PayloadTooLargeError`` at enqueue; nothing stored;
- an invalid option (delay, priority, retries, ttl, timeout, queue name, job id):
  ``ConfigError`` naming it; nothing stored;
- a task no worker knows: retried (a rolling deploy), then dead-lettered naming the task;
- a payload that does not decode: dead-lettered naming the payload; other jobs go on;
- a result that cannot be serialized: the attempt fails, "result cannot be serialized";
- a damaged stored record: claims and recovery go on past it; it is failed as corrupt;
- the backend's clock jumping back: no claim is recovered and no delayed job runs early;
  jumping forward: every claim looks stale, a recovery, and the old claim's outcome is refused;
- the server vanishing mid-transition: calls fail with ``BackendUnavailableError`` meanwhile;
  the outcome is written once it is back, the handler having run once.

Unknown URLs, unreachable and black-holing servers: ``tests/unit/test_unresponsive_servers.py``
and ``tests/unit/test_api.py``; each server's own restart tests: ``tests/<backend>/``.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from relaymq import JobFailedError, JobHandle, JobState, Queue, SerializationError, Worker
from relaymq.backends import connect
from relaymq.backends.base import Backend
from relaymq.errors import (
    BackendUnavailableError,
    ConfigError,
    CorruptRecordError,
    PayloadTooLargeError,
)
from relaymq.records.store import Outcome, Settle
from relaymq.testing import FakeClock
from tests import tasks
from tests.support.cases import BackendCase
from tests.support.jobs import get_job, new_job, queue_name
from tests.support.waiting import poll_until, watch
from tests.worker.conftest import FAST, RunWorker


def key() -> str:
    return uuid.uuid4().hex


async def wait_state(
    backend: Backend, queue: str, job_id: str, state: JobState, within: float = 10
) -> None:
    async with watch(backend) as w:
        await w.state(queue, job_id, state, within)


# -- at enqueue: refused, nothing stored ------------------------------------------------------


async def test_unserialisable_arguments_are_rejected_and_nothing_stored(queue: Queue) -> None:
    with pytest.raises(SerializationError, match="cannot serialize"):
        await queue.add(tasks.add.call(object(), 1))  # type: ignore[arg-type]
    with pytest.raises(SerializationError):
        await queue.add_bulk([tasks.add.call(1, 1), tasks.add.call("\ud800", 1)])  # type: ignore[arg-type]
    assert sum((await queue.counts()).values()) == 0


async def test_oversized_payload_is_rejected(queue: Queue) -> None:
    small = Queue(queue.name, queue.backend, settings=queue.settings.replace(max_payload_bytes=64))
    with pytest.raises(PayloadTooLargeError):
        await small.add(tasks.add.call(1, "x" * 100))  # type: ignore[arg-type]
    assert sum((await queue.counts()).values()) == 0


async def test_nul_characters_round_trip(queue: Queue, run_worker: RunWorker) -> None:
    async with run_worker():
        handle = await queue.add(tasks.add.call("a\x00", "\x00b"))  # type: ignore[arg-type]
        assert await handle.result(timeout=10) == "a\x00\x00b"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"delay": -1}, "delay"),
        ({"priority": 256}, "priority"),
        ({"retries": -1}, "retries"),
        ({"ttl": 0}, "ttl"),
        ({"timeout": -2}, "timeout"),
        ({"queue": "no spaces"}, "queue name"),
        ({"job_id": ""}, "job_id"),
    ],
)
async def test_an_invalid_option_is_refused_naming_it(
    queue: Queue, options: dict[str, object], named: str
) -> None:
    accepted = await queue.add(tasks.add.call(1, 1))
    with pytest.raises(ConfigError, match=named):
        await queue.add(tasks.add.with_options(**options).call(1, 1))  # type: ignore[arg-type]
    assert [j.id for j in await queue.list_jobs(JobState.WAITING)] == [accepted.id]


# -- in the worker: dead-lettered with the reason, the others go on ---------------------------


async def test_unknown_task_is_retried_then_fails_into_the_dlq_naming_it(
    live: Backend, q: str, run_worker: RunWorker
) -> None:
    await live.enqueue([new_job(q, "ghost", task="tests.nowhere:missing", max_attempts=2)])
    async with run_worker():
        await wait_state(live, q, "ghost", JobState.FAILED)  # after a backoff of 1-1.2 s
    job = await get_job(live, q, "ghost")
    assert job is not None and job.attempts == 2  # retried (a rolling deploy), then failed
    assert job.error is not None and "tests.nowhere:missing" in job.error


async def test_undecodable_payload_fails_and_others_go_on(
    live: Backend, q: str, queue: Queue, run_worker: RunWorker
) -> None:
    await live.enqueue([new_job(q, "garbled", task=tasks.add.name, payload=b"\xff{not json")])
    good = await queue.add(tasks.add.call(1, 1))
    async with run_worker():
        assert await good.result(timeout=10) == 2
        await wait_state(live, q, "garbled", JobState.FAILED)
    job = await get_job(live, q, "garbled")
    assert job is not None and job.error is not None and "payload" in job.error


async def test_unserialisable_result_fails_with_reason(queue: Queue, run_worker: RunWorker) -> None:
    async with run_worker():
        handle = await queue.add(tasks.bad_result.call(key()))
        with pytest.raises(JobFailedError, match="result cannot be serialized"):
            await handle.result(timeout=10)


# -- stored records damaged from outside ------------------------------------------------------


@pytest.fixture
def damage(case: BackendCase) -> BackendCase:
    if case.corrupt is None:
        pytest.skip(f"{case.name} storage cannot be damaged from outside")
    return case


async def assert_failed_or_unreadable(backend: Backend, q: str, job_id: str) -> None:
    try:
        job = await get_job(backend, q, job_id)
    except CorruptRecordError:
        return
    assert job is not None and job.state is JobState.FAILED, job
    assert job.error is not None and "corrupt" in job.error.lower()


async def test_claim_goes_on_past_a_corrupt_job(
    damage: BackendCase, backend: Backend, q: str
) -> None:
    assert damage.corrupt is not None
    await backend.enqueue([new_job(q, "a"), new_job(q, "bad"), new_job(q, "c")])
    await damage.corrupt(backend, q, "bad")
    batch = await backend.claim([q], "w", 10)
    assert [j.id for j in batch.jobs] == ["a", "c"]
    assert (await backend.claim([q], "w", 10)).jobs == []  # not offered again either
    await assert_failed_or_unreadable(backend, q, "bad")


async def test_recovery_goes_on_past_a_corrupt_job(
    damage: BackendCase, backend: Backend, q: str, clock: FakeClock
) -> None:
    assert damage.corrupt is not None
    await backend.enqueue([new_job(q, "bad"), new_job(q, "ok")])
    await backend.claim([q], "w", 2)
    await damage.corrupt(backend, q, "bad")
    clock.advance(60)
    recovered = await backend.recover_stalled(q, threshold=30, max_stalled=5)
    assert recovered.requeued == ["ok"]
    assert "bad" in recovered.failed or any("bad" in e for e in recovered.errors)


# -- the backend's clock jumping --------------------------------------------------------------


async def test_a_clock_jumping_back_takes_no_claim_early(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    await backend.enqueue([new_job(q, "held"), new_job(q, "later", delay=60)])
    [held] = (await backend.claim([q], "w", 5)).jobs
    clock.advance(-3600)  # NTP steps the clock back an hour
    assert (await backend.recover_stalled(q, threshold=30, max_stalled=5)).requeued == []
    assert (await backend.claim([q], "w2", 5)).jobs == []  # "later" is not due early either
    clock.advance(3600 + 61)  # time catches up: the claim is stale now, "later" due
    recovered = await backend.recover_stalled(q, threshold=30, max_stalled=5)
    assert recovered.requeued == ["held"]
    assert sorted(j.id for j in (await backend.claim([q], "w2", 5)).jobs) == ["held", "later"]
    assert held.token is not None


async def test_a_clock_jumping_forward_is_a_recovery_and_fenced(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    await backend.enqueue([new_job(q, "a")])
    [old] = (await backend.claim([q], "w1", 1)).jobs
    clock.advance(3600)  # the clock leaps an hour: every claim looks stale at once
    assert (await backend.recover_stalled(q, threshold=30, max_stalled=5)).requeued == ["a"]
    [new] = (await backend.claim([q], "w2", 1)).jobs
    assert old.claim is not None and new.claim is not None
    stale = await backend.settle([Settle(old.claim, Outcome.COMPLETE, result=b"1")])
    assert stale == [False]  # the first worker's late outcome is refused
    assert await backend.settle([Settle(new.claim, Outcome.COMPLETE, result=b"2")]) == [True]
    job = await get_job(backend, q, "a")
    assert job is not None and job.state is JobState.COMPLETED and job.result == b"2"


# -- the server vanishing mid-transition ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", ["redis", "postgres", "mongodb", "rabbitmq_redis"])
async def test_a_server_vanishing_mid_transition_loses_nothing(name: str, tmp_path: Path) -> None:
    """The server dies while a handler runs; the handler ends while it is gone, so its outcome
    cannot be written; an enqueue meanwhile is refused with a clear error (or, on RabbitMQ with
    its store up, accepted and run later); once the server is back the outcome is written, the
    handler having run once, and every accepted job is there."""
    import os

    from tests.soak.targets import OPENERS, unavailable

    reason = unavailable(name)
    if reason and os.environ.get("CI"):
        pytest.fail(f"{name} unavailable in CI: {reason}", pytrace=False)
    if reason:
        pytest.skip(reason)
    async with OPENERS[name](tmp_path) as target:
        assert target.stop is not None and target.start is not None
        backend = await connect(target.url)
        q, k = queue_name("vanish"), key()
        queue = Queue(q, backend)
        done = await queue.add(tasks.add.call(1, 2))
        running = await queue.add(tasks.wait_for_gate.call(k))
        # a long stalled threshold: the outage must not pass for a crash
        worker = Worker(backend, [q], settings=FAST.replace(stalled_threshold=60))
        serving = asyncio.create_task(worker.run())
        try:
            async with asyncio.timeout(30):  # the worker claiming and starting the handler
                await tasks.started(k).wait()
            await poll_until(lambda: worker.stats.completed == 1, "the first job", within=30)
            await target.stop()
            tasks.gate(k).set()  # the handler returns while the server is gone
            await poll_until(lambda: tasks.RUNNING[k] == 0, "the handler to return")
            try:  # refused with a clear error, or accepted (RabbitMQ: the store is up): kept
                async with asyncio.timeout(60):  # the client giving up on the dead server
                    meanwhile: JobHandle[int] | None = await queue.add(tasks.add.call(2, 2))
            except BackendUnavailableError:
                meanwhile = None
            await target.start()
            outcomes = 2 if meanwhile is None else 3
            await poll_until(lambda: worker.stats.completed == outcomes, "the outcomes written", 60)
        finally:
            worker.stop()
            await serving
        assert tasks.LEDGER[k] == 1
        assert (await running.job()).state is JobState.COMPLETED
        assert (await done.job()).result_value() == 3
        if meanwhile is not None:
            assert (await meanwhile.job()).result_value() == 4
        assert sum((await queue.counts()).values()) == outcomes  # a refused one stored nothing
        await backend.close()
