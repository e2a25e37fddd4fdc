"""RabbitMQ-specific behaviour: topology errors, stale deliveries, reconciliation, URL options.

Real broker (127.0.0.1:5672), SQLite metadata store, a queue prefix per test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import pytest
import pytest_asyncio

from relaymq.backends import connect, from_url
from relaymq.backends.rabbitmq import RabbitMQBackend
from relaymq.backends.rabbitmq.config import parse
from relaymq.backends.sqlite import SQLiteBackend
from relaymq.errors import BackendUnavailableError, ConfigError
from relaymq.job import JobState
from relaymq.testing import FakeClock
from tests.rabbitmq import support
from tests.support import case_sqlite
from tests.support.jobs import new_job, queue_name


@pytest.fixture(autouse=True)
def _broker() -> None:
    reason = support.broker_unavailable()
    if reason:
        pytest.skip(reason)


@pytest_asyncio.fixture
async def rmq(tmp_path: Path, clock: FakeClock) -> AsyncIterator[RabbitMQBackend]:
    store = from_url(case_sqlite.url(tmp_path), clock=clock)
    backend = support.TestRabbitMQBackend(
        support.url(tmp_path, case_sqlite.url(tmp_path)), store=store, clock=clock
    )
    await backend.connect()
    yield backend
    await backend.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def test_incompatible_existing_queue_is_a_clear_config_error(tmp_path: Path) -> None:
    store = quote(case_sqlite.url(tmp_path), safe="")
    base = f"{support.AMQP_URL}?prefix={support.prefix(tmp_path)}&store={store}"
    q = queue_name()
    first = await connect(f"{base}&max_priority=5")
    try:
        await first.enqueue([new_job(q)])
        other = await connect(f"{base}&max_priority=9")
        try:
            with pytest.raises(ConfigError) as e:
                await other.enqueue([new_job(q)])
            message = str(e.value)
            assert support.prefix(tmp_path) + q in message and "x-max-priority" in message
            assert "recreate" in message
        finally:
            await other.close()
    finally:
        assert isinstance(first, RabbitMQBackend)
        await first.delete_broker_queues()
        await first.close()


async def test_duplicate_delivery_is_acknowledged_dropped_and_counted(
    rmq: RabbitMQBackend, q: str
) -> None:
    await rmq.enqueue([new_job(q, "j")])
    await rmq._broker.publish([(q, "j", 0, 0), (q, "j", 7, 0)])  # a redelivery and a stale token
    [job] = (await rmq.claim([q], "w", 10)).jobs
    assert job.id == "j"
    assert (await rmq.claim([q], "w", 10)).jobs == []
    assert rmq.stale_deliveries == 2
    assert (await rmq.counts(q))[JobState.ACTIVE] == 1


async def test_reconciliation_republishes_a_job_stored_without_its_message(
    rmq: RabbitMQBackend, q: str, clock: FakeClock
) -> None:
    # A producer that died between the metadata write and the publish.
    await rmq.store.enqueue([new_job(q, "orphan")])
    assert (await rmq.claim([q], "w", 1)).jobs == []
    await rmq.recover_stalled(q, 30, 5)  # too early: nothing republished
    assert (await rmq.claim([q], "w", 1)).jobs == []
    clock.advance(rmq.options.reconcile_after + 1)
    await rmq.recover_stalled(q, 30, 5)
    [job] = (await rmq.claim([q], "w", 1)).jobs
    assert job.id == "orphan"


async def test_delayed_job_reaches_the_broker_only_when_due(
    rmq: RabbitMQBackend, q: str, clock: FakeClock
) -> None:
    await rmq.enqueue([new_job(q, "later", delay=30)])
    assert (await rmq.claim([q], "w", 1)).jobs == []
    clock.advance(31)
    [job] = (await rmq.claim([q], "w", 1)).jobs
    assert job.id == "later"


def test_url_options_are_parsed_and_the_rest_passed_to_aio_pika() -> None:
    o = parse("amqp://u:p@h:5672/vh?store=sqlite%3A%2F%2F%2Ftmp%2Fx.db&prefix=a.&heartbeat=5")
    assert (o.store, o.prefix, o.max_priority) == ("sqlite:///tmp/x.db", "a.", 10)
    assert o.broker_url == "amqp://u:p@h:5672/vh?heartbeat=5"
    for bad in ("max_priority=0", "max_priority=x", "prefetch=0", "store=amqp%3A%2F%2Fh"):
        with pytest.raises(ConfigError):
            parse(f"amqp://h/?{bad}")


def test_from_url_builds_the_metadata_store_and_the_backend_never_reaches_the_registry(
    tmp_path: Path,
) -> None:
    import ast
    import pathlib

    import relaymq.backends.rabbitmq as package

    store_url = f"sqlite:///{tmp_path}/meta.db"
    backend = from_url(f"amqp://guest:guest@127.0.0.1:5672/?store={quote(store_url, safe='')}")
    assert isinstance(backend, RabbitMQBackend) and isinstance(backend.store, SQLiteBackend)
    assert backend.store.url == store_url
    for path in pathlib.Path(package.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "relaymq.backends" not in imported, f"{path.name} imports the backend registry"


async def test_wrong_credentials_are_a_clear_error(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path}/meta.db"
    backend = from_url(f"amqp://nobody:wrong@127.0.0.1:5672/?store={quote(store_url, safe='')}")
    with pytest.raises(ConfigError) as e:
        await backend.connect()
    await backend.close()
    assert str(e.value) == (
        "RabbitMQ at 127.0.0.1:5672 refused the login of user 'nobody': check the user name "
        "and password in the URL"
    )


async def test_a_broker_operation_that_never_answers_fails_within_its_deadline() -> None:
    from relaymq.backends.rabbitmq.errors import guarded

    never = asyncio.get_running_loop().create_future()  # a reply that never comes
    with pytest.raises(BackendUnavailableError, match=r"did not answer within 0\.2s"):
        async with asyncio.timeout(5):  # the deadline inside must come first
            await guarded(never, 0.2)


@pytest.mark.parametrize(
    ("query", "timeout", "heartbeat"), [("", 7.0, 7), ("", 1.0, 5), ("?heartbeat=30", 7.0, 30)]
)
async def test_the_broker_connection_s_heartbeat_is_its_timeout_unless_the_url_sets_one(
    query: str, timeout: float, heartbeat: int
) -> None:
    from relaymq.backends.rabbitmq.connection import connect as connect_broker

    connection = await connect_broker([f"{support.AMQP_URL.split('?')[0]}{query}"], timeout)
    try:
        assert connection.transport is not None
        assert connection.transport.connection.connection_tune.heartbeat == heartbeat  # told
    finally:
        await connection.close()


async def test_sequences_are_refused_over_a_store_whose_claim_delivered_does_not_keep_them(
    rmq: RabbitMQBackend,
) -> None:
    """SQLite keeps sequences in its own claims, not in claim_delivered: refused, naming it."""
    assert rmq.store.capabilities.sequences and not rmq.capabilities.sequences
    q = queue_name()
    with pytest.raises(ConfigError, match="RabbitMQBackend over SQLiteBackend does not run"):
        await rmq.enqueue([new_job(q, "plain"), new_job(q, "s", sequence="s")])
    assert sum((await rmq.counts(q)).values()) == 0
    assert await rmq.sequence_head(q, "s") is None
