"""Every collection and index the MongoDB backend uses, declared in one place.

``ensure_indexes`` creates them idempotently (``createIndexes`` with the same keys and options is
a no-op on the server), so every ``connect`` may call it.

Collections of one database (the URL path names it):

``jobs``
    One document per job (fields in ``records.py``). Unique on ``(queue, id)``: that index is
    the cross-process deduplication of job ids.
``queues``
    One document per queue: ``{_id: queue, seq: <last FIFO sequence>, paused: bool}``, and
    ``sequences: true`` once a job of a sequence was enqueued in it (its claims then take
    turns under a lease, as with limits), and when the queue has limits, ``limits:
    {max_active, rate, per, key_rate, key_per}`` with
    ``win``, ``used`` (the current rate window and the starts counted in it) and
    ``key_window``, ``key_used`` (the current key window and ``[key, starts]`` pairs).
``locks``
    The leases that make the claims of a queue with limits take turns: ``{_id: name, owner,
    expires_at}``; ``_id`` makes them unique.
``meta``
    The meta store (schedules, the worker registry, leases; ``meta.py``): ``{_id: key,
    value, version, expires}``; ``_id`` makes each key unique.
``events``
    The event log tailed by subscribers: ``{_id: <dense increasing int>, body, at}``; trimmed
    to the newest events on publish. ``counters`` holds its id allocator.
``counters``
    ``{_id: "events", n: <last event id>}``.
``tallies``
    The history: ``{_id: "<queue>|<minute>", queue, minute, completed, retried, failed}``,
    each count a ``$inc`` counter.
"""

from __future__ import annotations

from typing import Final

from pymongo import ASCENDING, IndexModel
from pymongo.asynchronous.database import AsyncDatabase

JOBS: Final = "jobs"
QUEUES: Final = "queues"
LOCKS: Final = "locks"
META: Final = "meta"
EVENTS: Final = "events"
COUNTERS: Final = "counters"
TALLIES: Final = "tallies"
JOB_KEYS: Final = "job_keys"
"""Throttle and debounce keys: ``_id`` "<queue>|<key>", ``queue``, ``holder`` (a job id),
``until`` (the end of a throttle window, a date) and ``v`` (a version for compare-and-set)."""

INDEXES: Final[dict[str, list[IndexModel]]] = {
    JOBS: [
        # Deduplication across processes; also get_jobs, settle and heartbeat filters.
        IndexModel([("queue", ASCENDING), ("id", ASCENDING)], unique=True, name="queue_id"),
        # Claims (state in waiting/delayed, ready_at <= now, sorted by priority then line
        # position), the waiting page of list_jobs, counts per state.
        IndexModel(
            [
                ("queue", ASCENDING),
                ("state", ASCENDING),
                ("priority", ASCENDING),
                ("ready_at", ASCENDING),
                ("seq", ASCENDING),
            ],
            name="claim_order",
        ),
        # Delayed page by run time, and the stall scan (active jobs by heartbeat).
        IndexModel(
            [("queue", ASCENDING), ("state", ASCENDING), ("ready_at", ASCENDING)],
            name="state_ready_at",
        ),
        IndexModel(
            [("queue", ASCENDING), ("state", ASCENDING), ("heartbeat_at", ASCENDING)],
            name="state_heartbeat",
        ),
        # Pages of finished jobs and clean(older_than).
        IndexModel(
            [("queue", ASCENDING), ("state", ASCENDING), ("finished_at", ASCENDING)],
            name="state_finished",
        ),
        # Sequences: a sequence's active jobs, and its head (the earliest job that holds its
        # place, by state then enqueue position); only jobs of a sequence are in it.
        IndexModel(
            [
                ("queue", ASCENDING),
                ("sequence", ASCENDING),
                ("state", ASCENDING),
                ("sequence_pos", ASCENDING),
            ],
            name="sequence",
            partialFilterExpression={"sequence": {"$type": "string"}},
        ),
        # Reading back the documents of one batch claim or one batched write.
        IndexModel([("claim_id", ASCENDING)], name="claim_id", sparse=True),
    ],
    # Forgetting lapsed meta records (workers that stopped without unregistering).
    META: [IndexModel([("expires", ASCENDING)], name="expires")],
    # A queue's history in minute order; pruning every queue's old minutes.
    # Pruning a queue's ended keys.
    JOB_KEYS: [IndexModel([("queue", ASCENDING), ("until", ASCENDING)], name="queue_until")],
    TALLIES: [
        IndexModel([("queue", ASCENDING), ("minute", ASCENDING)], name="queue_minute"),
        IndexModel([("minute", ASCENDING)], name="minute"),
    ],
}


async def ensure_indexes(db: AsyncDatabase[dict[str, object]]) -> None:
    """Create every declared index that does not exist yet (idempotent)."""
    for collection, models in INDEXES.items():
        await db[collection].create_indexes(models)
