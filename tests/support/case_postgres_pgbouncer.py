"""PostgreSQL through PgBouncer in transaction mode (``RELAYMQ_TEST_BACKENDS=postgres_pgbouncer``;
not among the default cases: tests/topologies/test_pgbouncer.py runs the pooler in
``make test``). A private PgBouncer in front of the shared server is started on first use and
stopped when the test process exits; LISTEN goes straight to the server (``listen_url``)."""

from __future__ import annotations

import atexit
import tempfile
from pathlib import Path
from urllib.parse import quote

from relaymq.backends.base import Backend
from relaymq.records.store import Clock
from tests.support import case_postgres
from tests.support.cases import BackendCase

_bouncer: list[object] = []


def _pooled_server() -> str:
    from tests.topologies.pgbouncer import PgBouncer

    if not _bouncer:
        b = PgBouncer(Path(tempfile.mkdtemp(prefix="topo-pgbouncer-")), upstream_port=5432)
        b.start()
        atexit.register(b.stop)
        _bouncer.append(b)
    bouncer = _bouncer[0]
    assert isinstance(bouncer, PgBouncer)
    return bouncer.url("transaction")


def url(tmp: Path) -> str:
    direct = quote(f"{case_postgres.SERVER}/{case_postgres.DATABASE}", safe="")
    return (
        f"{_pooled_server()}?schema={case_postgres.schema_for(tmp)}&migrate=true"
        f"&pooler=transaction&listen_url={direct}"
    )


async def make(clock: Clock | None, tmp: Path) -> Backend:
    await case_postgres.ensure_database()
    backend = case_postgres._TestBackend(url(tmp), clock=clock)
    await backend.connect()
    schema = backend.options.schema
    case_postgres._open[schema] = case_postgres._open.get(schema, 0) + 1
    return backend


CASE = BackendCase(
    name="postgres_pgbouncer",
    make=make,
    unavailable=case_postgres.unavailable,
    corrupt=case_postgres.corrupt,
    url=url,
)
