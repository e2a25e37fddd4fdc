"""One damaged stored record must not stop claims or recovery (RELIABILITY: bad input).

Each case damages a record in its own storage with its ``corrupt`` hook; a backend whose
storage cannot be damaged from outside (InMemory) has no hook and nothing to prove here.
"""

from __future__ import annotations

import pytest

from relaymq.backends.base import Backend
from relaymq.errors import CorruptRecordError
from relaymq.job import JobState
from relaymq.testing import FakeClock
from tests.support.cases import BackendCase
from tests.support.jobs import new_job


@pytest.fixture
def damage(case: BackendCase) -> BackendCase:
    if case.corrupt is None:
        pytest.skip(f"{case.name} storage cannot be damaged from outside")
    return case


async def assert_failed_or_unreadable(backend: Backend, q: str, job_id: str) -> None:
    try:
        job = await backend.get_job(q, job_id)
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
