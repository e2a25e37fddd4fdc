"""PostgreSQL behind PgBouncer (Debian's 1.18, its default configuration), in session and in
transaction mode, in front of the shared test server: migrations, producers and a worker with
concurrency go through the pooler; nothing is sent that it refuses; wake-ups come through
LISTEN (session mode, or ``listen_url``) or by polling; and what cannot work through a pooler
is a ``ConfigError`` naming the fix."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from urllib.parse import quote

import asyncpg
import pytest
import pytest_asyncio

from relaymq import Queue, Settings
from relaymq.backends import connect
from relaymq.cli import main
from relaymq.errors import ConfigError
from relaymq.job import JobState
from relaymq.testing import drain
from tests.support import case_postgres
from tests.support.jobs import new_job
from tests.tasks import add
from tests.topologies.pgbouncer import PgBouncer
from tests.topologies.servers import missing

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bouncer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgBouncer]:
    reason = case_postgres.unavailable()
    if reason is not None:
        missing(reason)
    asyncio.run(case_postgres.ensure_database())
    b = PgBouncer(tmp_path_factory.mktemp("pgbouncer"), upstream_port=5432)
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest_asyncio.fixture
async def schema() -> AsyncIterator[str]:
    name = f"topo_{uuid.uuid4().hex[:12]}"
    yield name
    await case_postgres.drop_schema(name)


def pooled(bouncer: PgBouncer, mode: str, schema: str, extra: str = "") -> str:
    return f"{bouncer.url(mode)}?schema={schema}&migrate=true&pooler={mode}{extra}"


DIRECT = f"{case_postgres.SERVER}/{case_postgres.DATABASE}"
"""The server itself, past the pooler (for LISTEN)."""


async def test_a_pooler_url_without_pooler_is_refused_naming_the_fix(
    bouncer: PgBouncer, schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{bouncer.url('session')}?schema={schema}"
    with pytest.raises(ConfigError, match=r"unsupported startup parameter.*add pooler=transaction"):
        await connect(url)
    # the command line: one line, exit 2 (a configuration a restart cannot fix)
    assert await asyncio.to_thread(main, ["stats", "--backend", url]) == 2
    assert "pooler=transaction" in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["session", "transaction"])
async def test_a_worker_runs_every_job_through_the_pooler(
    bouncer: PgBouncer, schema: str, mode: str
) -> None:
    """Two producers and a worker of concurrency 20 over pools of 10 connections each: in
    transaction mode the pooler hands their transactions to any server connection, which
    named prepared statements or session settings would not survive."""
    url = pooled(bouncer, mode, schema)
    producers = [await connect(url), await connect(url)]
    worker_backend = await connect(url)
    try:
        queue = "tests"  # add's
        await asyncio.gather(
            *(
                Queue(queue, p).add_bulk(
                    [add.with_options(job_id=f"{n}-{i}").call(i, n) for i in range(150)]
                )
                for n, p in enumerate(producers)
            )
        )
        ran = await drain(worker_backend, [queue], settings=Settings(concurrency=20), within=60)
        assert ran.completed == 300 and ran.failed == 0
        counts = await Queue(queue, producers[0]).counts()
        assert counts[JobState.COMPLETED] == 300
    finally:
        for b in [*producers, worker_backend]:
            await b.close()
    # the tables are in the schema the URL names, not wherever the server's search_path points
    con = await asyncpg.connect(f"{case_postgres.SERVER}/{case_postgres.DATABASE}")
    try:
        where = await con.fetchval(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = 'relaymq_jobs'"
            " AND table_schema = $1",
            schema,
        )
        assert where == schema
    finally:
        await con.close()


async def test_transaction_mode_polls_without_listen_url(bouncer: PgBouncer, schema: str) -> None:
    """No LISTEN through a transaction pooler: an idle wait picks up new work within
    ``poll_interval``; events (which need LISTEN) are refused naming the fix."""
    url = pooled(bouncer, "transaction", schema, "&poll_interval=0.2")
    waiter, producer = await connect(url), await connect(url)
    try:
        with pytest.raises(ConfigError, match="listen_url="):
            await waiter.subscribe()
        # an idle wait returns after a poll interval, whatever timeout it was given
        async with asyncio.timeout(5):
            await waiter.wait(["q"], 60)

        async def pick_up() -> str:
            while not (batch := await waiter.claim(["q"], "w", 1)).jobs:
                await waiter.wait(["q"], 60)
            return batch.jobs[0].id

        picking = asyncio.create_task(pick_up())
        await producer.enqueue([new_job("q", "polled")])
        async with asyncio.timeout(5):  # 0.2 s polls: well inside
            assert await picking == "polled"
    finally:
        await waiter.close()
        await producer.close()


@pytest.mark.parametrize(
    ("mode", "extra"),
    [("transaction", f"&listen_url={quote(DIRECT, safe='')}"), ("session", "")],
    ids=["transaction mode, listen_url", "session mode"],
)
async def test_idle_workers_are_woken_by_notify(
    bouncer: PgBouncer, schema: str, mode: str, extra: str
) -> None:
    """LISTEN straight to the server (``listen_url``), or through a session pooler."""
    url = pooled(bouncer, mode, schema, extra)
    waiter, producer = await connect(url), await connect(url)
    try:
        await waiter.wait(["q"], 0.01)  # starts the LISTEN connection
        await (await waiter.subscribe()).aclose()  # events work too
        idle = asyncio.create_task(waiter.wait(["q"], 60))
        await asyncio.sleep(0.3)  # not a wait for a result: the waiter is past its first check
        assert not idle.done()
        await producer.enqueue([new_job("q", "notified")])
        # until its 60 s timeout only a NOTIFY can wake it (no polling with a LISTEN up)
        async with asyncio.timeout(10):
            await idle
    finally:
        await waiter.close()
        await producer.close()


async def test_a_transaction_pooler_called_session_is_refused_naming_the_fix(
    bouncer: PgBouncer, schema: str
) -> None:
    """``pooler=session`` on a pooler in transaction mode: statements are kept prepared, and the
    pooler hands the next transaction to another server connection, where they do not exist.
    That is a ``ConfigError`` naming ``pooler=transaction``, not a retried connection error."""
    await (await connect(pooled(bouncer, "transaction", schema))).close()  # the tables
    url = f"{bouncer.url('transaction')}?schema={schema}&pooler=session"
    backend = await connect(url)
    try:
        # Concurrent calls on the backend's pool of connections share the pooler's server
        # connections, so a statement prepared on one soon runs on another.
        # one line: asyncpg's own hint (statement_cache_size=0) is not the fix here
        lost = r'\(prepared statement "__asyncpg_stmt_[0-9a-f]+__" does not exist\): '
        with pytest.raises(ConfigError, match=rf"^[^\n]*{lost}[^\n]*use pooler=transaction[^\n]*$"):
            async with asyncio.timeout(60):
                for round_ in range(200):
                    await asyncio.gather(
                        *(backend.enqueue([new_job("q", f"{round_}-{i}")]) for i in range(10)),
                        *(backend.claim(["q"], "w", 1) for _ in range(10)),
                    )
    finally:
        await backend.close()
