"""Sequences on MongoDB, beyond the contract (tests/contract/test_sequences.py): the claims of
a queue with sequences take turns under its lease, and the documents and index they rely on.

Runs against the shared test server (one database per test), like the contract suite.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from pymongo import AsyncMongoClient

from relaymq.backends.mongodb.indexes import JOBS, LOCKS, QUEUES
from relaymq.backends.mongodb.records import to_date
from relaymq.records.store import Outcome, Settle
from relaymq.testing import FakeClock
from tests.mongodb.test_mongodb import Make, make  # noqa: F401 (the fixture)
from tests.support import case_mongodb
from tests.support.jobs import new_job


@pytest_asyncio.fixture
async def client() -> AsyncIterator[AsyncMongoClient[dict[str, object]]]:
    c: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(case_mongodb.SERVER)
    yield c
    await c.close()


async def test_a_queue_with_sequences_claims_under_its_lease(
    make: Make,  # noqa: F811
    client: AsyncMongoClient[dict[str, object]],
) -> None:
    clock = FakeClock()
    backend = await make(clock=clock)
    db = client[backend.database_name]
    q = "seq"
    await backend.enqueue([new_job(q, "plain")])
    assert (await db[QUEUES].find_one({"_id": q}) or {}).get("sequences") is None
    await backend.enqueue([new_job(q, f"s{i}", sequence="s") for i in range(3)])
    assert (await db[QUEUES].find_one({"_id": q}) or {}).get("sequences") is True
    stored = [d async for d in db[JOBS].find({"queue": q, "sequence": "s"}).sort("seq", 1)]
    assert [(d["id"], d["seq_failure"]) for d in stored] == [(f"s{i}", "hold") for i in range(3)]
    assert [d["sequence_pos"] for d in stored] == [d["seq"] for d in stored]

    # another claim of the queue holds the lease: this one takes nothing, not even "plain"
    far = clock.now + 3600
    await db[LOCKS].insert_one(
        {"_id": f"limits:{q}", "owner": "another", "expires_at": to_date(far)}
    )
    batch = await backend.claim([q], "w", 10)
    assert batch.jobs == []
    await db[LOCKS].delete_one({"_id": f"limits:{q}"})

    batch = await backend.claim([q], "w", 10)
    assert sorted(j.id for j in batch.jobs) == ["plain", "s0"]
    assert batch.limited == {q: None}  # s1 and s2 wait for s0
    s0 = next(j for j in batch.jobs if j.id == "s0")
    answer = await backend.settle_and_claim(
        [Settle(s0.claim, Outcome.RETRY, error="again", delay=5.0)], [q], "w", 10
    )
    assert answer.batch is not None
    assert answer.batch.jobs == [] and answer.batch.limited == {q: None}  # s0 is delayed
    clock.advance(5)
    [head] = (await backend.claim([q], "w", 10)).jobs  # the retry kept its place
    assert head.id == "s0" and head.attempts == 2
    await backend.settle([Settle(head.claim, Outcome.RETRY, error="again")])  # at once
    [head] = (await backend.claim([q], "w", 10)).jobs  # at the back of the line, yet first
    assert head.id == "s0" and head.attempts == 3
    retried = await db[JOBS].find_one({"queue": q, "id": "s0"})
    assert retried is not None
    assert retried["seq"] > stored[2]["seq"] and retried["sequence_pos"] == stored[0]["seq"]

    index = {i["name"]: i async for i in await db[JOBS].list_indexes()}["sequence"]
    assert index["partialFilterExpression"] == {"sequence": {"$type": "string"}}
