"""Corrupt job records are quarantined where the operator sees them (issue 28, item 11).

The rule (``relaymq.backends.corrupt``): a record that cannot be read back, or whose state is
none of relaymq's, is failed into the DLQ with the reason by the first operation that comes
across it in a line (claim, promotion, recovery, counts); until then a listing shows it with
``extra["corrupt"]``. So what ``counts`` counts, ``list_jobs`` lists, nothing is dropped
silently, and the others go on. Every backend whose storage can be damaged from outside
(``BackendCase.corrupt``): it was a Redis job in state ``bogus`` dropped from ``waiting`` by a
claim and counted nowhere, a listing leaving damaged jobs out while the counts had them, and
an SQLite row in state ``bogus`` invisible to both.
"""

from __future__ import annotations

import pytest

from relaymq.backends.base import Backend
from relaymq.errors import CorruptRecordError
from relaymq.job import Job, JobState
from relaymq.testing import FakeClock
from tests.support.cases import BOGUS_STATE, BackendCase, Corrupt
from tests.support.jobs import get_job, new_job


@pytest.fixture
def corrupt(case: BackendCase) -> Corrupt:
    if case.corrupt is None:
        pytest.skip(f"{case.name} storage cannot be damaged from outside (process memory)")
    return case.corrupt


async def listed(backend: Backend, q: str) -> dict[str, tuple[JobState, Job]]:
    """Every job of ``q`` that a listing shows, by id, with the state it was listed under."""
    out: dict[str, tuple[JobState, Job]] = {}
    for state in JobState:
        for job in await backend.list_jobs(q, state, 0, 1000):
            assert job.id not in out, f"{job.id} listed twice"
            out[job.id] = (state, job)
    return out


def quarantined(job: Job, why: str) -> bool:
    """Failed into the DLQ with a reason naming the damage."""
    error = job.error or ""
    return job.state is JobState.FAILED and "corrupt record" in error and why in error


async def test_a_job_in_an_unknown_state_is_failed_into_the_dlq_and_counted(
    corrupt: Corrupt, backend: Backend, q: str
) -> None:
    await backend.enqueue([new_job(q, "a"), new_job(q, "bad"), new_job(q, "c")])
    await corrupt(backend, q, "bad", "state")
    assert sorted(j.id for j in (await backend.claim([q], "w", 10)).jobs) == ["a", "c"]
    counts = await backend.counts(q)
    assert (counts[JobState.ACTIVE], counts[JobState.FAILED], sum(counts.values())) == (2, 1, 3)
    [failed] = await backend.list_jobs(q, JobState.FAILED)
    assert failed.id == "bad" and quarantined(failed, repr(BOGUS_STATE)), failed
    assert (await backend.claim([q], "w", 10)).jobs == []  # it does not come back


async def test_what_counts_counts_listings_list_with_the_damage_named(
    corrupt: Corrupt, backend: Backend, q: str
) -> None:
    """8 of 10 waiting jobs damaged, 4 in their state, 4 in a field: before any worker comes,
    counts and listings agree and every damaged job is shown, quarantined or marked."""
    ids = [f"j{i}" for i in range(10)]
    await backend.enqueue([new_job(q, i) for i in ids])
    for i in ids[:4]:
        await corrupt(backend, q, i, "state")
    for i in ids[4:8]:
        await corrupt(backend, q, i, "field")
    counts = await backend.counts(q)
    shown = await listed(backend, q)
    assert sorted(shown) == ids  # none left out, none invented
    assert sum(counts.values()) == 10
    for state in JobState:
        assert counts[state] == sum(1 for s, _ in shown.values() if s is state), state
    for i in ids[:8]:
        state, job = shown[i]
        assert quarantined(job, "") or "corrupt" in job.extra, (i, state, job)
    for i in ids[:4]:  # a state nobody knows is named, whichever way it is shown
        _, job = shown[i]
        assert BOGUS_STATE in (job.error or "") + job.extra.get("corrupt", ""), job
    for i in ids[8:]:
        assert shown[i][0] is JobState.WAITING and "corrupt" not in shown[i][1].extra


async def test_recovery_fails_an_active_job_in_an_unknown_state(
    corrupt: Corrupt, backend: Backend, q: str, clock: FakeClock
) -> None:
    await backend.enqueue([new_job(q, "bad"), new_job(q, "ok")])
    await backend.claim([q], "w", 2)
    await corrupt(backend, q, "bad", "state")
    clock.advance(60)
    recovered = await backend.recover_stalled(q, threshold=30, max_stalled=5)
    assert recovered.requeued == ["ok"]
    assert "bad" in recovered.errors  # reported by the pass, which went on
    counts = await backend.counts(q)
    assert (counts[JobState.WAITING], counts[JobState.FAILED], counts[JobState.ACTIVE]) == (1, 1, 0)
    [failed] = await backend.list_jobs(q, JobState.FAILED)
    assert failed.id == "bad" and quarantined(failed, repr(BOGUS_STATE)), failed


async def test_a_delayed_job_in_an_unknown_state_is_quarantined_when_due(
    corrupt: Corrupt, backend: Backend, q: str, clock: FakeClock
) -> None:
    await backend.enqueue([new_job(q, "bad", delay=5), new_job(q, "later", delay=5)])
    await corrupt(backend, q, "bad", "state")
    clock.advance(10)
    assert [j.id for j in (await backend.claim([q], "w", 10)).jobs] == ["later"]
    counts = await backend.counts(q)
    assert (counts[JobState.ACTIVE], counts[JobState.FAILED], sum(counts.values())) == (1, 1, 2)
    [failed] = await backend.list_jobs(q, JobState.FAILED)
    assert failed.id == "bad" and quarantined(failed, repr(BOGUS_STATE)), failed


async def test_a_damaged_field_is_named_by_get_job_and_the_listing(
    corrupt: Corrupt, backend: Backend, q: str
) -> None:
    await backend.enqueue([new_job(q, "a"), new_job(q, "bad")])
    await corrupt(backend, q, "bad", "field")
    with pytest.raises(CorruptRecordError, match="bad"):  # its words: issue 28, item 12
        await get_job(backend, q, "bad")
    [_, bad] = await backend.list_jobs(q, JobState.WAITING)
    assert bad.id == "bad" and bad.extra["corrupt"], bad
