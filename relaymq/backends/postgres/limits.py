"""Claims of queues with limits (``relaymq.limits``) on PostgreSQL.

The shared claim statement takes rows with SKIP LOCKED, so concurrent claims never wait for
each other; it cannot count a queue's active jobs safely (each claim would count before the
others commit). So a queue with limits is left out of it and claimed on its own, in one
transaction: lock the queue's limits row (claims of that queue take turns there), count its
active jobs in a new statement (whose snapshot sees every claim that went before), claim the
allowance with the ordinary statement, and count the starts in the rate window.

With per-key limits the claim picks its jobs itself (``KeyBudget``) from the candidates one
statement reads: the count also promotes due delayed jobs, the candidates' statement also says
whether keys that may start nothing more held jobs back, and the jobs picked are claimed and
their starts counted by one statement: BEGIN, four statements, COMMIT, where it took up to
eight statements. The candidates are read a short page first (twice the jobs wanted): the
keys left out are left out by the statement, so the page is nearly always enough.

Which queues have limits is read at most once a second per handle (``LimitedQueues``). A queue
given limits meanwhile is left out of the shared statement by the statement itself, so a stale
list delays its claims by that second but never lets one past its limits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from relaymq.backends import sqlfile
from relaymq.policy import KEY_SCAN, Allowance, KeyBudget, allowance
from relaymq.records.limits import Limits

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
        return (
            [q for q in queues if q not in self._names],
            [q for q in queues if q in self._names],
        )


def to_limits(row: Any) -> Limits:
    return Limits(
        max_active=row["max_active"],
        rate=row["rate"],
        per=row["per"],
        key_rate=row["key_rate"],
        key_per=row["key_per"],
        key_max_active=row["key_max_active"],
        fair=row["fair"],
        weights=tuple((k, n) for k, n in json.loads(row["weights"])),
    )


@dataclass
class _Gate:
    """A limited claim's view of its queue, under the lock of the queue's limits row."""

    allowance: Allowance
    budget: KeyBudget | None
    now: float


async def _allow(
    con: asyncpg.Connection, queue: str, want: int, now: float | None, promote: int = 0
) -> _Gate | None:
    """Lock ``queue``'s limits row and decide what a claim of ``want`` may take (inside the
    caller's transaction); None when the queue has no limits. With per-key limits, up to
    ``promote`` due delayed jobs join the line first (the claim reads its candidates there)."""
    row = await con.fetchrow(Q["lock_limits"], queue)
    if row is None:
        return None
    limits = to_limits(row)
    capped = limits.key_max_active is not None
    promote = promote if limits.keyed else 0
    state = await con.fetchrow(Q["limits_active"], queue, promote, now, capped)
    a = allowance(limits, state["active"], row["win"], row["used"], state["now"], want)
    budget = None
    if limits.keyed:
        budget = KeyBudget(
            limits,
            row["key_win"],
            json.loads(row["key_used"]),
            state["now"],
            json.loads(state["key_active"]),
            json.loads(row["fair_served"]),
        )
    return _Gate(a, budget, state["now"])


def _windows(gate: _Gate, taken: int) -> tuple[Any, ...]:
    """What a claim stores back in its queue's limits row (``count_starts``): the rate
    windows with its ``taken`` starts counted."""
    a, budget = gate.allowance, gate.budget
    return (
        a.window,
        a.used + taken,
        budget.window if budget else 0,
        json.dumps(budget.used if budget else {}),
        json.dumps(budget.served if budget else {}),
    )


async def _count_starts(con: asyncpg.Connection, queue: str, gate: _Gate, taken: int) -> None:
    await con.execute(Q["count_starts"], queue, *_windows(gate, taken))


async def claim_limited(
    con: asyncpg.Connection,
    queue: str,
    worker_id: str,
    want: int,
    now: float | None,
    promote: int,
) -> tuple[list[asyncpg.Record], Allowance | None, float | bool | None]:
    """Claim up to ``want`` jobs of ``queue`` within its limits: the rows, the allowance
    (None: the queue has no limits, and the claim was the ordinary one), and False, or when
    its keys held jobs back, the seconds until the key window ends (None: when active jobs
    of those keys end, or when jobs of sequences were passed over)."""
    async with con.transaction():
        gate = await _allow(con, queue, want, now, promote)
        take = want if gate is None else gate.allowance.take
        rows: list[asyncpg.Record] = []
        keys_held: float | bool | None = False
        counted = False
        if take > 0 and gate is not None and gate.budget is not None:
            rows = await _claim_within(con, queue, worker_id, take, now, gate)
            counted = True
            if gate.budget.held_back and len(rows) < take:
                keys_held = gate.budget.retry_in(gate.now)
        elif take > 0:
            rows = await con.fetch(Q["claim"], [queue], worker_id, take, now, promote, True)
            rows = [r for r in rows if r["id"] is not None]  # a row of NULLs: none taken
        if len(rows) < take and keys_held is False:
            if await con.fetchval(Q["sequence_held"], queue):
                keys_held = None  # jobs of sequences passed over: they start as jobs end
        if gate is not None and not counted:
            await _count_starts(con, queue, gate, len(rows))
    return rows, None if gate is None else gate.allowance, keys_held


async def _claim_within(
    con: asyncpg.Connection,
    queue: str,
    worker_id: str,
    want: int,
    now: float | None,
    gate: _Gate,
) -> list[asyncpg.Record]:
    """Up to ``want`` waiting jobs in claim order, past those whose limit key has used its
    window or is at its cap (``KEY_SCAN`` looked at, at most), claimed with their starts
    counted (``_allow`` had due delayed jobs join the line)."""
    budget = gate.budget
    assert budget is not None
    spent = budget.spent()
    picked: list[str] = []
    # The keys left out are left out by the statement, so nearly every candidate is taken: a
    # short page first, the whole scan only when the page's jobs were not enough.
    page = min(KEY_SCAN, 2 * want + 8)
    while True:
        found = await con.fetch(Q["keyed_candidates"], queue, budget.excluded(), page, spent)
        if spent and found[0]["held"]:
            budget.held_back = True  # their jobs are left out of the candidates
        spent = []  # asked once per claim
        for r in found:
            if len(picked) == want or r["id"] is None:
                break
            if r["id"] not in picked and budget.take(r["limit_key"]):
                picked.append(r["id"])
        if len(picked) == want:
            break
        if page < KEY_SCAN and found[-1]["id"] is not None and len(found) == page:
            page = KEY_SCAN  # the page ran out before the line did: look further down
        elif not budget.next_round():
            break  # else: every key with waiting jobs had its turn; look again, a new round
    rows = await con.fetch(Q["claim_ids"], queue, picked, worker_id, now, *_windows(gate, 0))
    place = {job_id: i for i, job_id in enumerate(picked)}
    return sorted(rows, key=lambda r: place[r["id"]])  # in the order taken


async def claim_delivered_limited(
    con: asyncpg.Connection,
    queue: str,
    deliveries: Sequence[tuple[str, int]],
    worker_id: str,
    now: float | None,
) -> tuple[list[asyncpg.Record], Allowance | None, float | bool | None]:
    """``claim_delivered`` of ``queue`` within its limits: the statement's rows, the
    allowance (None: no limits), and False, or when live deliveries were held back (kept by
    the caller), the seconds until that may change (None: when active jobs end)."""
    async with con.transaction():
        gate = await _allow(con, queue, len(deliveries), now)
        offered = list(deliveries)
        held_back: float | bool | None = False
        if gate is not None:
            ids, tokens = [d[0] for d in deliveries], [d[1] for d in deliveries]
            rows = await con.fetch(Q["live_deliveries"], queue, ids, tokens)
            live = {r["id"]: r["limit_key"] for r in rows}
            free = {r["id"] for r in rows if r["free"]}
            offered, taken = [], 0
            for d in deliveries:
                if d[0] in live and taken >= gate.allowance.take:
                    held_back = gate.allowance.retry_in  # kept by the caller
                    continue
                key = live.get(d[0])
                if key is not None and gate.budget is not None and gate.budget.refuses(key):
                    held_back = gate.budget.retry_in(gate.now)
                    continue
                if d[0] in live and d[0] not in free:  # not its sequence's head yet
                    held_back = None if held_back is False else held_back
                    continue
                if d[0] in live and gate.budget is not None and not gate.budget.take(live[d[0]]):
                    held_back = gate.budget.retry_in(gate.now)
                    continue
                taken += d[0] in live
                offered.append(d)
        rows = []
        if offered:
            rows = await con.fetch(
                Q["claim_delivered"],
                queue,
                [d[0] for d in offered],
                [d[1] for d in offered],
                worker_id,
                now,
                True,
            )
        if gate is not None:
            await _count_starts(con, queue, gate, sum(1 for r in rows if r["id"] is not None))
        elif any(r["sequence_held"] for r in rows):
            held_back = None  # until the active job of its sequence ends
    return rows, None if gate is None else gate.allowance, held_back
