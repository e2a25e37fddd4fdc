"""PostgreSQL backend (``postgresql://``, ``postgres://``): asyncpg, a pool, LISTEN/NOTIFY."""

from relaymq.backends.postgres.backend import PostgresBackend
from relaymq.backends.postgres.migrations import migrate

__all__ = ["PostgresBackend", "migrate"]
