"""What the contract suite cannot see from outside: MongoDB-specific guarantees of the backend.

Runs against the shared test server (one database per test), like the contract suite.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from pymongo import AsyncMongoClient

from relaymq.backends import connect
from relaymq.backends.mongodb import MongoDBBackend
from relaymq.backends.mongodb.indexes import INDEXES, JOBS
from relaymq.errors import BackendUnavailableError, ConfigError, CorruptRecordError
from relaymq.job import JobState
from relaymq.records.store import Beat, Outcome, Settle
from relaymq.testing import FakeClock
from tests.conftest import require
from tests.mongodb.conftest import PYMONGO_SOCKET_LEAK, free_port
from tests.support import case_mongodb
from tests.support.jobs import cancel, get_job, new_job
from tests.support.waiting import poll_until

Make = Callable[..., Awaitable[MongoDBBackend]]


@pytest_asyncio.fixture
async def make(tmp_path: Path) -> AsyncIterator[Make]:
    """``await make(clock=None, **options)``: handles on this test's own database."""
    require(case_mongodb.CASE)
    made: list[MongoDBBackend] = []

    async def build(clock: FakeClock | None = None, **options: object) -> MongoDBBackend:
        b = case_mongodb._TestBackend(case_mongodb.url(tmp_path), clock=clock, **options)
        await b.connect()
        case_mongodb._handles[b.database_name] += 1
        made.append(b)
        return b

    yield build
    for b in reversed(made):
        await b.close()


async def test_connect_url_picks_the_database_and_creates_every_index(
    make: Make, tmp_path: Path
) -> None:
    first = await make()
    await first.connect()  # idempotent
    second = await make()  # creating the same indexes again is a no-op
    assert first.database_name == second.database_name == case_mongodb.database_for(tmp_path)
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(case_mongodb.SERVER)
    try:
        db = client[first.database_name]
        for collection, models in INDEXES.items():
            names = {i["name"] async for i in await db[collection].list_indexes()}
            assert {m.document["name"] for m in models} <= names
    finally:
        await client.close()


async def test_connect_by_url_scheme() -> None:
    require(case_mongodb.CASE)
    backend = await connect(f"{case_mongodb.SERVER}/relaymq_test_scheme")
    try:
        assert isinstance(backend, MongoDBBackend)
        assert backend.database_name == "relaymq_test_scheme"
        assert backend.capabilities.durable and not backend.capabilities.transactions
    finally:
        await backend._client.drop_database(backend.database_name)  # type: ignore[union-attr]
        await backend.close()


def test_write_concern_is_majority_with_journal_unless_the_url_says_otherwise() -> None:
    default = MongoDBBackend("mongodb://127.0.0.1:1/db")
    assert default._client_options["w"] == "majority" and default._client_options["journal"]
    relaxed = MongoDBBackend("mongodb://127.0.0.1:1/db?w=1&journal=false")
    assert "w" not in relaxed._client_options and "journal" not in relaxed._client_options
    assert MongoDBBackend("mongodb://h/", write_concern=1)._client_options["w"] == 1
    assert MongoDBBackend("mongodb://h/").database_name == "relaymq"
    with pytest.raises(ConfigError):
        MongoDBBackend("redis://h/")


@PYMONGO_SOCKET_LEAK
async def test_unreachable_server_is_a_clear_error() -> None:
    backend = MongoDBBackend(f"mongodb://127.0.0.1:{free_port()}/x", server_selection_timeout=0.3)
    with pytest.raises(BackendUnavailableError, match="unreachable"):
        await backend.connect()


async def test_same_job_id_from_two_clients_at_once_is_stored_once(make: Make) -> None:
    a, b = await make(), await make()
    q = "dedup"
    answers = await asyncio.gather(
        *(client.enqueue([new_job(q, f"id-{n}") for n in range(5)]) for client in (a, b, a, b))
    )
    for n in range(5):
        fresh = [batch[n] for batch in answers if not batch[n].duplicate]
        assert len(fresh) == 1, f"id-{n} accepted {len(fresh)} times"
    assert (await a.counts(q))[JobState.WAITING] == 5


async def test_batch_claims_on_the_server_clock_never_share_a_job(make: Make) -> None:
    clients = [await make() for _ in range(3)]
    q = "race"
    await clients[0].enqueue([new_job(q) for _ in range(40)])

    async def drain(n: int) -> list[tuple[str, int]]:
        got: list[tuple[str, int]] = []
        while batch := (await clients[n % 3].claim([q], f"w{n}", 5)).jobs:
            got += [(j.id, j.token) for j in batch]
        return got

    results = await asyncio.gather(*(drain(n) for n in range(6)))
    claimed = [c for r in results for c in r]
    assert len(claimed) == 40 and len({job_id for job_id, _ in claimed}) == 40
    assert {token for _, token in claimed} == {1}


async def test_server_clock_decides_due_jobs_and_leases(make: Make) -> None:
    backend = await make()  # no test clock: $$NOW
    q = "clock"
    await backend.enqueue([new_job(q, "soon", delay=0.3)])
    assert (await backend.claim([q], "w", 1)).jobs == []
    await asyncio.wait_for(backend.wait([q], 5), 5)  # returns when the job falls due
    [job] = (await backend.claim([q], "w", 1)).jobs
    assert job.id == "soon"
    assert await backend.lease("lease", "A", ttl=0.2)
    assert not await backend.lease("lease", "B", ttl=0.2)

    async def taken_over() -> bool:
        return await backend.lease("lease", "B", ttl=5)

    await poll_until(taken_over, "the lease to lapse on the server's clock", every=0.05)


async def set_fields(backend: MongoDBBackend, queue: str, job_id: str, **fields: object) -> None:
    """Damage a stored job behind the backend's back."""
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(case_mongodb.SERVER)
    try:
        jobs = client[backend.database_name][JOBS]
        await jobs.update_one({"queue": queue, "id": job_id}, {"$set": fields})
    finally:
        await client.close()


@pytest.mark.parametrize(
    "damage",
    [{"token": "x"}, {"attempts": "x"}, {"payload": 7}, {"task": None}],
    ids=["token", "attempts", "payload", "task"],
)
async def test_a_corrupt_job_is_failed_and_the_claim_goes_on(
    make: Make, damage: dict[str, object]
) -> None:
    backend = await make(FakeClock())
    q = "bad"
    await backend.enqueue([new_job(q, "a"), new_job(q, "broken"), new_job(q, "c")])
    await set_fields(backend, q, "broken", **damage)
    with pytest.raises(CorruptRecordError, match="broken"):
        await get_job(backend, q, "broken")
    batch = await backend.claim([q], "w", 3)
    assert [j.id for j in batch.jobs] == ["a", "c"]
    counts = await backend.counts(q)
    assert (counts[JobState.ACTIVE], counts[JobState.FAILED]) == (2, 1)
    [listed] = await backend.list_jobs(q, JobState.FAILED)
    assert listed.id == "broken" and "corrupt record" in (listed.error or "")
    assert next(iter(damage)) in listed.extra["corrupt"]


async def test_recovery_goes_past_unreadable_active_jobs(make: Make) -> None:
    clock = FakeClock()
    backend = await make(clock)
    q = "bad-active"
    await backend.enqueue([new_job(q, i) for i in ("a", "no-token", "no-payload", "c")])
    await backend.claim([q], "w", 4)
    await set_fields(backend, q, "no-token", token="x")
    await set_fields(backend, q, "no-payload", payload=None)
    clock.advance(60)
    recovered = await backend.recover_stalled(q, threshold=30, max_stalled=5)
    assert sorted(recovered.requeued) == ["a", "c"]
    assert recovered.failed == ["no-payload"]  # still fenced by its token: failed with a reason
    assert recovered.errors == ["no-token"]  # cannot be fenced: left alone, reported


async def test_heartbeat_batch_reports_each_claim(make: Make) -> None:
    backend = await make(FakeClock())
    q = "beats"
    await backend.enqueue([new_job(q) for _ in range(3)])
    a, b, c = (await backend.claim([q], "w", 3)).jobs
    await cancel(backend, q, b.id)
    await backend.settle([Settle(c.claim, Outcome.COMPLETE)])
    results = await backend.heartbeat([Beat(a.claim), Beat(b.claim), Beat(c.claim)])
    assert [(r.held, r.cancel_requested) for r in results] == [
        (True, False),
        (False, True),
        (False, False),
    ]


async def test_error_strings_are_stored_literally(make: Make) -> None:
    backend = await make(FakeClock())
    q = "literal"
    await backend.enqueue([new_job(q, max_attempts=2)])
    [job] = (await backend.claim([q], "$worker", 1)).jobs
    assert job.worker_id == "$worker"  # not read as a field path
    await backend.settle([Settle(job.claim, Outcome.FAIL, error="$error {$x}")])
    stored = await get_job(backend, q, job.id)
    assert stored is not None and stored.error == "$error {$x}"


async def test_event_log_is_trimmed_to_the_newest_events(make: Make) -> None:
    publisher = await make(events_keep=150)
    listener = await make()
    sub = await listener.subscribe()
    try:
        for n in range(3):  # a subscriber that keeps up misses nothing while the log is trimmed
            await publisher.publish([f"{n}-{i}".encode() for i in range(100)])
            got = [await asyncio.wait_for(anext(sub), 10) for _ in range(100)]
            assert got == [f"{n}-{i}".encode() for i in range(100)]
    finally:
        await sub.aclose()
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(case_mongodb.SERVER)
    try:
        stored = await client[publisher.database_name]["events"].count_documents({})
        assert stored == 150  # trimmed at every 100th id to the newest 150
    finally:
        await client.close()


async def test_a_timed_out_read_does_not_end_the_subscription(make: Make) -> None:
    publisher, listener = await make(), await make()
    sub = await listener.subscribe()
    try:
        with pytest.raises(TimeoutError):  # what JobHandle.result does between re-checks
            await asyncio.wait_for(anext(sub), 0.3)
        await publisher.publish([b"after the timeout"])
        assert await asyncio.wait_for(anext(sub), 10) == b"after the timeout"
    finally:
        await sub.aclose()
    with pytest.raises(StopAsyncIteration):
        await anext(sub)


async def test_dependency_ends_a_crash_left_untold_are_counted_by_recovery(make: Make) -> None:
    """A process that dies between a dependency's end and telling its dependents (two writes
    here) leaves them blocked; the elected maintenance's next recovery pass counts the end."""
    clock = FakeClock()
    backend = await make(clock)
    await backend.enqueue([new_job("q", "a"), new_job("q", "b")])
    await backend.enqueue(
        [new_job("q", "p", depends_on=("a", "b")), new_job("q", "f", depends_on=("b",))]
    )
    a, _ = sorted((await backend.claim(["q"], "w", 2)).jobs, key=lambda j: j.id)
    await backend.settle([Settle(a.claim, Outcome.COMPLETE, result=b"1")])
    # "b" fails, as its settle would store it, but the process dies before telling anyone.
    await set_fields(backend, "q", "b", state="failed", error="x")
    assert (await get_job(backend, "q", "p")).state is JobState.BLOCKED  # type: ignore[union-attr]
    await backend.recover_stalled("q", 30, 5)
    p, f = await backend.get_jobs("q", ["p", "f"])
    assert p is not None and (p.state, p.error) == (JobState.FAILED, "dependency b ended failed")
    assert f is not None and f.state is JobState.FAILED
    # A list emptied but the job not released (the last step lost): released by recovery.
    await backend.enqueue([new_job("q", "c"), new_job("q", "r", depends_on=("c",))])
    await set_fields(backend, "q", "r", waiting_on=[])
    await backend.recover_stalled("q", 30, 5)
    assert (await get_job(backend, "q", "r")).state is JobState.DELAYED  # type: ignore[union-attr]
