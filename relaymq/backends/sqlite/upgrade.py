"""The SQLite file's schema and its upgrades: ``schema.sql`` makes a new file at version 1;
``upgrade_to_<n>`` in ``queries.sql`` bring an older one to ``SCHEMA_VERSION``; and every
file gives freed pages back to the file system (incremental auto-vacuum), a file made before
that too once converted."""

from __future__ import annotations

import sqlite3

from relaymq.backends.sqlfile import read
from relaymq.backends.sqlite.ops import Q

SCHEMA = read(__package__, "schema.sql")
SCHEMA_VERSION = 13
INCREMENTAL = 2
"""``PRAGMA auto_vacuum``'s answer for incremental auto-vacuum."""


def statements(script: str) -> list[str]:
    """The statements of ``script``, one by one (``executescript`` would commit first)."""
    out: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            out.append(pending)
            pending = ""
    if pending.strip():
        out.append(pending)  # the loader drops the last statement's ';'
    return out


def upgrade(conn: sqlite3.Connection) -> None:
    """Bring an older file to ``SCHEMA_VERSION`` (2 adds ``jobs.traceparent``, 3 the
    ``tallies`` table, 4 the ``schedules`` table, 5 ``job_keys``, 6 ``limits``, 7 the count of
    dependency failures in ``tallies``, 8 ``workers.refused``, 9 the ``meta`` table that
    takes over schedules, workers and leases, 10 ``jobs.attempt_history``, 11 ``events.at``, 12
    ``limits.key_max_active``, 13 ``jobs.sequence`` and its index),
    under the write lock and after reading the version again: another process may have just
    done it."""
    conn.execute(Q["begin_immediate"])
    try:
        (version,) = conn.execute(Q["schema_version"]).fetchone()
        for step in range(version + 1, SCHEMA_VERSION + 1):
            for statement in statements(Q[f"upgrade_to_{step}"]):
                conn.execute(statement)
            conn.execute(Q[f"set_version_{step}"])
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


def to_incremental(conn: sqlite3.Connection) -> None:
    """Make a file that does not use incremental auto-vacuum use it (a file made before this
    relaymq): one ``VACUUM``, which rewrites the file under the write lock, once per file.
    New files get it from ``pragma_auto_vacuum`` before their first write."""
    (mode,) = conn.execute(Q["auto_vacuum"]).fetchone()
    if mode != INCREMENTAL:
        conn.execute(Q["pragma_auto_vacuum"])
        conn.execute(Q["vacuum"])
