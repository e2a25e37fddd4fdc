"""One damaged row must not stop claims or a recovery pass (RELIABILITY: bad input)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from relaymq.backends.sqlite import SQLiteBackend
from relaymq.errors import ConfigError, CorruptRecordError
from relaymq.job import JobState
from relaymq.testing import FakeClock
from tests.support.case_sqlite import CASE
from tests.support.jobs import get_job, new_job


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest_asyncio.fixture
async def backend(tmp_path: Path, clock: FakeClock) -> AsyncIterator[SQLiteBackend]:
    b = await CASE.make(clock, tmp_path)
    assert isinstance(b, SQLiteBackend)
    yield b
    await b.close()


async def corrupt(backend: SQLiteBackend, q: str, job_id: str) -> None:
    assert CASE.corrupt is not None
    await CASE.corrupt(backend, q, job_id)


async def test_claim_fails_a_corrupt_job_and_takes_the_others(
    backend: SQLiteBackend, q: str
) -> None:
    await backend.enqueue([new_job(q, "a"), new_job(q, "bad"), new_job(q, "c")])
    await corrupt(backend, q, "bad")  # at the head of the line after "a"
    batch = await backend.claim([q], "w", 2)
    assert [j.id for j in batch.jobs] == ["a", "c"]  # the batch is filled past the bad row
    with pytest.raises(CorruptRecordError, match="token"):
        await get_job(backend, q, "bad")
    [listed] = await backend.list_jobs(q, JobState.FAILED)
    assert listed.id == "bad" and listed.error is not None
    assert "corrupt record" in listed.error and "token is 'garbage'" in listed.error
    assert "token" in listed.extra["corrupt"]
    counts = await backend.counts(q)
    assert (counts[JobState.ACTIVE], counts[JobState.FAILED], counts[JobState.WAITING]) == (2, 1, 0)
    assert (await backend.claim([q], "w", 10)).jobs == []  # it does not come back


async def test_recovery_goes_on_past_a_corrupt_active_job(
    backend: SQLiteBackend, q: str, clock: FakeClock
) -> None:
    await backend.enqueue([new_job(q, "x"), new_job(q, "bad"), new_job(q, "y")])
    await backend.claim([q], "w", 3)
    await corrupt(backend, q, "bad")
    clock.advance(60)
    recovered = await backend.recover_stalled(q, threshold=30, max_stalled=5)
    assert sorted(recovered.requeued) == ["x", "y"]
    assert recovered.errors == ["bad"] and recovered.failed == []
    [listed] = await backend.list_jobs(q, JobState.FAILED)
    assert listed.id == "bad" and "corrupt record" in (listed.error or "")
    assert [j.id for j in (await backend.claim([q], "w", 10)).jobs] == ["x", "y"]


async def test_a_row_with_an_unknown_state_is_passed_over_then_quarantined(
    backend: SQLiteBackend, q: str
) -> None:
    await backend.enqueue([new_job(q, "a"), new_job(q, "odd"), new_job(q, "c")])
    with sqlite3.connect(backend.path) as conn:
        conn.execute("UPDATE jobs SET state = 'w@iting' WHERE queue = ? AND id = 'odd'", (q,))
    conn.close()
    assert [j.id for j in (await backend.claim([q], "w", 10)).jobs] == ["a", "c"]
    with pytest.raises(CorruptRecordError, match="w@iting"):
        await get_job(backend, q, "odd")
    counts = await backend.counts(q)  # the counts trigger followed the damage, and told it
    assert (counts[JobState.WAITING], counts[JobState.ACTIVE], counts[JobState.FAILED]) == (0, 2, 1)
    [failed] = await backend.list_jobs(q, JobState.FAILED)
    assert failed.id == "odd" and "state is 'w@iting', not a job state" in (failed.error or "")


@pytest.mark.parametrize(
    "bad_url", ["sqlite://", "sqlite:///", "sqlite:///:memory:", "sqlite://host/x.db"]
)
def test_url_without_a_file_is_a_config_error(bad_url: str) -> None:
    with pytest.raises(ConfigError, match="sqlite:///"):
        SQLiteBackend(bad_url)


def test_relative_and_absolute_urls() -> None:
    assert SQLiteBackend("sqlite:///relaymq.db").path == "relaymq.db"
    assert SQLiteBackend("sqlite:////var/lib/x.db?synchronous=full").path == "/var/lib/x.db"
    with pytest.raises(ConfigError, match="synchronous"):
        SQLiteBackend("sqlite:///x.db?synchronous=off")
