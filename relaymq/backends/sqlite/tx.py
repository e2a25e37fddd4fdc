"""The backend's operations (ops.py) run on a caller's connection, inside the caller's
transaction (``relaymq.backends.transactional``).

A caller's connection is a ``sqlite3.Connection`` (run on the calling thread, as sqlite3
wants), an ``aiosqlite.Connection`` (run on its own thread) or a SQLAlchemy object over one of
them. Before anything is written, the connection must be on the backend's file, with the schema
version this relaymq writes, and in a transaction: one already open, or, for a connection that
opens one itself before a write (sqlite3's default, legacy transaction control), the one it
would open, begun here first so that relaymq's reads belong to it. A connection in autocommit
mode is refused. The connection's row and text factories are set aside while relaymq's
statements run, and its ``recursive_triggers`` turned on (dependencies use it), then all three
are put back.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from relaymq.backends.sqlite.errors import translate
from relaymq.backends.sqlite.ops import Q
from relaymq.backends.transactional import (
    driver_connection,
    driver_connection_sync,
    unknown_connection,
)
from relaymq.errors import ConfigError

T = TypeVar("T")
KNOWN = (
    "a sqlite3 Connection, an aiosqlite Connection, or a SQLAlchemy AsyncSession, "
    "AsyncConnection, Session or Connection over one of them"
)


class SQLiteWrite(Generic[T]):
    """``work(conn, now)`` to run in the transaction of ``connection`` (``InTransaction``)."""

    def __init__(
        self,
        connection: object,
        path: str,
        version: int,
        now: Callable[[], float],
        work: Callable[[sqlite3.Connection, float], T],
    ) -> None:
        self.connection = connection
        self.path = path
        self.version = version
        self.now = now
        self.work = work

    async def run(self) -> T:
        con: Any = await driver_connection(self.connection)
        if isinstance(con, sqlite3.Connection):
            return self._in(con)
        if type(con).__module__.split(".")[0] == "aiosqlite":
            # aiosqlite runs everything on its connection's own thread; so must this
            result: T = await con._execute(self._in, con._conn)
            return result
        raise unknown_connection(con, "the SQLite backend", KNOWN)

    def run_sync(self) -> T:
        con = driver_connection_sync(self.connection)
        if isinstance(con, sqlite3.Connection):
            return self._in(con)
        if type(con).__module__.split(".")[0] == "aiosqlite":
            raise ConfigError(
                "an aiosqlite Connection is written to from async code: use the awaitable "
                "form (enqueue, add, complete_in), not the _sync one"
            )
        raise unknown_connection(con, "the SQLite backend", KNOWN)

    def _in(self, conn: sqlite3.Connection) -> T:
        factories = conn.row_factory, conn.text_factory
        conn.row_factory, conn.text_factory = None, str
        try:
            self._check(conn)
            (recursive,) = conn.execute(Q["recursive_triggers"]).fetchone()
            if not recursive:
                conn.execute(Q["pragma_recursive_triggers"])
            try:
                return self.work(conn, self.now())
            finally:
                if not recursive:
                    conn.execute(Q["pragma_no_recursive_triggers"])
        except sqlite3.Error as e:
            raise translate(e, self.path) from e
        finally:
            conn.row_factory, conn.text_factory = factories

    def _check(self, conn: sqlite3.Connection) -> None:
        """``ConfigError`` unless ``conn`` is on the backend's file, at its schema version,
        and in a transaction (begun here for a connection that would begin one itself)."""
        files = {row[1]: row[2] for row in conn.execute(Q["database_list"])}
        here = files.get("main") or ""
        if not here or not os.path.exists(self.path) or not os.path.samefile(here, self.path):
            raise ConfigError(
                f"this connection is to {here or 'a database in memory'!r}, the backend's "
                f"jobs are in {os.path.abspath(self.path)!r}: write in a transaction of "
                "the backend's own file (or give the app an outbox in yours)"
            )
        (version,) = conn.execute(Q["schema_version"]).fetchone()
        if version != self.version:
            raise ConfigError(
                f"{here} has relaymq schema {version}, this relaymq writes {self.version}: "
                "connect relaymq to it once (a worker, or relaymq queue list), which "
                "upgrades it"
            )
        if conn.in_transaction:
            return
        level = conn.isolation_level
        if level is None or getattr(conn, "autocommit", False) is True:
            raise ConfigError(
                "no transaction is open on this connection (it is in autocommit mode), so "
                "the job would be stored at once whatever becomes of your work: open one "
                'first (conn.execute("BEGIN IMMEDIATE"))'
            )
        # sqlite3 would begin one before relaymq's first write; begin it now, as it would
        conn.execute(Q[_BEGIN.get(level.upper(), "begin_deferred")])


_BEGIN = {"IMMEDIATE": "begin_immediate", "EXCLUSIVE": "begin_exclusive"}
"""The statement sqlite3 begins a transaction with, by ``isolation_level``."""
