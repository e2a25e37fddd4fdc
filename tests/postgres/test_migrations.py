"""Migrations: applying them all gives the schema the queries expect; they only ever add."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio

from relaymq.backends.postgres import PostgresBackend, migrate
from relaymq.backends.postgres.migrations import migrations
from relaymq.backends.postgres.statements import Q
from relaymq.errors import ConfigError
from tests.support.case_postgres import DATABASE, SERVER, drop_schema, ensure_database

TEMPLATES = {"create_schema"}  # filled in by Python, not prepared


@pytest_asyncio.fixture
async def schema(postgres_case: None) -> AsyncIterator[str]:
    await ensure_database()
    name = f"m_{uuid.uuid4().hex[:12]}"
    yield name
    await drop_schema(name)


def url(schema: str) -> str:
    return f"{SERVER}/{DATABASE}?schema={schema}"


async def test_migrate_applies_each_migration_once(schema: str) -> None:
    names = [name for name, _ in migrations()]
    assert await migrate(url(schema)) == names
    assert await migrate(url(schema)) == []  # up to date: nothing applied twice


async def test_every_named_query_prepares_against_the_migrated_schema(schema: str) -> None:
    await migrate(url(schema))
    con = await asyncpg.connect(f"{SERVER}/{DATABASE}", server_settings={"search_path": schema})
    try:
        for name, sql in Q.items():
            if name in TEMPLATES:
                continue
            # PREPARE resolves every table, column, function and type the query names.
            await con.prepare(sql)
        # The partial indexes claims, stall scans and retention rely on are there.
        indexes = {
            r["indexname"]
            for r in await con.fetch(
                "SELECT indexname FROM pg_indexes WHERE schemaname = $1", schema
            )
        }
        assert {
            "relaymq_jobs_waiting",
            "relaymq_jobs_delayed",
            "relaymq_jobs_active",
            "relaymq_jobs_finished",
            "relaymq_jobs_sequence",
        } <= indexes
    finally:
        await con.close()


async def test_connect_without_migrations_says_what_to_do(schema: str) -> None:
    backend = PostgresBackend(url(schema))
    with pytest.raises(ConfigError, match="relaymq migrate"):
        await backend.connect()


async def test_a_command_on_an_unmigrated_schema_is_a_configuration_error(
    schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    from relaymq.cli import main

    # exit code 2, as README.md promises for configuration errors (not 1)
    assert await asyncio.to_thread(main, ["queue", "list", "--backend", url(schema)]) == 2
    err = capsys.readouterr().err
    assert "relaymq migrate" in err and len(err.strip().splitlines()) == 1


def test_migrations_never_drop_or_rewrite_user_data() -> None:
    forbidden = re.compile(
        r"\b(DROP\s+(TABLE|COLUMN|SCHEMA)|TRUNCATE|DELETE\s+FROM|ALTER\s+COLUMN\s+\w+\s+TYPE)\b",
        re.IGNORECASE,
    )
    # Trigger bodies delete only bookkeeping rows: a dependency's rows once it has ended.
    bookkeeping = re.compile(r"\bDELETE\s+FROM\s+relaymq_job_deps\b", re.IGNORECASE)
    for name, sql in migrations():
        body = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())  # code, not comments
        hits = [m.group(0) for m in forbidden.finditer(bookkeeping.sub("", body))]
        assert not hits, f"{name} must only add: found {hits}"


async def test_relaymq_migrate_command(schema: str, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    from relaymq.cli import main

    # main() runs its own event loop, so run it in a thread beside this test's loop
    assert await asyncio.to_thread(main, ["migrate", "--backend", url(schema)]) == 0
    assert "applied 0001_initial" in capsys.readouterr().out
    assert await asyncio.to_thread(main, ["migrate", "--backend", url(schema)]) == 0
    assert "schema is up to date" in capsys.readouterr().out


async def test_0011_carries_schedules_and_workers_into_the_meta_store(schema: str) -> None:
    from relaymq import registry
    from relaymq.backends.postgres import migrations as m
    from relaymq.records.store import StoredSchedule, WorkerInfo
    from relaymq.schedules import store
    from relaymq.testing import FakeClock

    con = await asyncpg.connect(f"{SERVER}/{DATABASE}", server_settings={"search_path": schema})
    try:  # a schema as relaymq left it at 0010, holding one schedule and one worker
        await con.execute(f'CREATE SCHEMA "{schema}"')
        await con.execute(m.Q["migrations_table"])
        for name, sql in migrations():
            if name >= "0011":
                break
            await con.execute(sql)
            await con.execute(m.Q["migration_record"], name)
        await con.execute(
            "INSERT INTO relaymq_schedules VALUES "
            "('nightly', '{\"v\":1}'::bytea, 1700000000000, true)"
        )
        await con.execute(
            "INSERT INTO relaymq_workers VALUES ('w1', '{a,b}', 4, 'h', 7, 1.0, to_timestamp(100), "
            'to_timestamp(160), \'[["b", "why"]]\')'
        )
    finally:
        await con.close()
    assert (await migrate(url(schema)))[0] == "0011_meta"
    clock = FakeClock(130.0)
    backend = PostgresBackend(url(schema), clock=clock)
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


async def test_0014_gives_existing_jobs_no_sequence_and_new_ones_theirs(schema: str) -> None:
    from relaymq.backends.postgres import migrations as m
    from tests.support.jobs import new_job

    con = await asyncpg.connect(f"{SERVER}/{DATABASE}", server_settings={"search_path": schema})
    try:  # a schema as relaymq left it at 0013, holding one waiting job
        await con.execute(f'CREATE SCHEMA "{schema}"')
        await con.execute(m.Q["migrations_table"])
        for name, sql in migrations():
            if name >= "0014":
                break
            await con.execute(sql)
            await con.execute(m.Q["migration_record"], name)
        await con.execute(
            "INSERT INTO relaymq_jobs (queue, id, task, payload, state, seq, created_at) "
            "VALUES ('q', 'old', 't', '\\x7b7d'::bytea, 'waiting', 1, now())"
        )
    finally:
        await con.close()
    assert await migrate(url(schema)) == ["0014_sequences"]
    backend = PostgresBackend(url(schema))
    await backend.connect()
    try:
        await backend.enqueue([new_job("q", f"s{n}", sequence="s") for n in range(2)])
        claimed = (await backend.claim(["q"], "w", 10)).jobs
        assert sorted((j.id, j.sequence) for j in claimed) == [("old", None), ("s0", "s")]
        head = await backend.sequence_head("q", "s")
        assert head is not None and head.id == "s0"
    finally:
        await backend.close()
