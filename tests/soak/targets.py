"""The backends the soak runs on, each on a private server it may crash and restart (with
persistence on), so the shared test servers are never touched.

The in-memory backend is not soaked: it lives in one process, so there is no worker process
to kill without killing the store too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from tests.soak.harness import Target

NAMES = ("sqlite", "redis", "postgres", "mongodb", "rabbitmq_redis")

Opener = Callable[[Path], contextlib.AbstractAsyncContextManager[Target]]


def unavailable(name: str) -> str | None:
    """Why ``name`` cannot be soaked on this machine, or None."""
    if name == "postgres":
        from tests.postgres import cluster

        return cluster.unavailable()
    if name == "mongodb":
        from tests.mongodb.conftest import PYTHON

        return None if PYTHON.exists() else f"{PYTHON} is missing: run 'make services'"
    if name == "rabbitmq_redis":
        from tests.rabbitmq import node

        return node.unavailable()
    return None


@contextlib.asynccontextmanager
async def sqlite(tmp: Path) -> AsyncIterator[Target]:
    yield Target("sqlite", f"sqlite:///{tmp}/soak.db")  # no server: kills and freezes only


@contextlib.asynccontextmanager
async def redis(tmp: Path) -> AsyncIterator[Target]:
    from tests.redis.server import PrivateRedis

    server = PrivateRedis(tmp / "redis")
    server.start()

    async def stop() -> None:
        await asyncio.to_thread(server.kill)

    async def start() -> None:
        await asyncio.to_thread(server.start)

    try:
        yield Target("redis", f"{server.url}?prefix=soak", stop, start)
    finally:
        server.kill()


@contextlib.asynccontextmanager
async def postgres(tmp: Path) -> AsyncIterator[Target]:
    from tests.postgres.cluster import Cluster

    cluster = Cluster()
    await asyncio.to_thread(cluster.init)
    await asyncio.to_thread(cluster.start)

    async def stop() -> None:
        await asyncio.to_thread(cluster.stop_immediate)  # a crash: no checkpoint

    async def start() -> None:
        await asyncio.to_thread(cluster.start)

    try:
        yield Target("postgres", f"{cluster.url}?migrate=true", stop, start)
    finally:
        await asyncio.to_thread(cluster.destroy)


@contextlib.asynccontextmanager
async def mongodb(tmp: Path) -> AsyncIterator[Target]:
    from tests.mongodb.conftest import MongoServer

    server = MongoServer(tmp / "mongo.db")
    await server.start()

    try:
        yield Target(
            "mongodb", server.url, server.kill, server.start, stalled_threshold=6.0, share=0.25
        )
    finally:
        await server.kill()


@contextlib.asynccontextmanager
async def rabbitmq_redis(tmp: Path) -> AsyncIterator[Target]:
    """A private broker node over a private Redis metadata store; restarts alternate between
    the broker and the store."""
    from tests.rabbitmq import node, support
    from tests.redis.server import PrivateRedis

    store = PrivateRedis(tmp / "store")
    store.start()
    broker = node.PrivateNode()
    turn = 0

    async def stop() -> None:
        nonlocal turn
        turn += 1
        await asyncio.to_thread(broker.kill if turn % 2 else store.kill)

    async def start() -> None:
        await asyncio.to_thread(broker.start if turn % 2 else store.start)

    try:
        await asyncio.to_thread(broker.start)
        # reconcile_after=5: a delivery lost with the broker is published again within the
        # soak's time frame (the default, 60 s, is longer than the short profile)
        url = support.url(tmp, f"{store.url}?prefix=soak", amqp_url=node.URL)
        url += "&reconcile_after=5"
        yield Target("rabbitmq_redis", url, stop, start)
    finally:
        await asyncio.to_thread(broker.stop)
        store.kill()


OPENERS: dict[str, Opener] = {
    "sqlite": sqlite,
    "redis": redis,
    "postgres": postgres,
    "mongodb": mongodb,
    "rabbitmq_redis": rabbitmq_redis,
}
