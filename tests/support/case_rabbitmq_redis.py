"""RabbitMQ on 127.0.0.1:5672 over a Redis metadata store (its own key prefix per test)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from relaymq.backends.base import Backend
from relaymq.records.store import Clock
from tests.rabbitmq import support
from tests.redis.support import delete_prefix, test_prefix
from tests.support import case_redis


def store_url(tmp: Path) -> str:
    return f"{case_redis.URL}?prefix={test_prefix(tmp)}"


_base = support.case("rabbitmq_redis", case_redis.CASE, store_url)


async def make(clock: Clock | None, tmp: Path) -> Backend:
    backend = await _base.make(clock, tmp)
    close = backend.close

    async def close_and_clean() -> None:  # the store's keys go with the test
        await close()
        await delete_prefix(case_redis.URL, test_prefix(tmp))

    backend.close = close_and_clean  # type: ignore[method-assign]
    return backend


CASE = dataclasses.replace(_base, make=make)
