"""A database file made by an older relaymq (schema 1) is upgraded in place on connect: its jobs
are kept and read back, and new jobs store their trace context."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from relaymq import registry
from relaymq.backends.sqlite import SQLiteBackend
from relaymq.backends.sqlite.ops import Q
from relaymq.backends.sqlite.upgrade import SCHEMA, SCHEMA_VERSION, statements
from relaymq.job import JobState, KeyMode, KeyRule
from relaymq.records.limits import Limits
from relaymq.records.store import Enqueued, StoredSchedule, Tally, WorkerInfo
from relaymq.schedules import store
from relaymq.testing import FakeClock
from tests.support.jobs import cancel, get_job, new_job

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def schema_1_file(path: Path, queue: str) -> None:
    """A file as relaymq wrote it before schema 2, holding one waiting job."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(SCHEMA)  # schema.sql is schema 1 and stays so: later versions upgrade
    conn.execute(
        "INSERT INTO jobs (queue, id, task, payload, state, seq, created_at) "
        "VALUES (?, 'old', 't', x'7b7d', 'waiting', 1, 1.0)",
        (queue,),
    )
    conn.close()


async def test_a_schema_1_file_is_upgraded_and_keeps_its_jobs(tmp_path: Path, q: str) -> None:
    path = tmp_path / "old.db"
    schema_1_file(path, q)
    backend = SQLiteBackend(f"sqlite:///{path}")
    await backend.connect()
    try:
        old = await get_job(backend, q, "old")
        assert old is not None and (old.state, old.traceparent) == (JobState.WAITING, None)
        await backend.enqueue([new_job(q, "new", traceparent=TRACEPARENT)])
        claimed = {j.id: j.traceparent for j in (await backend.claim([q], "w", 10)).jobs}
        assert claimed == {"old": None, "new": TRACEPARENT}
        await backend.add_tallies([Tally(q, 7, completed=1)])  # schema 3: the history
        assert await backend.tallies(q, 0) == [Tally(q, 7, completed=1)]
        stored = StoredSchedule("s", b"{}", 1000)  # schema 4: schedules
        assert await store.save(backend, stored)
        assert await store.load(backend) == [stored]
        rule = KeyRule("k", KeyMode.THROTTLE, 60)  # schema 5: throttle and debounce keys
        twice = [new_job(q, "t1", rule=rule), new_job(q, "t2", rule=rule)]
        assert await backend.enqueue(twice) == [Enqueued("t1"), Enqueued("t1", duplicate=True)]
        await backend.set_limits(q, Limits(max_active=1))  # schema 6: queue limits
        assert await backend.list_limits() == {q: Limits(max_active=1)}
        await backend.set_limits(q, Limits(max_active=1, key_max_active=2))  # schema 12
        assert await backend.list_limits() == {q: Limits(max_active=1, key_max_active=2)}
        await backend.enqueue(
            [
                new_job(q, "child"),  # schema 7: a dependency failure counted
                new_job(q, "parent", depends_on=("child",)),
            ]
        )
        await cancel(backend, q, "child")
        failed = await get_job(backend, q, "parent")
        assert failed is not None and failed.state is JobState.FAILED
        assert sum(t.failed for t in await backend.tallies(q, 0)) == 1
        info = WorkerInfo("w", (q,), 1, "h", 1, 0.0, refused=((q, "refused"),))  # schema 8
        await registry.register(backend, info, 60)
        assert [w.refused for w in await registry.list_workers(backend)] == [((q, "refused"),)]
        # schema 13: sequences, beside the old jobs that have none
        await backend.set_limits(q, None)
        await backend.enqueue([new_job(q, f"s{n}", sequence="s") for n in range(2)])
        [s0] = [j for j in (await backend.claim([q], "w", 10)).jobs if j.sequence == "s"]
        assert s0.id == "s0" and (await backend.sequence_head(q, "s")) == s0
    finally:
        await backend.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (13,)
    conn.close()
    again = SQLiteBackend(f"sqlite:///{path}")  # an upgraded file opens as it is
    await again.connect()
    try:
        assert (await get_job(again, q, "new")).traceparent == TRACEPARENT  # type: ignore[union-attr]
    finally:
        await again.close()


def schema_8_file(path: Path) -> None:
    """A file as relaymq wrote it at schema 8, before the meta store: one schedule in the
    ``schedules`` table and one worker in ``workers``."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(SCHEMA)
    for step in range(2, 9):
        for statement in statements(Q[f"upgrade_to_{step}"]):
            conn.execute(statement)
        conn.execute(Q[f"set_version_{step}"])
    conn.execute(
        "INSERT INTO schedules (id, spec, next_ms, paused) VALUES "
        "('nightly', x'7b2276223a317d', 1700000000000, 1)"
    )
    conn.execute(
        "INSERT INTO workers (id, queues, concurrency, host, pid, started_at, seen_at, "
        "expires_at, refused) VALUES ('w1', '[\"a\",\"b\"]', 4, 'h', 7, 1.0, 100.0, "
        '160.0, \'[["b","why"]]\')'
    )
    conn.close()


async def test_a_schema_8_file_carries_its_schedules_and_workers_into_the_meta_store(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v8.db"
    schema_8_file(path)
    clock = FakeClock(130.0)
    backend = SQLiteBackend(f"sqlite:///{path}", clock=clock)
    await backend.connect()
    try:
        assert await store.load(backend) == [
            StoredSchedule("nightly", b'{"v":1}', 1_700_000_000_000, paused=True)
        ]
        assert await store.advance(backend, "nightly", 1_700_000_000_000, 1_700_000_060_000)
        assert await registry.list_workers(backend) == [
            WorkerInfo("w1", ("a", "b"), 4, "h", 7, 1.0, 100.0, refused=(("b", "why"),))
        ]
        clock.advance(31)  # its registration lapses as it would have
        assert await registry.list_workers(backend) == []
    finally:
        await backend.close()
    conn = sqlite3.connect(path)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "meta" in tables and not tables & {"schedules", "workers", "locks"}
    conn.close()
