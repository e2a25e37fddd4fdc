"""Claims of queues with limits (``relaymq.limits``) on SQLite: what a claim learns of a
queue before it takes anything (``read_gate``: paused, its limits, their allowance, the per-key
counts), and what it stores back afterwards (``count_starts``). Both run inside the claim's
write transaction (``ops.claim``, ``ops.claim_delivered``), which every other writer waits for,
so the counts they read are exact. No SQL here: see queries.sql.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3

from relaymq.backends.sqlfile import named_queries
from relaymq.policy import Allowance, KeyBudget, allowance
from relaymq.records.limits import Limits

Q = named_queries(__package__, "queries.sql")
Conn = sqlite3.Connection


@dataclasses.dataclass
class Gate:
    """What a claim learns of a queue before it takes anything (``queue_gate``)."""

    paused: bool
    limits: Limits | None = None
    allowance: Allowance | None = None
    key_window: int = 0
    key_used: dict[str, int] = dataclasses.field(default_factory=dict)
    key_active: dict[str, int] = dataclasses.field(default_factory=dict)
    fair_served: dict[str, int] = dataclasses.field(default_factory=dict)

    def budget(self, now: float) -> KeyBudget | None:
        if self.limits is None or not self.limits.keyed:
            return None
        return KeyBudget(
            self.limits, self.key_window, self.key_used, now, self.key_active, self.fair_served
        )


def stored_limits(
    max_active: int | None,
    rate: int | None,
    per: float,
    key_rate: int | None,
    key_per: float,
    key_max_active: int | None,
    fair: int,
    weights: str,
) -> Limits:
    """``Limits`` from the columns of a ``limits`` row (``weights``: JSON pairs)."""
    return Limits(
        max_active=max_active,
        rate=rate,
        per=per,
        key_rate=key_rate,
        key_per=key_per,
        key_max_active=key_max_active,
        fair=bool(fair),
        weights=tuple((k, n) for k, n in json.loads(weights)),
    )


def read_gate(conn: Conn, now: float, queue: str, want: int) -> Gate:
    """Whether ``queue`` is paused, its limits, and what they allow a claim of ``want``."""
    (
        paused,
        max_active,
        rate,
        per,
        window,
        used,
        key_rate,
        key_per,
        key_window,
        key_used,
        key_max_active,
        fair,
        weights,
        fair_served,
        active,
    ) = conn.execute(Q["queue_gate"], {"queue": queue}).fetchone()
    if paused or per is None:
        return Gate(bool(paused))
    limits = stored_limits(max_active, rate, per, key_rate, key_per, key_max_active, fair, weights)
    a = allowance(limits, active, window, used, now, want)
    key_active: dict[str, int] = {}
    if key_max_active is not None:
        key_active = dict(conn.execute(Q["active_by_key"], {"queue": queue}).fetchall())
    served = json.loads(fair_served)
    return Gate(False, limits, a, key_window, json.loads(key_used), key_active, served)


def count_starts(conn: Conn, queue: str, gate: Gate, taken: int, budget: KeyBudget | None) -> None:
    a = gate.allowance
    assert a is not None
    conn.execute(
        Q["count_starts"],
        {
            "queue": queue,
            "window": a.window,
            "used": a.used + taken,
            "key_window": budget.window if budget else gate.key_window,
            "key_used": json.dumps(budget.used if budget else gate.key_used),
            "fair_served": json.dumps(budget.served if budget else gate.fair_served),
        },
    )
