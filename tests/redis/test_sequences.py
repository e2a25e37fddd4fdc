"""Sequences on Redis: the sequence's keys (keys.py) live only while a job holds its place,
and a claim's record carries the job's sequence."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

from relaymq.backends.redis.keys import Keys
from relaymq.job import JobState, SequenceFailure
from relaymq.records.store import Outcome, Settle
from tests.redis import support
from tests.support.case_redis import URL
from tests.support.jobs import get_job, new_job


async def test_a_sequences_keys_go_when_its_last_job_leaves(tmp_path: Path) -> None:
    reason = support.unavailable(URL)
    if reason:
        pytest.skip(reason)
    b = await support.make(URL, None, tmp_path)
    client = Redis.from_url(URL)
    try:
        q = "seqkeys"
        keys = Keys(support.test_prefix(tmp_path))
        seqs, runs = keys.sequences(q)
        await b.enqueue(
            [
                new_job(q, "a", sequence="s", sequence_on_failure=SequenceFailure.CONTINUE),
                new_job(q, "b", sequence="s"),
                new_job(q, "c", sequence="t"),
            ]
        )
        assert await client.smembers(seqs) == {b"s", b"t"}
        claimed = {j.id: j for j in (await b.claim([q], "w", 10)).jobs}
        assert set(claimed) == {"a", "c"}  # b waits for a
        assert claimed["a"].sequence == "s"
        assert claimed["a"].sequence_on_failure is SequenceFailure.CONTINUE
        assert await get_job(b, q, "a") == claimed["a"]
        # a fails with continue: it leaves, and b is the head; c completes: t is gone.
        await b.settle(
            [
                Settle(claimed["a"].claim, Outcome.FAIL, error="x"),
                Settle(claimed["c"].claim, Outcome.COMPLETE),
            ]
        )
        assert await client.smembers(seqs) == {b"s"}
        assert await client.hkeys(runs) == [b"s"]
        head = await b.sequence_head(q, "s")
        assert head is not None and (head.id, head.state) == ("b", JobState.WAITING)
        assert await b.remove_jobs(q, ["b"]) == [True]
        assert await b.sequence_head(q, "s") is None
        for name in (seqs, runs, keys.sequence(q, "s"), keys.sequence(q, "t")):
            assert not await client.exists(name)
        # A retry from the DLQ brings a back at its place.
        assert await b.retry_jobs(q, ["a"]) == [True]
        head = await b.sequence_head(q, "s")
        assert head is not None and head.id == "a"
        await b.obliterate(q)
        assert [k async for k in client.scan_iter(match=keys.base(q) + ":*")] == []
    finally:
        await client.aclose()
        await b.close()
