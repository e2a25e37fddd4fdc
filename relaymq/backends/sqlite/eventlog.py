"""The SQLite backend's event log: the ``events`` table that subscribers in every process
tail. It keeps the newest ``events_keep`` rows, and none older than ``EVENTS_MAX_AGE``
seconds: a row holds a whole batch (an enqueue of a thousand jobs is one row), so a count
alone would let the table grow with the batches' size."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

from relaymq.backends.sqlfile import named_queries

Q = named_queries(__package__, "queries.sql")
Conn = sqlite3.Connection
EVENTS_MAX_AGE = 30.0
"""Seconds an event is kept at most (on the wall clock): far longer than a subscriber lags,
which polls at least every ``EVENTS_POLL_MAX`` from the newest event on (as on the other
backends, whose events are not stored at all: Redis pub/sub, PostgreSQL's NOTIFY)."""


def publish(conn: Conn, now: float, events: Sequence[bytes], keep: int) -> None:
    at = time.time()  # the wall clock, shared by the machine's processes (not a test clock)
    conn.executemany(Q["insert_event"], [{"body": body, "at": at} for body in events])
    conn.execute(Q["trim_events"], {"keep": keep})
    conn.execute(Q["trim_old_events"], {"cutoff": at - EVENTS_MAX_AGE})


def events_head(conn: Conn, now: float) -> int:
    (head,) = conn.execute(Q["events_head"]).fetchone()
    return int(head)


def events_after(conn: Conn, now: float, after: int, limit: int) -> list[tuple[int, bytes]]:
    return [
        (int(i), bytes(body))
        for i, body in conn.execute(Q["events_after"], {"after": after, "limit": limit})
    ]
