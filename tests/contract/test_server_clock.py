"""The time-dependent contract on each backend's own clock (no test clock): the server's TIME,
now() or $$NOW decides stalls, due times, TTLs and leases. Short real thresholds; every wait
re-checks the condition under a deadline, and a lower bound proves nothing happened early."""

from __future__ import annotations

import asyncio

import pytest

from relaymq.backends.base import Backend
from tests.conftest import MakeBackend
from tests.support.jobs import get_job, new_job
from tests.support.waiting import poll_until

pytestmark = pytest.mark.server_clock

SHORT = 0.3
"""Seconds: the threshold, delay or lease every test here waits out."""


@pytest.fixture
async def live(make_backend: MakeBackend) -> Backend:
    return await make_backend()  # clock=None: the backend's own clock


async def test_a_stale_claim_is_recovered_only_after_the_threshold(live: Backend, q: str) -> None:
    loop = asyncio.get_running_loop()
    await live.enqueue([new_job(q, "a")])
    started = loop.time()
    [job] = (await live.claim([q], "w", 1)).jobs
    assert (await live.recover_stalled(q, SHORT, 5)).requeued == []  # fresh: still held

    async def recovered() -> bool:
        return (await live.recover_stalled(q, SHORT, 5)).requeued == ["a"]

    await poll_until(recovered, "the claim to go stale on the server clock", every=0.05)
    assert loop.time() - started >= SHORT - 0.05
    again = await get_job(live, q, "a")
    assert again is not None and again.stalls == 1 and again.token == job.token


async def test_a_delayed_job_becomes_claimable_when_due(live: Backend, q: str) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    await live.enqueue([new_job(q, "later", delay=SHORT)])
    assert (await live.claim([q], "w", 1)).jobs == []  # not due yet
    claimed: list[str] = []

    async def due() -> bool:
        claimed.extend(j.id for j in (await live.claim([q], "w", 1)).jobs)
        return claimed == ["later"]

    await poll_until(due, "the delayed job to fall due on the server clock", every=0.05)
    assert loop.time() - started >= SHORT - 0.05


async def test_a_lease_expires_after_its_ttl(live: Backend) -> None:
    loop = asyncio.get_running_loop()
    name = f"lease-{id(live)}-{loop.time()}"
    started = loop.time()
    assert await live.lease(name, "a", SHORT)
    assert not await live.lease(name, "b", SHORT)  # held by a

    async def taken_over() -> bool:
        return await live.lease(name, "b", SHORT)

    await poll_until(taken_over, "the lease to expire on the server clock", every=0.05)
    assert loop.time() - started >= SHORT - 0.05
    assert not await live.lease(name, "a", SHORT)  # b holds it now


async def test_a_ttl_runs_out_on_the_server_clock(live: Backend, q: str) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    await live.enqueue([new_job(q, "fresh", ttl=30), new_job(q, "stale", ttl=SHORT)])
    batch = await live.claim([q], "w", 1)
    [fresh] = batch.jobs  # creation time and claim time are on one clock, in seconds
    assert fresh.id == "fresh" and not fresh.expired_at(batch.now)
    stale = await get_job(live, q, "stale")
    assert stale is not None
    probe = q + "-probe"

    async def ran_out() -> bool:  # a new job's creation time is a reading of the server clock
        [a] = await live.enqueue([new_job(probe)])
        job = await get_job(live, probe, a.id)
        return job is not None and job.created_at >= stale.created_at + SHORT

    await poll_until(ran_out, "the TTL to run out on the server clock", every=0.05)
    assert loop.time() - started >= SHORT - 0.05
    late = await live.claim([q], "w", 1)
    assert [j.id for j in late.jobs] == ["stale"] and late.jobs[0].expired_at(late.now)
