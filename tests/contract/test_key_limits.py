"""A cap on the active jobs of each limit key (``Limits.key_max_active``) on every backend,
decided by the claim itself, so it holds over every process's claims together: the claim
passes over a key at its cap to the jobs behind, and a retry, a completion or recovery frees
the key's slot."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from relaymq.app import App
from relaymq.backends.base import Backend
from relaymq.errors import ConfigError
from relaymq.instrumented import Instrumented
from relaymq.job import Job, JobState
from relaymq.keyusage import key_usage
from relaymq.records.limits import Limits
from relaymq.records.store import Outcome, Settle
from relaymq.testing import FakeClock
from tests.conftest import MakeBackend
from tests.contract.test_keys import claim_exactly
from tests.contract.test_limits import claim_from_all, claim_until_limited
from tests.support.jobs import new_job


async def active_keys(backend: Backend, q: str) -> Counter[str | None]:
    jobs = await backend.list_jobs(q, JobState.ACTIVE, limit=1000)
    return Counter(j.limit_key for j in jobs)


async def test_key_caps_are_stored_and_listed(backend: Backend, q: str) -> None:
    both = Limits(key_max_active=2, key_rate=5, key_per=60)
    await backend.set_limits(q, both)
    assert (await backend.list_limits())[q] == both
    await backend.set_limits(q, Limits(key_max_active=1))  # replaces, does not merge
    assert (await backend.list_limits())[q] == Limits(key_max_active=1)
    await backend.set_limits(q, None)
    assert q not in await backend.list_limits()


def test_a_cap_below_one_is_refused_and_nothing_is_declared() -> None:
    app = App("memory://")
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ConfigError, match="key_max_active"):
            Limits(key_max_active=bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="key_max_active"):
            app.limit("q", key_max_active=bad)  # type: ignore[arg-type]
    assert app.limits == {}


async def test_the_claim_passes_over_a_key_at_its_cap(backend: Backend, q: str) -> None:
    await backend.set_limits(q, Limits(key_max_active=1))
    keys = {"a1": "a", "a2": "a", "b1": "b", "a3": "a", "n1": None, "b2": "b", "c1": "c"}
    await backend.enqueue([new_job(q, i, limit_key=k) for i, k in keys.items()])
    first = await claim_until_limited(backend, q)
    assert sorted(j.id for j in first) == ["a1", "b1", "c1", "n1"]  # a2, b2 keep their place
    batch = await backend.claim([q], "w", 10)
    assert batch.jobs == [] and batch.limited == {q: None}  # until an active job ends
    by_id = {j.id: j for j in first}
    await backend.settle([Settle(by_id["a1"].claim, Outcome.COMPLETE, result=b"1")])
    assert [j.id for j in await claim_exactly(backend, q, 1)] == ["a2"]  # a's next, in order
    await backend.settle([Settle(by_id["b1"].claim, Outcome.RETRY, error="x", delay=0)])
    again = await claim_until_limited(backend, q)
    assert [j.limit_key for j in again] == ["b"]  # b's slot is free again: one of b runs
    assert await active_keys(backend, q) == Counter({"a": 1, "b": 1, "c": 1, None: 1})


async def test_the_claim_passes_over_a_long_run_of_one_keys_jobs(backend: Backend, q: str) -> None:
    """More jobs of one key ahead than a claim reads at first (PostgreSQL reads a short page
    of candidates, then the whole scan when the page gave too few)."""
    await backend.set_limits(q, Limits(key_max_active=1))
    jobs = [new_job(q, f"a{i:02}", limit_key="a") for i in range(40)]
    await backend.enqueue([*jobs, new_job(q, "b0", limit_key="b"), new_job(q, "c0")])
    got = (await backend.claim([q], "w", 5)).jobs
    if backend.capabilities.fair_claims:  # the claim chooses its jobs: all three at once
        assert len(got) == 3
    async with asyncio.timeout(10):  # a broker hands out the jobs behind over a few claims
        while len(got) < 3:
            got += (await backend.claim([q], "w", 5)).jobs
    assert sorted(j.id for j in got) == ["a00", "b0", "c0"]
    assert (await backend.claim([q], "w", 5)).jobs == []  # a is at its cap


async def test_a_key_the_claim_spends_holds_nothing_back_when_it_has_no_more_jobs(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    """A claim that takes a key's last job and spends its window reports no limit: nothing
    of that key waits (the jobs it took do not count as held back)."""
    clock.advance(-clock() % 5)  # the start of a key window
    await backend.set_limits(q, Limits(key_rate=1, key_per=5))
    await backend.enqueue([new_job(q, "a1", limit_key="a"), new_job(q, "n1")])
    batch = await backend.claim([q], "w", 3)
    assert sorted(j.id for j in batch.jobs) == ["a1", "n1"]
    assert batch.limited == {}


async def test_a_delayed_job_that_fell_due_joins_a_claim_within_key_caps(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    await backend.set_limits(q, Limits(key_max_active=1))
    await backend.enqueue([new_job(q, "later", limit_key="b", delay=30)])
    await backend.enqueue([new_job(q, "a0", limit_key="a"), new_job(q, "a1", limit_key="a")])
    assert [j.id for j in await claim_exactly(backend, q, 1)] == ["a0"]
    clock.advance(31)  # "later" is due: the claim promotes it and takes it past a1 (a capped)
    got = await claim_exactly(backend, q, 1)
    assert [j.id for j in got] == ["later"]
    assert (await backend.claim([q], "w", 5)).jobs == []


async def test_a_stalled_job_holds_its_key_until_recovered(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    await backend.set_limits(q, Limits(key_max_active=1))
    await backend.enqueue([new_job(q, "s1", limit_key="s"), new_job(q, "s2", limit_key="s")])
    assert [j.id for j in await claim_until_limited(backend, q)] == ["s1"]
    clock.advance(60)  # s1's worker went silent: it stalled
    assert (await backend.claim([q], "w", 10)).jobs == []
    assert (await backend.recover_stalled(q, 30, max_stalled=5)).requeued == ["s1"]
    assert [j.limit_key for j in await claim_until_limited(backend, q)] == ["s"]  # one again


async def test_a_key_cap_holds_over_concurrent_claims_of_many_processes(
    make_backend: MakeBackend, q: str
) -> None:
    handles = [await make_backend() for _ in range(3)]
    await handles[0].set_limits(q, Limits(key_max_active=2))
    await handles[0].enqueue(
        [new_job(q, f"{k}{i}", limit_key=k) for i in range(8) for k in ("x", "y", "z")]
    )
    taken: list[Job] = []
    async with asyncio.timeout(10):
        while len(taken) < 6:
            taken += await claim_from_all(handles, q, 3)
            assert max(Counter(j.limit_key for j in taken).values()) <= 2
            assert max((await active_keys(handles[0], q)).values()) <= 2
        # Completing frees the slots, and the cap holds again over the next round.
        await handles[1].settle([Settle(j.claim, Outcome.COMPLETE, result=b"1") for j in taken])
        more: list[Job] = []
        while len(more) < 6:
            more += await claim_from_all(handles, q, 3)
            assert max(Counter(j.limit_key for j in more).values()) <= 2
    assert len({j.id for j in taken + more}) == 12


async def test_operators_see_the_keys_at_their_cap_and_the_jobs_held_back(
    backend: Backend, q: str
) -> None:
    limits = Limits(key_max_active=1)
    await backend.set_limits(q, limits)
    keys = {"a1": "a", "a2": "a", "a3": "a", "b1": "b", "b2": "b", "c1": "c"}
    await backend.enqueue([new_job(q, i, limit_key=k) for i, k in keys.items()])
    assert len(await claim_until_limited(backend, q)) == 3
    usage = await key_usage(Instrumented(backend), q, limits)
    assert usage.active == [("a", 1), ("b", 1), ("c", 1)]
    assert usage.at_cap == ["a", "b", "c"] and usage.held_back == 3
    assert (await key_usage(Instrumented(backend), q, None)).held_back == 0
