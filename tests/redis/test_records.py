"""The claim path's record (built from the pre-claim HGETALL) is the stored record."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from relaymq.backends.redis.records import CLAIMED_ORDER, parse_claimed
from relaymq.errors import CorruptRecordError
from relaymq.job import Job, JobState, NewJob
from relaymq.records.store import Outcome, Settle
from tests.redis import support
from tests.support.case_redis import URL
from tests.support.jobs import get_job


def test_claimed_order_is_the_job_field_order() -> None:
    names = [f.name for f in dataclasses.fields(Job)]
    assert names[: len(CLAIMED_ORDER)] == CLAIMED_ORDER


async def test_claimed_job_equals_the_stored_record(tmp_path: Path) -> None:
    reason = support.unavailable(URL)
    if reason:
        pytest.skip(reason)
    b = await support.make(URL, None, tmp_path)
    try:
        q = "records"
        await b.enqueue(
            [
                NewJob(q, "plain", "t:plain", b"p1"),
                NewJob(
                    q, "full", "t:full", b"p2", priority=-3, ttl=30.5, max_attempts=4, timeout=2.25
                ),
            ]
        )
        # A second attempt: retry once so attempts, token and error are not the defaults.
        first = (await b.claim([q], "w1", 10)).jobs
        retry = [Settle(j.claim, Outcome.RETRY, error="boom") for j in first if j.id == "full"]
        assert await b.settle(retry) == [True]
        claimed = {j.id: j for j in (await b.claim([q], "w2", 10)).jobs}
        claimed.update({j.id: j for j in first if j.id == "plain"})
        for job_id, job in claimed.items():
            stored = await get_job(b, q, job_id)
            assert stored == job
            assert job.state is JobState.ACTIVE and job.worker_id in ("w1", "w2")
        assert (claimed["full"].attempts, claimed["full"].token) == (2, 2)
        assert claimed["full"].error == "boom"
        # Settled: the worker id is not reported any more.
        assert await b.settle([Settle(claimed["full"].claim, Outcome.COMPLETE, result=b"r")])
        done = await get_job(b, q, "full")
        assert done is not None and done.worker_id is None and done.result == b"r"
    finally:
        await b.close()


async def test_a_record_without_its_task_says_so_in_words(tmp_path: Path) -> None:
    reason = support.unavailable(URL)
    if reason:
        pytest.skip(reason)
    b = await support.make(URL, None, tmp_path)
    try:
        await b.enqueue([NewJob("records", "no-task", "t:plain", b"p")])
        await b._run([("HDEL", b._keys.job("records", "no-task"), "task")], "damage")
        with pytest.raises(CorruptRecordError) as caught:
            await get_job(b, "records", "no-task")
        assert "job record has no 'task' field" in str(caught.value)
        assert "AssertionError" not in str(caught.value)
    finally:
        await b.close()


def test_a_claimed_record_without_its_task_says_so_in_words() -> None:
    pairs = [b"payload", b"p", b"priority", b"0", b"seq", b"1", b"created_at", b"1.0"]
    with pytest.raises(CorruptRecordError, match="job record has no 'task' field"):
        parse_claimed("records", "no-task", pairs, 1, 2.0, "w")
