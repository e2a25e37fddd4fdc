"""A worker's settle and its next claim travel together: one write of both scripts, and a settle
that fails gives back what the claim beside it took."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from relaymq.backends.base import Backend
from relaymq.backends.redis import RedisBackend
from relaymq.errors import BackendError
from relaymq.job import JobState, NewJob
from relaymq.records.store import Outcome, Settle
from tests.redis import support
from tests.support.case_redis import URL
from tests.support.jobs import get_job

Q = "trips"


@pytest_asyncio.fixture
async def backend(tmp_path: Path) -> AsyncIterator[RedisBackend]:
    reason = support.unavailable(URL)
    if reason:
        pytest.skip(reason)
    b = await support.make(URL, None, tmp_path)
    assert isinstance(b, RedisBackend)
    await b.enqueue([NewJob(Q, f"j{i}", "t:noop", b"p") for i in range(3)])
    try:
        yield b
    finally:
        await b.close()


def count_writes(b: RedisBackend) -> list[int]:
    """The length of each command list the backend writes from now on."""
    link = b._t._link
    assert link is not None
    writes: list[int] = []
    run = link.run

    async def counted(commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        writes.append(len(commands))
        return await run(commands)

    link.run = counted  # type: ignore[method-assign]
    return writes


async def state(b: Backend, job_id: str) -> JobState | None:
    job = await get_job(b, Q, job_id)
    return None if job is None else job.state


async def test_a_settle_and_the_next_claim_are_one_write(backend: RedisBackend) -> None:
    assert backend.capabilities.settle_claims
    [first] = (await backend.claim([Q], "w", 1)).jobs
    writes = count_writes(backend)
    answer = await backend.settle_and_claim([Settle(first.claim, Outcome.COMPLETE)], [Q], "w", 2)
    assert writes == [2]  # the settle script and the claim script, in one round trip
    assert answer.applied == [True] and answer.batch is not None
    assert [j.id for j in answer.batch.jobs] == ["j1", "j2"]


async def test_a_failed_settle_gives_back_the_jobs_claimed_beside_it(
    backend: RedisBackend,
) -> None:
    [first] = (await backend.claim([Q], "w", 1)).jobs
    # The completed set replaced by a string: the settle script meets WRONGTYPE, the claim
    # script (which never touches that set) does not.
    done = backend._keys.base(Q) + ":completed"
    await backend._run([("SET", done, "not a sorted set")], "damage")
    with pytest.raises(BackendError, match="WRONGTYPE"):
        await backend.settle_and_claim([Settle(first.claim, Outcome.COMPLETE)], [Q], "w", 1)
    j1 = await get_job(backend, Q, "j1")
    assert j1 is not None and j1.state is JobState.WAITING  # released: it runs again at once
    assert j1.attempts == 0  # a release gives the attempt back
    assert await state(backend, "j2") is JobState.WAITING


async def test_the_enqueue_publishes_its_events_only_while_someone_subscribes(
    backend: RedisBackend,
) -> None:
    """The script encodes and publishes an enqueue's facts only when PUBSUB NUMSUB counts a
    subscriber of the events channel. A pattern subscription (not counted) hears every
    message, in order: the first it hears is that of the enqueue made once someone listens."""
    channel = backend._keys.events
    watcher = backend._t.client.pubsub()
    await watcher.psubscribe(channel + "*")
    confirmed = await watcher.get_message(timeout=5)
    assert confirmed is not None and confirmed["type"] == "psubscribe"
    try:
        await backend.enqueue_announced([NewJob(Q, "unheard", "t:noop", b"p")], 1.0)
        listener = await backend.subscribe()
        try:
            await backend.enqueue_announced([NewJob(Q, "heard", "t:noop", b"p")], 1.0)
            assert b"heard" in await anext(listener)
        finally:
            await listener.aclose()
        first = await watcher.get_message(ignore_subscribe_messages=True, timeout=5)
        assert first is not None and b'"heard"' in first["data"]
    finally:
        await watcher.aclose()
