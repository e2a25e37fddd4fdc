"""Claims of queues with limits (``relaymq.limits``) on PostgreSQL.

The shared claim statement takes rows with SKIP LOCKED, so concurrent claims never wait for
each other; it cannot count a queue's active jobs safely (each claim would count before the
others commit). So a queue with limits is left out of it and claimed on its own, in one
transaction: lock the queue's limits row (claims of that queue take turns there), count its
active jobs in a new statement (whose snapshot sees every claim that went before), claim the
allowance with the ordinary statement, and count the starts in the rate window.

Which queues have limits is read at most once a second per handle (``LimitedQueues``). A queue
given limits meanwhile is left out of the shared statement by the statement itself, so a stale
list delays its claims by that second but never lets one past its limits.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import asyncpg

from relaymq.backends import sqlfile
from relaymq.limits import Allowance, Limits, allowance

Q = sqlfile.named_queries(__package__, "queries.sql")

REFRESH = 1.0
"""Seconds a handle trusts its list of queues with limits."""


class LimitedQueues:
    """The queues with limits, as this handle last read them."""

    def __init__(self) -> None:
        self._names: frozenset[str] = frozenset()
        self._read_at = float("-inf")

    def stale(self) -> bool:
        return time.monotonic() - self._read_at >= REFRESH

    def update(self, names: Sequence[str]) -> None:
        self._names = frozenset(names)
        self._read_at = time.monotonic()

    def forget(self) -> None:
        """Read again on the next claim (this handle changed some limits)."""
        self._read_at = float("-inf")

    def split(self, queues: Sequence[str]) -> tuple[list[str], list[str]]:
        """``queues`` without limits, and with, each in the order given."""
        return ([q for q in queues if q not in self._names],
                [q for q in queues if q in self._names])  # fmt: skip


def to_limits(row: Any) -> Limits:
    return Limits(max_active=row["max_active"], rate=row["rate"], per=row["per"])


async def _allow(
    con: asyncpg.Connection, queue: str, want: int, now: float | None
) -> Allowance | None:
    """Lock ``queue``'s limits row and decide what a claim of ``want`` may take (inside the
    caller's transaction); None when the queue has no limits."""
    row = await con.fetchrow(Q["lock_limits"], queue)
    if row is None:
        return None
    state = await con.fetchrow(Q["limits_active"], queue, now)
    return allowance(to_limits(row), state["active"], row["win"], row["used"], state["now"],
                     want)  # fmt: skip


async def claim_limited(
    con: asyncpg.Connection, queue: str, worker_id: str, want: int, now: float | None,
    promote: int,
) -> tuple[list[asyncpg.Record], Allowance | None]:  # fmt: skip
    """Claim up to ``want`` jobs of ``queue`` within its limits; the rows, and the allowance
    (None: the queue has no limits, and the claim was the ordinary one)."""
    async with con.transaction():
        a = await _allow(con, queue, want, now)
        take = want if a is None else a.take
        rows = []
        if take > 0:
            rows = await con.fetch(Q["claim"], [queue], worker_id, take, now, promote, True)
        if a is not None:
            await con.execute(Q["count_starts"], queue, a.window, a.used + len(rows))
    return rows, a


async def claim_delivered_limited(
    con: asyncpg.Connection, queue: str, deliveries: Sequence[tuple[str, int]], worker_id: str,
    now: float | None,
) -> tuple[list[asyncpg.Record], Allowance | None, bool]:  # fmt: skip
    """``claim_delivered`` of ``queue`` within its limits: the statement's rows, the
    allowance (None: no limits), and whether live deliveries were held back (kept)."""
    async with con.transaction():
        a = await _allow(con, queue, len(deliveries), now)
        offered = list(deliveries)
        held_back = False
        if a is not None:
            ids, tokens = [d[0] for d in deliveries], [d[1] for d in deliveries]
            live = {r["id"] for r in await con.fetch(Q["live_deliveries"], queue, ids, tokens)}
            offered, taken = [], 0
            for d in deliveries:
                if d[0] in live and taken >= a.take:
                    held_back = True  # kept by the caller; a stale one is reported stale
                    continue
                taken += d[0] in live
                offered.append(d)
        rows = []
        if offered:
            rows = await con.fetch(
                Q["claim_delivered"], queue, [d[0] for d in offered],
                [d[1] for d in offered], worker_id, now, True,
            )  # fmt: skip
        if a is not None:
            claimed = sum(1 for r in rows if r["id"] is not None)
            await con.execute(Q["count_starts"], queue, a.window, a.used + claimed)
    return rows, a, held_back
