"""RabbitMQ on 127.0.0.1:5672 over a SQLite metadata store (one database file per test)."""

from __future__ import annotations

from tests.rabbitmq import support
from tests.support import case_sqlite

CASE = support.case("rabbitmq_sqlite", case_sqlite.CASE, case_sqlite.url)
