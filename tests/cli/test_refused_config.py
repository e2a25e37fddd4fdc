"""A configuration the backend refuses is one line and exit code 2, never a retry loop (I12).

One refusal per backend, each against its real server: PostgreSQL a schema without its
migrations, Redis ``redis+cluster://`` against a single server, RabbitMQ a broker queue
declared by another tool without ``x-max-priority``, MongoDB credentials it does not know,
SQLite a database in a folder that does not exist. ``RELAYMQ_CONNECT_TIMEOUT`` is short, so
a refusal mistaken for an outage ends in exit 3 after a few waiting lines instead of hanging.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import aiormq
import pytest

from relaymq.cli import main
from tests.rabbitmq import support as rabbitmq_support
from tests.redis import support as redis_support
from tests.support import case_mongodb, case_postgres
from tests.support.case_redis import URL as REDIS_URL

Capture = pytest.CaptureFixture[str]
TASKS = "tests.worker.startup_tasks"


def _skip_unless(reason: str | None) -> None:
    if reason and os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    if reason:
        pytest.skip(reason)


def refused_in_one_line(argv: list[str], capsys: Capture) -> str:
    """Run ``relaymq`` with ``argv``; assert exit 2 and one line on stderr, soon; that line."""
    capsys.readouterr()
    began = time.monotonic()
    code = main(argv)
    took = time.monotonic() - began
    err = capsys.readouterr().err.strip()
    assert code == 2, f"exit {code}: {err}"
    assert "Traceback" not in err and "waiting for" not in err, err
    assert len(err.splitlines()) == 1 and err.startswith("Error: "), err
    assert took < 15, f"took {took:.1f}s: tried again?"
    return err


@pytest.fixture(autouse=True)
def short_connect_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAYMQ_CONNECT_TIMEOUT", "3")


def test_postgres_schema_without_migrations(capsys: Capture, tmp_path: Path) -> None:
    _skip_unless(case_postgres.unavailable())
    asyncio.run(case_postgres.ensure_database())
    schema = case_postgres.schema_for(tmp_path)
    url = f"{case_postgres.SERVER}/{case_postgres.DATABASE}?schema={schema}"
    err = refused_in_one_line(["worker", TASKS, "-b", url], capsys)
    assert "lacks migrations" in err and "relaymq migrate" in err


def test_postgres_unknown_role(capsys: Capture) -> None:
    _skip_unless(case_postgres.unavailable())
    parts = urlsplit(case_postgres.SERVER)
    url = f"postgresql://relaymq_no_such_role@{parts.netloc.split('@')[-1]}/postgres"
    err = refused_in_one_line(["worker", TASKS, "-b", url], capsys)
    assert "relaymq_no_such_role" in err


def test_redis_cluster_url_on_a_single_server(capsys: Capture) -> None:
    _skip_unless(redis_support.unavailable(REDIS_URL))
    url = REDIS_URL.replace("redis://", "redis+cluster://", 1).rsplit("/", 1)[0]
    err = refused_in_one_line(["worker", TASKS, "-b", url], capsys)
    assert "Cluster" in err


@pytest.fixture
def noprio(tmp_path: Path) -> Iterator[str]:
    """A broker queue made by another tool, without ``x-max-priority``: the name of the
    relaymq queue it stands for."""
    _skip_unless(rabbitmq_support.broker_unavailable())
    name = f"{rabbitmq_support.prefix(tmp_path)}noprio"

    async def declare(delete: bool) -> None:
        connection = await aiormq.connect(rabbitmq_support.AMQP_URL)
        try:
            channel = await connection.channel()
            if delete:
                await channel.queue_delete(name)
            else:
                await channel.queue_declare(
                    name, durable=True, arguments={"x-expires": 15 * 60 * 1000}
                )
        finally:
            await connection.close()

    asyncio.run(declare(delete=False))
    yield "noprio"
    asyncio.run(declare(delete=True))


def test_rabbitmq_queue_declared_without_max_priority(
    noprio: str, capsys: Capture, tmp_path: Path
) -> None:
    url = rabbitmq_support.url(tmp_path, f"sqlite:///{tmp_path / 'store.db'}")
    err = refused_in_one_line(["worker", TASKS, "-q", "startup", "-q", noprio, "-b", url], capsys)
    assert "noprio" in err and "x-max-priority" in err


def test_mongodb_unknown_credentials(capsys: Capture, tmp_path: Path) -> None:
    _skip_unless(case_mongodb.unavailable())
    parts = urlsplit(case_mongodb.SERVER)
    url = f"mongodb://relaymq_nobody:wrong@{parts.netloc}/{case_mongodb.database_for(tmp_path)}"
    err = refused_in_one_line(["worker", TASKS, "-b", url], capsys)
    assert "uthentication failed" in err


def test_sqlite_database_in_a_missing_folder(capsys: Capture, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'no' / 'such' / 'folder' / 'jobs.db'}"
    err = refused_in_one_line(["worker", TASKS, "-b", url], capsys)
    assert "no folder" in err
    assert not (tmp_path / "no").exists()
