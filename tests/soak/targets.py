"""The backends the soak runs on, each on a private server it may crash and restart (with
persistence on), so the shared test servers are never touched. Given a ``Network`` (test hosts:
tests/hosts/servers.py), the server runs on its server host and listens on that host's address
only; otherwise on 127.0.0.1.

The in-memory backend is not soaked: it lives in one process, so there is no worker process
to kill without killing the store too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tests.soak import calibrate
from tests.soak.harness import Target

if TYPE_CHECKING:
    from tests.hosts.servers import Network
    from tests.redis.server import PrivateRedis

NAMES = ("sqlite", "redis", "postgres", "mongodb", "rabbitmq_redis")

Opener = Callable[..., contextlib.AbstractAsyncContextManager[Target]]
"""``opener(tmp, network=None)``."""


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


def _where(network: Network | None) -> tuple[str, list[str]]:
    """The address a server listens on and the argv prefix that runs it there."""
    if network is None:
        return "127.0.0.1", []
    return network.hosts.address, network.hosts.inside(None)


@contextlib.asynccontextmanager
async def sqlite(tmp: Path, network: Network | None = None) -> AsyncIterator[Target]:
    yield Target("sqlite", f"sqlite:///{tmp}/soak.db")  # no server: kills and freezes only


def _redis(directory: Path, network: Network | None) -> PrivateRedis:
    from tests.redis.server import PrivateRedis

    host, wrap = _where(network)
    extra = ("--protected-mode", "no") if network is not None else ()  # reached from hosts
    return PrivateRedis(directory, *extra, host=host, wrap=wrap)


@contextlib.asynccontextmanager
async def redis(tmp: Path, network: Network | None = None) -> AsyncIterator[Target]:
    server = _redis(tmp / "redis", network)
    await asyncio.to_thread(server.start)
    if network is not None:
        network.ports = [server.port]

    async def stop() -> None:
        await asyncio.to_thread(server.kill)

    async def start() -> None:
        await asyncio.to_thread(server.start)

    try:
        yield Target("redis", f"{server.url}?prefix=soak", stop, start)
    finally:
        await asyncio.to_thread(server.kill)


@contextlib.asynccontextmanager
async def postgres(tmp: Path, network: Network | None = None) -> AsyncIterator[Target]:
    from tests.postgres.cluster import Cluster

    host, wrap = _where(network)
    cluster = Cluster(host=host, wrap=wrap)
    try:
        await asyncio.to_thread(cluster.init)
        if network is not None:  # the hosts' own /24
            network.ports = [cluster.port]
            with (cluster.dir / "data" / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {network.hosts.net}.0/24 trust\n")
        await asyncio.to_thread(cluster.start)

        async def stop() -> None:
            await asyncio.to_thread(cluster.stop_immediate)  # a crash: no checkpoint

        async def start() -> None:
            await asyncio.to_thread(cluster.start)

        yield Target("postgres", f"{cluster.url}?migrate=true", stop, start)
    finally:
        await asyncio.to_thread(cluster.destroy)


@contextlib.asynccontextmanager
async def mongodb(tmp: Path, network: Network | None = None) -> AsyncIterator[Target]:
    from tests.mongodb.conftest import MongoServer

    host, wrap = _where(network)
    server = MongoServer(tmp / "mongo.db", host=host, wrap=wrap)
    if network is not None:
        network.ports = [server.port]
    try:
        await server.start()
        stalled, p99 = await calibrate.threshold(server.url, floor=6.0)  # a slow test server
        yield Target(
            "mongodb",
            server.url,
            server.kill,
            server.start,
            stalled_threshold=stalled,
            share=0.25 if network is None else 0.02,  # the partition profile's floor is high
            heartbeat_p99=p99,
        )
    finally:
        await server.kill()


@contextlib.asynccontextmanager
async def rabbitmq_redis(tmp: Path, network: Network | None = None) -> AsyncIterator[Target]:
    """A private broker node over a private Redis metadata store; restarts alternate between
    the broker and the store. On test hosts the node has a name, port and epmd of its own
    there; on this host it is the node on 5673 (tests/rabbitmq/node.py)."""
    from tests.rabbitmq import node, support

    store = _redis(tmp / "store", network)
    host, wrap = _where(network)
    if network is None:
        broker = node.PrivateNode()
    else:
        broker = node.PrivateNode(f"rq{network.hosts.tag}", host=host, port=5672, wrap=wrap)
        network.ports = [store.port, 5672]
    turn = 0

    async def stop() -> None:
        nonlocal turn
        turn += 1
        await asyncio.to_thread(broker.kill if turn % 2 else store.kill)

    async def start() -> None:
        await asyncio.to_thread(broker.start if turn % 2 else store.start)

    try:
        await asyncio.to_thread(store.start)
        await asyncio.to_thread(broker.start)
        # reconcile_after=5: a delivery lost with the broker is published again within the
        # soak's time frame (the default, 60 s, is longer than the short profile)
        url = support.url(tmp, f"{store.url}?prefix=soak", amqp_url=broker.url)
        yield Target("rabbitmq_redis", url + "&reconcile_after=5", stop, start)
    finally:
        await asyncio.to_thread(broker.stop)
        await asyncio.to_thread(store.kill)


OPENERS: dict[str, Opener] = {
    "sqlite": sqlite,
    "redis": redis,
    "postgres": postgres,
    "mongodb": mongodb,
    "rabbitmq_redis": rabbitmq_redis,
}
