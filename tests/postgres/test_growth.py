"""Backend-specific behaviour: retention of finished jobs, bytes that text would reject,
events too large for a NOTIFY payload, counters that stay exact without scanning."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest
import pytest_asyncio

from relaymq import retention
from relaymq.backends.postgres import PostgresBackend
from relaymq.backends.postgres import admin as postgres_admin
from relaymq.backends.postgres.enqueue import facts_fit
from relaymq.errors import ConfigError
from relaymq.instrumented import Instrumented
from relaymq.job import TERMINAL, JobState
from relaymq.records.retention import Retention
from relaymq.records.store import Beat, Outcome, Settle
from relaymq.recovery import Maintenance
from relaymq.settings import Settings
from relaymq.testing import FakeClock
from tests.support.case_postgres import DATABASE, SERVER, drop_schema, ensure_database
from tests.support.jobs import get_job, new_job

Make = Callable[..., PostgresBackend]


@pytest_asyncio.fixture
async def make(postgres_case: None) -> AsyncIterator[Callable[..., object]]:
    await ensure_database()
    schema = f"g_{uuid.uuid4().hex[:12]}"
    made: list[PostgresBackend] = []

    async def build(**options: object) -> PostgresBackend:
        b = PostgresBackend(f"{SERVER}/{DATABASE}?schema={schema}&migrate=true", **options)
        await b.connect()
        made.append(b)
        return b

    yield build
    for b in made:
        await b.close()
    await drop_schema(schema)


async def test_finished_jobs_are_pruned_after_retention(make: Make, clock: FakeClock) -> None:
    backend = await make(clock=clock, retention=10)
    assert backend.retention == 10  # applied by the workers' elected maintenance
    q = "retained"
    await backend.enqueue([new_job(q, f"j{i}") for i in range(7)])
    jobs = (await backend.claim([q], "w", 5)).jobs
    await backend.settle([Settle(j.claim, Outcome.COMPLETE) for j in jobs[:3]])
    await backend.settle([Settle(j.claim, Outcome.FAIL, error="x") for j in jobs[3:4]])
    settings = Settings(stalled_threshold=3600)  # nothing here is stalled: only retention acts
    clock.advance(5)
    await Maintenance(Instrumented(backend), [q], settings, "early").run_once()
    assert await get_job(backend, q, jobs[0].id) is not None  # not old enough yet
    clock.advance(6)
    await Maintenance(Instrumented(backend), [q], settings, "early").run_once()
    counts = await backend.counts(q)
    assert counts == {**{s: 0 for s in JobState}, JobState.WAITING: 2, JobState.ACTIVE: 1}
    assert await get_job(backend, q, jobs[0].id) is None
    assert await get_job(backend, q, jobs[4].id) is not None  # still active: untouched


async def test_clean_with_the_retention_age_deletes_in_batches_and_keeps_fresh_jobs(
    make: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres_admin, "CLEAN_BATCH", 2)
    backend = await make(clock=clock, retention=10)
    statements: list[str] = []
    fetchrow = backend._fetchrow

    async def counting(name: str, *args: object) -> asyncpg.Record:
        statements.append(name)
        return await fetchrow(name, *args)

    monkeypatch.setattr(backend, "_fetchrow", counting)

    async def retain() -> int:  # what the elected maintenance runs for the queue
        assert backend.retention is not None
        return sum([await backend.clean(q, s, backend.retention) for s in sorted(TERMINAL)])

    q = "batched"
    await backend.enqueue([new_job(q, f"j{i}") for i in range(9)])
    jobs = (await backend.claim([q], "w", 7)).jobs
    await backend.settle([Settle(j.claim, Outcome.COMPLETE) for j in jobs[:5]])
    await backend.settle([Settle(j.claim, Outcome.FAIL, error="x") for j in jobs[5:6]])
    clock.advance(5)
    assert await retain() == 0  # not old enough yet
    [fresh] = (await backend.claim([q], "w", 1)).jobs
    await backend.settle([Settle(fresh.claim, Outcome.COMPLETE)])
    clock.advance(6)
    statements.clear()
    assert await retain() == 6
    # five old completed jobs in batches of two take three statements; one for each other state
    assert statements.count("clean") == 3 + 3
    counts = await backend.counts(q)
    assert counts == {
        **{s: 0 for s in JobState},
        JobState.WAITING: 1,
        JobState.ACTIVE: 1,
        JobState.COMPLETED: 1,
    }
    assert await get_job(backend, q, fresh.id) is not None  # finished 6 s ago: kept
    assert await get_job(backend, q, jobs[6].id) is not None  # still active: untouched


def test_retention_follows_the_url_as_the_default_policy() -> None:
    base = f"{SERVER}/{DATABASE}"
    ops = Instrumented(PostgresBackend(f"{base}?retention=60"))
    assert ops.backend.retention == 60
    assert retention.default(ops) == Retention(completed=60, cancelled=60, failed=60)
    forever = Instrumented(PostgresBackend(f"{base}?retention=0"))
    assert retention.default(forever) == Retention(completed=0, cancelled=0, failed=0)
    assert PostgresBackend(base).retention is None  # not given: the defaults of every backend
    assert retention.default(Instrumented(PostgresBackend(base))) == Retention()
    assert PostgresBackend(f"{base}?retention=60", retention=0).retention == 0
    with pytest.raises(ConfigError, match="retention"):
        PostgresBackend(f"{base}?retention=-1")


async def test_storing_a_large_event_prunes_lapsed_stored_events(make: Make) -> None:
    backend = await make()
    con = await asyncpg.connect(
        backend.options.dsn, server_settings={"search_path": backend.options.schema}
    )
    try:
        await con.execute(  # the test's own row, stored two hours ago
            "INSERT INTO relaymq_events (body, created_at) VALUES ($1, now() - interval '2h')",
            b"lapsed",
        )
        await backend.publish([b"x" * 20_000])
        bodies = [bytes(r["body"]) for r in await con.fetch("SELECT body FROM relaymq_events")]
        assert bodies == [b"x" * 20_000]
    finally:
        await con.close()


async def test_bytes_with_nul_round_trip(make: Make) -> None:
    backend = await make()
    q = "bytes"
    raw = b"\x00\xff\xfe nul \x00 end"
    await backend.enqueue([new_job(q, "nul", payload=raw)])
    [job] = (await backend.claim([q], "w", 1)).jobs
    assert job.payload == raw
    await backend.heartbeat([Beat(job.claim, progress=raw)])
    await backend.settle([Settle(job.claim, Outcome.COMPLETE, result=raw)])
    stored = await get_job(backend, q, "nul")
    assert stored is not None and (stored.payload, stored.progress, stored.result) == (raw,) * 3


async def test_large_binary_and_repeated_events_arrive_in_order(make: Make) -> None:
    publisher, listener = await make(), await make()
    sub = await listener.subscribe()
    try:
        events = [b'{"n":1}', b"\x00binary\xff", b"x" * 20_000, b'{"n":1}', b'{"n":2}']
        await publisher.publish(events)
        got = [await asyncio.wait_for(anext(sub), 10) for _ in events]
        assert got == events
    finally:
        await sub.aclose()


async def test_counts_stay_exact_under_concurrent_claims(make: Make) -> None:
    clients = [await make() for _ in range(3)]
    q = "counted"
    await clients[0].enqueue([new_job(q) for _ in range(300)])

    async def work(b: PostgresBackend) -> None:
        while jobs := (await b.claim([q], "w", 7)).jobs:
            outcome = Outcome.COMPLETE if len(jobs) % 2 else Outcome.FAIL
            await b.settle([Settle(j.claim, outcome, error="e") for j in jobs])

    await asyncio.gather(*(work(clients[i % 3]) for i in range(6)))
    counts = await clients[1].counts(q)
    assert counts[JobState.COMPLETED] + counts[JobState.FAILED] == 300
    assert sum(counts.values()) == 300


async def test_wait_wakes_when_a_delayed_job_falls_due(make: Make) -> None:
    backend = await make()
    q = "soon"
    await backend.enqueue([new_job(q, delay=0.3)])
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(backend.wait([q], 30), 5)
    assert 0.2 <= loop.time() - started < 3
    assert len((await backend.claim([q], "w", 5)).jobs) == 1


async def test_retention_zero_keeps_finished_jobs(make: Make, clock: FakeClock) -> None:
    backend = await make(clock=clock, retention=0)
    q = "forever"
    await backend.enqueue([new_job(q, "a")])
    [job] = (await backend.claim([q], "w", 1)).jobs
    await backend.settle([Settle(job.claim, Outcome.COMPLETE)])
    clock.advance(365 * 86400)
    await Maintenance(Instrumented(backend), [q], Settings(stalled_threshold=3600), "m").run_once()
    assert await get_job(backend, q, "a") is not None


async def test_a_settle_and_the_next_claim_are_one_statement(make: Make) -> None:
    b = await make()
    q = "together"
    await b.enqueue([new_job(q, f"j{i}") for i in range(3)])
    [first] = (await b.claim([q], "w", 1)).jobs  # also reads which queues have limits
    statements: list[str] = []
    fetch = b._fetch

    async def counted(name: str, *args: object) -> list[asyncpg.Record]:
        statements.append(name)
        return await fetch(name, *args)

    b._fetch = counted  # type: ignore[method-assign]
    answer = await b.settle_and_claim([Settle(first.claim, Outcome.COMPLETE)], [q], "w", 5)
    assert statements == ["settle_claim"]
    assert answer.applied == [True] and answer.batch is not None
    assert [j.id for j in answer.batch.jobs] == ["j1", "j2"]


async def test_settles_that_claim_stay_exact_under_concurrency(make: Make) -> None:
    """Six loops on three connections settle each batch and claim the next in one statement:
    no job is taken twice, each ends once."""
    clients = [await make() for _ in range(3)]
    q = "together-concurrent"
    await clients[0].enqueue([new_job(q) for _ in range(300)])
    ended: list[str] = []

    async def work(b: PostgresBackend) -> None:
        jobs = (await b.claim([q], "w", 7)).jobs
        while jobs:
            outcome = Outcome.COMPLETE if len(jobs) % 2 else Outcome.FAIL
            answer = await b.settle_and_claim(
                [Settle(j.claim, outcome, error="e") for j in jobs], [q], "w", 7
            )
            assert all(answer.applied)
            ended.extend(j.id for j in jobs)
            assert answer.batch is not None
            jobs = answer.batch.jobs

    await asyncio.gather(*(work(clients[i % 3]) for i in range(6)))
    assert len(ended) == len(set(ended)) == 300
    counts = await clients[1].counts(q)
    assert counts[JobState.COMPLETED] + counts[JobState.FAILED] == 300


@pytest.mark.parametrize(
    "name",
    ["plain-name", 'quo"te\\slash', "ctl\x01\x1f\x7f", "ünï €𝄞"],
    ids=["plain", "escaped", "control", "unicode"],
)
async def test_the_largest_batch_whose_facts_ride_the_notification_is_sent(
    make: Make, name: str
) -> None:
    """The enqueue statement carries its facts in a NOTIFY when ``enqueue.facts_fit`` says they fit:
    its estimate stays above what PostgreSQL's JSON of them takes, whatever the names."""
    backend = await make()
    q = f"q-{name}"
    n = 1
    while facts_fit([new_job(q, f"{name}-{k:06d}") for k in range(n + 1)]):
        n += 1
    jobs = [new_job(q, f"{name}-{k:06d}") for k in range(n)]
    answers = await backend.enqueue_announced(jobs, 1.0)  # PostgreSQL refuses a payload too long
    assert [a.duplicate for a in answers] == [False] * n
    assert n > 20
