"""A worker process killed between the caller's commit and its claim: the job is stored, so
the next worker runs it (the wake-up the dead worker got is not needed)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

import relaymq
from relaymq.app import default_app
from relaymq.backends.postgres import PostgresBackend
from relaymq.instrumented import Instrumented
from relaymq.testing import drain
from tests.chaos.test_kill import start_worker
from tests.conftest import require
from tests.support.jobs import queue_name
from tests.support.waiting import watch
from tests.transactions import tasks
from tests.transactions.conftest import case_named, where
from tests.transactions.drivers import Asyncpg, Driver, Sqlite3


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["postgres", "sqlite"])
async def test_a_worker_killed_between_the_commit_and_its_claim(kind: str, tmp_path: Path) -> None:
    case = case_named(kind)
    if case is None or case.url is None:
        pytest.skip(f"RELAYMQ_TEST_BACKENDS leaves out {kind}")
    require(case)
    backend = await case.make(None, tmp_path)
    q = queue_name("killed")
    marker = tmp_path / "marker"
    try:
        w = where(backend)
        driver: Driver = Asyncpg(w) if isinstance(backend, PostgresBackend) else Sqlite3(w)
        await driver.open()
        try:
            async with watch(backend) as seen:
                proc = await start_worker(case.url(tmp_path), q)

                async def online() -> bool:
                    return any(q in i.queues for i in await Instrumented(backend).list_workers())

                await seen.until(online, f"a worker on {q}", within=30)
                # The transaction first, then the freeze: a worker frozen in the middle of a
                # write of its own would hold SQLite's write lock for good ("database is
                # locked", seen in CI); once the transaction has begun, it holds none.
                await driver.begin()
                proc.send_signal(signal.SIGSTOP)  # it cannot claim, whatever it hears
                handle = await relaymq.Queue(q, backend).add(
                    tasks.mark.call(str(marker)), connection=driver.connection
                )
                await driver.commit()
                proc.kill()
                await proc.wait()
        finally:
            await driver.close()
        ran = await drain(default_app().over(backend), [q])
        assert ran.completed == 1 and marker.read_text() == "ran\n"
        job = await relaymq.Queue(q, backend).get_job(handle.id)
        assert job is not None and job.state is relaymq.JobState.COMPLETED
    finally:
        await backend.close()
