from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
import pytest_asyncio

from relaymq import Queue, Settings, Worker
from relaymq.backends.base import Backend
from tests.conftest import MakeBackend
from tests.support.jobs import queue_name

FAST = Settings(
    heartbeat_interval=0.1,
    stalled_threshold=1.0,
    stalled_check_interval=0.2,
    shutdown_timeout=2.0,
)

RunWorker = Callable[..., AbstractAsyncContextManager[Worker]]


@pytest.fixture
def q() -> str:
    return queue_name("wq")


@pytest_asyncio.fixture
async def live(make_backend: MakeBackend) -> Backend:
    """A backend on the real clock (workers run real loops)."""
    return await make_backend()


@pytest.fixture
def queue(live: Backend, q: str) -> Queue:
    return Queue(q, live, settings=FAST)


@pytest.fixture
def run_worker(live: Backend, q: str) -> RunWorker:
    @asynccontextmanager
    async def run(
        backend: Backend | None = None, queues: list[str] | None = None, **settings: Any
    ) -> AsyncIterator[Worker]:
        worker = Worker(backend or live, queues or [q], settings=FAST.replace(**settings))
        running = asyncio.create_task(worker.run())
        try:
            async with asyncio.timeout(10):  # the worker registering and starting to claim
                await worker.started.wait()
            yield worker
        finally:
            worker.stop()
            async with asyncio.timeout(30):  # the worker finishing its graceful shutdown
                await running

    return run
