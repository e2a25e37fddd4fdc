"""A queue the backend refuses while the worker runs (an operator recreates the RabbitMQ queue
without ``x-max-priority``) is set aside: logged in one line, not claimed from, shown on the
worker's record, while the other queues are served; accepted again once fixed. With no queue
left the worker stops with the ``ConfigError`` (the CLI exits 2). On the shared broker."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiormq
import pytest

from relaymq import Settings, Worker
from relaymq.backends import connect
from relaymq.backends.base import Backend
from relaymq.errors import ConfigError
from relaymq.instrumented import Instrumented
from relaymq.overview import collect_workers
from tests.rabbitmq import support
from tests.support.waiting import poll_until
from tests.worker import startup_tasks

SETTINGS = Settings(
    heartbeat_interval=0.5, stalled_threshold=5, history_flush_interval=0, enable_scheduler=False
)


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[Backend]:
    reason = support.broker_unavailable()
    if reason and os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    if reason:
        pytest.skip(reason)
    backend = await connect(support.url(tmp_path, f"sqlite:///{tmp_path / 'store.db'}"))
    try:
        yield backend
    finally:
        await backend.close()
        await broker(tmp_path, "later", "delete")
        await broker(tmp_path, "startup", "delete")


async def broker(tmp: Path, queue: str, action: str) -> None:
    """What an operator does with ``rabbitmqctl``: delete the broker queue of ``queue``, or
    delete it and declare it again without ``x-max-priority`` (tried again when the worker
    declared it in between)."""
    connection = await aiormq.connect(support.AMQP_URL)
    name = f"{support.prefix(tmp)}{queue}"
    expires = {"x-expires": support.SAFETY_EXPIRES_MS}
    try:
        for _ in range(20):
            channel = await connection.channel()
            await channel.queue_delete(name)
            if action != "recreate":
                return
            try:
                await channel.queue_declare(name, durable=True, arguments=expires)
                return
            except aiormq.exceptions.ChannelPreconditionFailed:
                continue  # the worker's check declared it first: delete it again
        raise AssertionError(f"could not recreate {name} without x-max-priority")
    finally:
        await connection.close()


def one_line_errors(caplog: pytest.LogCaptureFixture, queue: str) -> list[str]:
    found = [r for r in caplog.records if r.levelno >= logging.ERROR and queue in r.getMessage()]
    assert all(r.exc_info is None for r in found), "a traceback was logged"
    return [r.getMessage() for r in found]


@pytest.mark.timeout(60)
async def test_a_queue_refused_while_running_is_set_aside_and_the_others_served(
    backend: Backend, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    worker = Worker(backend, ["startup", "later"], settings=SETTINGS)
    worker.refusals.interval = 0.2
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.started.wait(), 20)
        await broker(tmp_path, "later", "recreate")
        await poll_until(lambda: "later" in worker.refusals.refused, "later to be refused", 10)
        assert "x-max-priority" in worker.refusals.refused["later"]
        echo = startup_tasks.echo.with_options(backend=backend)
        assert await (await echo.enqueue("still served")).result(timeout=10) == "still served"

        async def shown() -> bool:
            mine = [w for w in await collect_workers(Instrumented(backend)) if w["id"] == worker.id]
            return bool(mine) and "later" in mine[0]["refused"]

        await poll_until(shown, "the refusal on the worker's record", 10)
        assert one_line_errors(caplog, "later")

        await broker(tmp_path, "later", "delete")  # fixed: the worker declares it as it needs
        await poll_until(lambda: not worker.refusals.refused, "later to be accepted again", 10)
        assert not running.done()
    finally:
        worker.stop()
        await asyncio.wait_for(running, 20)


@pytest.mark.timeout(60)
async def test_a_worker_with_every_queue_refused_stops_with_the_config_error(
    backend: Backend, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    worker = Worker(backend, ["later"], settings=SETTINGS)
    worker.refusals.interval = 0.2
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(worker.started.wait(), 20)
    await broker(tmp_path, "later", "recreate")
    with pytest.raises(ConfigError, match="x-max-priority"):
        await asyncio.wait_for(running, 20)
    assert len(one_line_errors(caplog, "later")) >= 1
