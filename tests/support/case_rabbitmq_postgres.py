"""RabbitMQ on 127.0.0.1:5672 over a PostgreSQL metadata store (its own schema per test).

The store's schema is dropped when the test's last handle closes (two handles in one test
share it), after the RabbitMQ backend has closed the store's pool.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from relaymq.backends.base import Backend
from relaymq.records.store import Clock
from tests.rabbitmq import support
from tests.support import case_postgres

_base = support.case("rabbitmq_postgres", case_postgres.CASE, case_postgres.url)
_open: dict[str, int] = {}  # schema -> open handles


async def make(clock: Clock | None, tmp: Path) -> Backend:
    await case_postgres.ensure_database()
    schema = case_postgres.schema_for(tmp)
    backend = await _base.make(clock, tmp)
    _open[schema] = _open.get(schema, 0) + 1
    close = backend.close
    closed = False

    async def close_and_drop() -> None:
        nonlocal closed
        await close()
        if closed:
            return
        closed = True
        _open[schema] -= 1
        if _open[schema] == 0:
            del _open[schema]
            await case_postgres.drop_schema(schema)

    backend.close = close_and_drop  # type: ignore[method-assign]
    return backend


CASE = dataclasses.replace(_base, make=make)
