"""Fairness between limit keys (``Limits.fair``) on every backend whose claims choose their
jobs: claims rotate over the keys with waiting jobs, so a key with few jobs behind a key with
many makes progress from the first claims; within a key, claim order holds."""

from __future__ import annotations

import pytest

from relaymq.backends.base import Backend
from relaymq.errors import ConfigError
from relaymq.job import Job
from relaymq.records.limits import Limits
from relaymq.records.store import Outcome, Settle
from tests.conftest import MakeBackend
from tests.contract.test_keys import claim_exactly
from tests.support.jobs import new_job


def fair(backend: Backend) -> None:
    if not backend.capabilities.fair_claims:
        pytest.skip("capability fair_claims is false")


async def test_a_broker_backend_refuses_fairness_and_stores_nothing(
    backend: Backend, q: str
) -> None:
    if backend.capabilities.fair_claims:
        pytest.skip("this backend's claims rotate over keys")
    with pytest.raises(ConfigError, match="fair=True"):
        await backend.set_limits(q, Limits(fair=True))
    assert q not in await backend.list_limits()


def test_weights_without_fair_and_bad_weights_are_refused() -> None:
    with pytest.raises(ConfigError, match="with fair=True"):
        Limits(weights=(("a", 2),))
    for bad in ((("a", 0),), (("a", True),), (("", 1),), (("b", 1), ("a", 1))):
        with pytest.raises(ConfigError, match="weight"):
            Limits(fair=True, weights=bad)  # type: ignore[arg-type]


async def test_fair_limits_are_stored_and_listed(backend: Backend, q: str) -> None:
    fair(backend)
    stored = Limits(fair=True, weights=(("big", 3), ("mid", 2)), key_max_active=4)
    await backend.set_limits(q, stored)
    assert (await backend.list_limits())[q] == stored
    await backend.set_limits(q, Limits(fair=True))
    assert (await backend.list_limits())[q] == Limits(fair=True)


# The MongoDB test server checks a new document against every stored one (mongoeco 4.11's
# unique-index check scans the collection), so its 1,010 inserts take 90 s on an idle machine.
@pytest.mark.timeout(300)
async def test_a_small_key_is_not_starved_by_a_big_one(make_backend: MakeBackend, q: str) -> None:
    backend = await make_backend()
    fair(backend)
    await backend.set_limits(q, Limits(fair=True))
    await backend.enqueue([new_job(q, f"a{i:04}", limit_key="A") for i in range(1000)])
    await backend.enqueue([new_job(q, f"b{i}", limit_key="B") for i in range(10)])
    started: list[Job] = []
    for _ in range(20):  # one worker of concurrency 1: one claim per job, each job completed
        (job,) = await claim_exactly(backend, q, 1)
        started.append(job)
        await backend.settle([Settle(job.claim, Outcome.COMPLETE, result=b"1")])
    assert sorted(j.id for j in started if j.limit_key == "B") == [f"b{i}" for i in range(10)]
    a_ids = [j.id for j in started if j.limit_key == "A"]
    assert a_ids == sorted(a_ids) == [f"a{i:04}" for i in range(10)]  # in order within A


async def test_rounds_keep_priority_within_a_key_and_weights_give_more_turns(
    backend: Backend, q: str
) -> None:
    fair(backend)
    await backend.set_limits(q, Limits(fair=True, weights=(("big", 2),)))
    jobs = [new_job(q, f"big{i}", limit_key="big", priority=5) for i in range(6)]
    jobs += [new_job(q, f"small{i}", limit_key="small", priority=5) for i in range(3)]
    jobs += [new_job(q, "urgent", limit_key="small", priority=1)]
    await backend.enqueue(jobs)
    order: list[str] = []
    for _ in range(9):
        (job,) = await claim_exactly(backend, q, 1)
        order.append(job.id)
    # Each round: two of "big" (its weight), one of "small"; "small"'s own order is priority
    # first ("urgent"), then FIFO.
    rounds = [order[i : i + 3] for i in range(0, 9, 3)]
    assert [sorted(r) for r in rounds] == [
        ["big0", "big1", "urgent"],
        ["big2", "big3", "small0"],
        ["big4", "big5", "small1"],
    ]


@pytest.mark.parametrize("also_cancel", [False, True])
async def test_a_job_that_joins_the_line_ahead_of_jobs_passed_over_is_claimed(
    backend: Backend, q: str, also_cancel: bool
) -> None:
    """Redis reads on behind the jobs a round passed over at the front of the line; a job that
    joins ahead of them (a higher priority), while one of them leaves (cancelled) or not, is
    still claimed first."""
    fair(backend)
    await backend.set_limits(q, Limits(fair=True))
    jobs = [new_job(q, f"a{i}", limit_key="A", priority=5) for i in range(5)]
    jobs += [new_job(q, f"b{i}", limit_key="B", priority=5) for i in range(3)]
    await backend.enqueue([*jobs, new_job(q, "d0", limit_key="D", priority=5)])
    first = [j.id for _ in range(2) for j in await claim_exactly(backend, q, 1)]
    assert first == ["a0", "b0"]  # the second claim passed a1..a4 over: A had its turn
    if also_cancel:
        assert await backend.cancel_jobs(q, ["a2"]) == [True]
    await backend.enqueue([new_job(q, "c0", limit_key="C", priority=1)])
    (job,) = await claim_exactly(backend, q, 1)
    assert job.id == "c0"
