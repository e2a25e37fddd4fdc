"""Shared by the two Redis cases and the Redis tests: per-test key prefixes and clean-up."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import redis
from redis.asyncio import Redis

from relaymq.backends.base import Backend
from relaymq.backends.redis import RedisBackend
from relaymq.records.store import Clock
from tests.support.cases import BOGUS_STATE, Damage


def test_prefix(tmp: Path) -> str:
    """One key prefix per test (both handles of one test share it)."""
    return "rmqt-" + hashlib.sha1(str(tmp).encode()).hexdigest()[:12]


def unavailable(url: str) -> str | None:
    """None when ``url``'s server (a cluster node for cluster URLs) answers PING."""
    plain = url.replace("+cluster", "", 1)
    try:
        client = redis.Redis.from_url(plain, socket_connect_timeout=2, socket_timeout=2)
        try:
            client.ping()
            if "+cluster" in url and b"cluster_state:ok" not in client.execute_command(
                "CLUSTER", "INFO"
            ):
                return f"the cluster at {url} is not ready (bash scripts/services.sh)"
        finally:
            client.close()
    except redis.RedisError as e:
        return f"cannot reach {url}: {e}"
    return None


class CleaningRedisBackend(RedisBackend):
    """A test handle that deletes every key of its prefix when it closes.

    Tests only: finding the keys uses SCAN, which the backend itself never does.
    """

    def heartbeat_handle(self) -> Backend:
        """A plain handle: the test's clean-up stays with the handles the test made."""
        args, kwargs = self._made_with
        return RedisBackend(*args, **kwargs)

    async def close(self) -> None:
        client: Any = self._t.client
        if client is not None:
            if self._options.cluster:
                for node in client.get_primaries():
                    plain = Redis(host=node.host, port=node.port)
                    try:
                        await _delete_prefix(plain, self._keys.prefix)
                    finally:
                        await plain.aclose()
            else:
                await _delete_prefix(client, self._keys.prefix)
        await super().close()


async def _delete_prefix(client: Any, prefix: str) -> None:
    async for key in client.scan_iter(match=prefix + ":*", count=1000):
        await client.delete(key)


async def make(url: str, clock: Clock | None, tmp: Path) -> Backend:
    b = CleaningRedisBackend(url, clock=clock, prefix=test_prefix(tmp))
    await b.connect()
    return b


async def corrupt(backend: Backend, queue: str, job_id: str, damage: Damage = "field") -> None:
    """Damage a stored job: its token and creation time no longer parse (``field``), or its
    state is one relaymq does not know (``state``)."""
    assert isinstance(backend, RedisBackend)
    key = backend._keys.job(queue, job_id)
    assert await backend._run([("EXISTS", key)], "exists") == [1], f"no job {job_id!r}"
    fields = (
        ["token", "garbage", "created_at", "bad"] if damage == "field" else ["state", BOGUS_STATE]
    )
    await backend._run([("HSET", key, *fields)], "corrupt")


async def delete_prefix(url: str, prefix: str) -> None:
    """Delete every key under ``prefix`` on a (non-cluster) server, with a client of its own."""
    client = Redis.from_url(url)
    try:
        await _delete_prefix(client, prefix)
    finally:
        await client.aclose()
