"""Claims of queues with limits (``relaymq.limits``) on PostgreSQL.

The shared claim statement takes rows with SKIP LOCKED, so concurrent claims never wait for
each other; it cannot count a queue's active jobs safely (each claim would count before the
others commit). So a queue with limits is left out of it and claimed on its own, in two
statements as a rule, and no transaction: read the queue's limits row with its version, count
its active jobs (per key too) and read a first page of candidates in one snapshot
("limits_view", which also promotes due delayed jobs); pick the jobs from them
(``KeyBudget`` with per-key limits), reading more candidates only when the page was not
enough ("keyed_candidates": both leave out the keys at their cap, and with fairness those
that had their turn); claim them and count their starts in one statement that applies only
while the limits row is still at that version ("claim_ids"). Every claim of a queue with limits
changes the row, and nothing else can start one of its jobs, so a claim that counted from a
snapshot no other claim has changed since cannot pass a limit; what else happens meanwhile
(jobs ending, recovered, enqueued) only frees room. A claim that loses that race twice takes
the row's lock in a transaction and counts under it: claims of a busy queue take turns there.

A worker's settles go in the claim's last statement (``settle_claim_limited``): one commit for
both, as the shared "settle_claim" does for queues without limits. The statements before it
count and read the queue as if those settles had applied, and the last one claims only if
every one of them does (each was active with its token, so no other party could settle it):
else the settles stand alone and the claim goes on as above.

A claim that took fewer jobs than it could asks, once they are claimed, whether the keys that
may start nothing more (at their cap, out of their window) hold jobs back: then the worker
tries again when those keys may start again rather than at once.

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
from relaymq.backends.postgres.tx import attempt_args, settle_args
from relaymq.policy import KEY_SCAN, Allowance, KeyBudget, allowance
from relaymq.records.limits import Limits
from relaymq.records.store import OUTCOME_STATE, Settle

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
class Gate:
    """A limited claim's view of its queue: the limits row (as of ``version``) and counts."""

    allowance: Allowance
    budget: KeyBudget | None
    now: float
    version: str
    partial: bool
    """Whether the budget's fair counts are those of the keys the claim looked at only
    ("limits_view"), rather than the whole stored map ("lock_limits")."""

    def reads_turns(self) -> bool:
        """Whether the candidates' statement leaves out the keys that had their turn in the
        stored round, and gives each candidate's count (the claim did not begin a new one)."""
        b = self.budget
        return self.partial and b is not None and b.fair and not b.new_round


def gate_of(row: Any, want: int) -> Gate:
    """What a claim of ``want`` may take, from a row of "limits_view" (or of "lock_limits"
    and "limits_active" together)."""
    limits = to_limits(row)
    a = allowance(limits, row["active"], row["win"], row["used"], row["now"], want)
    partial = "served_elsewhere" in row.keys()
    budget = None
    if limits.keyed:
        budget = KeyBudget(
            limits,
            row["key_win"],
            json.loads(row["key_used"]),
            row["now"],
            json.loads(row["key_active"]),
            {} if partial else json.loads(row["fair_served"]),
        )
        budget.served_elsewhere = partial and row["served_elsewhere"]
    return Gate(a, budget, row["now"], row["version"], partial)


async def _allow(
    con: asyncpg.Connection, queue: str, want: int, now: float | None, promote: int = 0
) -> Gate | None:
    """Lock ``queue``'s limits row and decide what a claim of ``want`` may take (inside the
    caller's transaction); None when the queue has no limits. Up to ``promote`` due delayed
    jobs join the line first (the claim reads its candidates there)."""
    row = await con.fetchrow(Q["lock_limits"], queue)
    if row is None:
        return None
    capped = row["key_max_active"] is not None
    state = await con.fetchrow(Q["limits_active"], queue, promote, now, capped)
    return gate_of({**dict(row), **dict(state)}, want)


def windows(gate: Gate, taken: int) -> tuple[Any, ...]:
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


async def _count_starts(con: asyncpg.Connection, queue: str, gate: Gate, taken: int) -> None:
    await con.execute(Q["count_starts"], queue, *windows(gate, taken))


OPTIMISTIC = 2
"""Claims a limited claim tries without the lock (each lost to another claim of the queue)
before it takes the lock and waits its turn."""

Claimed = tuple[list[asyncpg.Record], Allowance | None, float | bool | None]
Candidates = list[tuple[str, str | None, int | None]]
"""Waiting jobs in claim order: id, limit key, and the key's count in the fair round (None:
not read)."""
Page = tuple[Candidates, int]
"""Candidates read with the gate, and how many were asked for (fewer: the line ended)."""


def page_size(want: int) -> int:
    """How many candidates a claim of ``want`` reads first: the keys left out are left out by
    the statement, so nearly every candidate is taken, and a short page is nearly always
    enough (the whole scan, ``KEY_SCAN``, only when it was not)."""
    return min(KEY_SCAN, 2 * want + 8)


async def claim_limited(
    con: asyncpg.Connection,
    queue: str,
    worker_id: str,
    want: int,
    now: float | None,
    promote: int,
) -> Claimed:
    """Claim up to ``want`` jobs of ``queue`` within its limits: the rows, the allowance
    (None: the queue has no limits, and the claim was the ordinary one), and False, or when
    its keys held jobs back, the seconds until the key window ends (None: when active jobs
    of those keys end, or when jobs of sequences were passed over).

    First without a lock: read the limits row, the counts and a first page of candidates in
    one statement, pick the jobs, and claim them only while no other claim of the queue
    counted its starts in between (``claim_ids``). A claim that loses that race
    ``OPTIMISTIC`` times takes the lock."""
    size = page_size(want)
    for _ in range(OPTIMISTIC):
        row = await con.fetchrow(Q["limits_view"], queue, promote, now, size, *NONE)
        if row is None:
            break  # no limits (any more): the ordinary claim, below
        claimed, _ = await _claim_gated(
            con, queue, worker_id, now, gate_of(row, want), _page(row, size)
        )
        if claimed is not None:
            return claimed
    async with con.transaction():
        gate = await _allow(con, queue, want, now, promote)
        if gate is None:
            rows = await con.fetch(Q["claim"], [queue], worker_id, want, now, promote, True)
            held = None if queue in (rows[0]["sequence_held"] or ()) else False
            return [r for r in rows if r["id"] is not None], None, held
        claimed, _ = await _claim_gated(con, queue, worker_id, now, gate)
    assert claimed is not None, "the limits row changed under its lock"
    return claimed


async def settle_claim_limited(
    con: asyncpg.Connection,
    settles: Sequence[Settle],
    queue: str,
    worker_id: str,
    want: int,
    now: float | None,
    promote: int,
) -> tuple[list[bool], Claimed]:
    """``settles``' answers, then ``claim_limited``'s, in two statements as a rule: the
    limits view, its counts leaving out the jobs of ``queue`` settled here, then the settles
    with the claim's last step ("claim_ids"), one commit. None of the settles may put
    its job back in line (the claim could not see it). The settles apply even when the claim
    lost its race, which then goes on as ``claim_limited``."""
    size = page_size(want)
    settled = as_settled(settles, queue)
    row = await con.fetchrow(Q["limits_view"], queue, promote, now, size, *settled)
    if row is None:  # no limits (any more)
        rows = await con.fetch(Q["settle"], *settle_args(settles), now, *attempt_args(settles))
        applied = [bool(r["applied"]) for r in rows]
    else:
        gate = gate_of(row, want)
        claimed, applied = await _claim_gated(
            con, queue, worker_id, now, gate, _page(row, size), (settles, row["settling"])
        )
        if claimed is not None:
            return applied, claimed
    return applied, await claim_limited(con, queue, worker_id, want, now, promote)


def held_back(
    queue: str, taken: int, want: int, a: Allowance | None, keys_held: float | bool | None
) -> dict[str, float | None]:
    """A limited claim's entry in ``ClaimBatch.limited`` (``taken`` of ``want``, and what
    ``claim_limited`` said): when ``queue`` may give more; none when nothing held it back."""
    if keys_held is not False:
        return {queue: keys_held}
    if a is not None and taken == a.take < want:
        return {queue: a.retry_in}
    return {}


Settled = tuple[list[str], list[int], list[str]]
"""The jobs of a queue settled in the claim's own last statement, as the statements before it
read them (as if applied): ids, tokens, and the states they go to."""
NONE: Settled = ([], [], [])


def as_settled(settles: Sequence[Settle], queue: str) -> Settled:
    mine = [s for s in settles if s.claim.queue == queue]
    return (
        [s.claim.job_id for s in mine],
        [s.claim.token for s in mine],
        [OUTCOME_STATE[s.outcome].value for s in mine],
    )


def _page(row: Any, size: int) -> Page | None:
    """The first page of candidates of a row of "limits_view"; None when the statement
    promoted jobs, which the page, read in the same snapshot, misses."""
    if row["promoted"]:
        return None
    return list(zip(row["page_ids"], row["page_keys"], row["page_served"], strict=True)), size


async def _claim_gated(
    con: asyncpg.Connection,
    queue: str,
    worker_id: str,
    now: float | None,
    gate: Gate,
    page: Page | None = None,
    settling: tuple[Sequence[Settle], int] | None = None,
) -> tuple[Claimed | None, list[bool]]:
    """Claim what ``gate`` allows, as ``claim_limited`` says, from ``page`` first if given,
    applying the settles of ``settling`` in the same statement (with how many of them the
    gate read as applying); None when the limits row is no longer at the gate's version
    (another claim counted its starts) or the settles did not apply as read: nothing was
    claimed; and the settles' answers."""
    take = gate.allowance.take
    budget = gate.budget
    settled = as_settled(settling[0], queue) if settling is not None else NONE
    picked = await _pick(con, queue, take, gate, page, settled) if take > 0 else []
    rows = await claim_ids(con, queue, picked, worker_id, now, gate, settling)
    applied = list(rows[0]["applied"] or ())
    if not rows[0]["won"]:
        return None, applied
    place = {job_id: i for i, job_id in enumerate(picked)}
    taken = sorted((r for r in rows if r["id"] is not None), key=lambda r: place[r["id"]])
    keys_held: float | bool | None = False
    if budget is not None and len(taken) < take and not budget.held_back:
        # The keys that may start nothing more (at their cap or out of their window, some by
        # this claim's own starts) held back their jobs the candidates left out, those their
        # sequence holds too (a key refuses before a sequence does, as KeyBudget.refuses
        # says); asked once the jobs this claim took are no longer waiting.
        spent = budget.spent()
        if (
            spent
            and (await con.fetchrow(Q["keyed_candidates"], queue, [], 0, spent, *NONE, False))[0]
        ):
            budget.held_back = True
    if budget is not None and budget.held_back and len(taken) < take:
        keys_held = budget.retry_in(gate.now)
    if len(taken) < take and keys_held is False:
        if await con.fetchval(Q["sequence_held"], queue):
            keys_held = None  # jobs of sequences passed over: they start as jobs end
    return (taken, gate.allowance, keys_held), applied


async def claim_ids(
    con: asyncpg.Connection,
    queue: str,
    picked: list[str],
    worker_id: str,
    now: float | None,
    gate: Gate,
    settling: tuple[Sequence[Settle], int] | None = None,
) -> list[asyncpg.Record]:
    """The rows of "claim_ids": claim ``picked`` as ``gate`` counted them, after the settles
    of ``settling`` if given."""
    settles, counted = settling if settling is not None else ((), 0)
    adds = gate.partial and not (gate.budget is not None and gate.budget.new_round)
    rows: list[asyncpg.Record] = await con.fetch(
        Q["claim_ids"],
        *settle_args(settles),
        now,
        *attempt_args(settles),
        queue,
        picked,
        worker_id,
        *windows(gate, 0),
        gate.version,
        adds,
        counted,
    )
    return rows


async def _pick(
    con: asyncpg.Connection,
    queue: str,
    want: int,
    gate: Gate,
    page: Page | None,
    settled: Settled,
) -> list[str]:
    """Up to ``want`` waiting jobs in claim order, past those whose limit key has used its
    window or is at its cap (``KEY_SCAN`` looked at, at most), counted in the gate's budget
    (due delayed jobs joined the line as the gate was read); ``page``, if given, is the
    first page of candidates."""
    budget = gate.budget
    picked: list[str] = []
    found, size = page if page is not None else (None, page_size(want))
    while True:
        turns = gate.reads_turns()
        if found is None:
            excluded = budget.excluded() if budget else []
            rows = await con.fetch(
                Q["keyed_candidates"], queue, excluded, size, [], *settled, turns
            )
            found = [(r["id"], r["limit_key"], r["served"]) for r in rows if r["id"] is not None]
        for job_id, key, served in found:
            if len(picked) == want:
                break
            if turns and served and budget is not None and key is not None:
                budget.served.setdefault(key, served)  # its turns so far
            if job_id not in picked and (budget is None or budget.take(key)):
                picked.append(job_id)
        if len(picked) == want:
            break
        if size < KEY_SCAN and len(found) >= size:
            size = KEY_SCAN  # the page ran out before the line did: look further down
        elif budget is None or not budget.next_round():
            break  # else: every key with waiting jobs had its turn; look again, a new round
        found = None
    return picked


async def claim_delivered_limited(
    con: asyncpg.Connection,
    queue: str,
    deliveries: Sequence[tuple[str, int]],
    worker_id: str,
    now: float | None,
) -> Claimed:
    """``claim_delivered`` of ``queue`` within its limits: the statement's rows, the
    allowance (None: no limits), and False, or when live deliveries were held back (kept by
    the caller), the seconds until that may change (None: when active jobs end)."""
    async with con.transaction():
        gate = await _allow(con, queue, len(deliveries), now)  # promotes nothing
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
