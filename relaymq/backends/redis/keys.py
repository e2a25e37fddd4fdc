"""The Redis key layout of ``RedisBackend``: every key the backend touches is named here.

Per queue, all keys share the hash tag ``{<queue>}``, so a queue lives in one Redis Cluster
slot and every per-queue script touches one slot only. ``base`` is ``<prefix>:{<queue>}``;
scripts receive it as ``KEYS[i]`` and derive the other names by appending a suffix:

=========================  ======  =========================================================
key                        type    content
=========================  ======  =========================================================
``base:job:<id>``          hash    one job record (fields: ``JOB_FIELDS``); absent -> None
``base:blocked``           zset    ids of jobs waiting for their dependencies, score ``seq``
``base:deps:<id>``         set     the blocked jobs waiting for job ``<id>`` to end
``base:waiting``           zset    waiting ids, score ``priority * 2**40 + seq`` (claim order)
``base:delayed``           zset    delayed ids, score ``run_at`` (promotion is a range query)
``base:active``            zset    active ids, score = last heartbeat or claim time, so the
                                   stall scan is ``ZRANGEBYSCORE -inf (now - threshold)``
``base:completed``         zset    finished ids, score ``finished_at`` (clean is a range
``base:failed``                    query); ``failed`` + ``expired`` are the DLQ
``base:expired``
``base:cancelled``
``base:meta``              hash    per-queue counters: ``seq`` (the FIFO allocator),
                                   ``stalled`` (recoveries so far)
``base:paused``            string  exists while the queue is paused
``base:wake``              list    wake-up tokens (at most ``WAKE_MAX``); idle workers BLPOP
``base:keys``              hash    throttle and debounce keys: key -> the id of the job holding it
``base:key_until``         zset    keys, score = the end of their throttle window (backend clock)
``base:limits``            hash    the queue's limits (``relaymq.limits``): ``max_active``,
                                   ``rate``, ``per``, ``key_rate``, ``key_per``,
                                   ``key_max_active`` (each absent when unset), ``window``,
                                   ``used`` (the current rate window, the starts counted
                                   in it) and ``key_window``, ``key_used`` (JSON: limit
                                   key -> starts in the current key window); with fairness
                                   ``fair`` (1), ``weights`` (JSON [[key, weight], ...]) and
                                   ``fair_served`` (JSON: limit key -> starts in the round),
                                   ``fair_skip``, ``fair_skip_score`` (how many jobs at the
                                   front of the line the round passed over, the score of the
                                   last: claim.lua reads on behind them)
``base:seq:<sequence>``    zset    the jobs of one sequence that hold their place in it
                                   (``relaymq.policy.holds_sequence``), score = the job's
                                   ``sequence_pos`` (its ``seq`` at enqueue, never changed)
``base:seqs``              set     the sequences of the queue that have a ``base:seq:`` set
``base:seq_run``           hash    sequence -> the id of its job claimed last (still running
                                   while that id is in ``base:active``)
``base:tallies:<day>``     hash    the queue's history for one day (``minute // 1440``):
                                   fields ``<minute>:c``, ``:r``, ``:f`` (completed,
                                   retried, failed), each a HINCRBY counter
``base:tallied``           set     days of ``base:tallies:<day>`` written by the dependency
                                   cascade (a job failed by its dependency), until the backend
                                   moves them into the global ``tallied``
=========================  ======  =========================================================

A state set's suffix is the state's name, so a job in state ``s`` is a member of ``base:s``
and nowhere else: ``counts`` is eight ``ZCARD`` (O(1)) and can never drift from the records.

Global keys (few, in their own slot ``{<prefix>:global}``; no per-queue script touches them):

``<prefix>:{<prefix>:global}:queues``          set   names of queues ever enqueued or paused
``<prefix>:{<prefix>:global}:tallied``         set   ``<day>|<queue>`` of every history day kept
``<prefix>:events``                            pub/sub channel of framed event batches

The meta store (``relaymq.backends.meta``: schedules, workers, leases) has a slot of its own,
``{<prefix>:meta}``, so each of its scripts touches one slot:

``<prefix>:{<prefix>:meta}:index``     zset  every record's key, all scores 0 (ZRANGEBYLEX
                                             lists a prefix)
``<prefix>:{<prefix>:meta}:r:<key>``   hash  ``value``, ``version``, ``expires`` ('' = never;
                                             the backend's clock)

No code path uses KEYS or SCAN: every read is a member of a set above or a range of one.

Why the waiting score is exact: a double holds every integer below 2**53 exactly. ``seq`` is
below 2**40 (a trillion jobs per queue) and ``|priority|`` is below 2**12 (checked at
enqueue), so ``|priority * 2**40 + seq| < 2**53``: each score is exact and sorting by it is
sorting by (priority, seq).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence

from redis.crc import key_slot

from relaymq.errors import ConfigError
from relaymq.job import Claim

PRIORITY_SHIFT = 2**40
PRIORITY_LIMIT = 2**12
"""Priorities must lie in ``(-PRIORITY_LIMIT, PRIORITY_LIMIT)`` to keep scores exact."""
WAKE_MAX = 32
STATE_SUFFIXES = (
    "blocked",
    "waiting",
    "delayed",
    "active",
    "completed",
    "failed",
    "expired",
    "cancelled",
)

JOB_FIELDS = (
    "task payload state priority seq created_at run_at ttl max_attempts timeout attempts token "
    "claimed_at heartbeat_at worker_id stalls cancel_requested progress result error finished_at "
    "traceparent depends_on dep_policy limit_key attempt_history sequence seq_failure"
).split()
"""Fields of a job hash. Absent fields mean None (or 0 for counters). ``worker_id`` means
something only while the job is active: settling leaves it behind (one write fewer per job)
and every reader reports None for a job in any other state."""


class Keys:
    """Key names for one prefix; see the module docstring for what each holds."""

    def __init__(self, prefix: str) -> None:
        if not prefix or "{" in prefix or "}" in prefix:
            raise ConfigError(f"invalid Redis key prefix {prefix!r}: non-empty, no braces")
        self.prefix = prefix
        g = f"{prefix}:{{{prefix}:global}}"
        self.queues = g + ":queues"
        self.tallied = g + ":tallied"
        m = f"{prefix}:{{{prefix}:meta}}"
        self.meta_index = m + ":index"
        self.meta_prefix = m + ":r:"
        self.events = f"{prefix}:events"

    def base(self, queue: str) -> str:
        if not queue:
            raise ConfigError("queue names must not be empty")
        return f"{self.prefix}:{{{queue}}}"

    def job(self, queue: str, job_id: str) -> str:
        return f"{self.base(queue)}:job:{job_id}"

    def state(self, queue: str, state: str) -> str:
        return f"{self.base(queue)}:{state}"

    def meta(self, queue: str) -> str:
        return self.base(queue) + ":meta"

    def paused(self, queue: str) -> str:
        return self.base(queue) + ":paused"

    def limits(self, queue: str) -> str:
        return self.base(queue) + ":limits"

    def wake(self, queue: str) -> str:
        return self.base(queue) + ":wake"

    def job_keys(self, queue: str) -> tuple[str, str]:
        """The hashes of the queue's throttle and debounce keys (holders, windows)."""
        return self.base(queue) + ":keys", self.base(queue) + ":key_until"

    def sequence(self, queue: str, sequence: str) -> str:
        return f"{self.base(queue)}:seq:{sequence}"

    def sequences(self, queue: str) -> tuple[str, str]:
        """The queue's set of sequences and its hash of each sequence's job claimed last."""
        return self.base(queue) + ":seqs", self.base(queue) + ":seq_run"

    def tallies(self, queue: str, day: int) -> str:
        return f"{self.base(queue)}:tallies:{day}"

    def cascade_days(self, queue: str) -> str:
        return f"{self.base(queue)}:tallied"

    def meta_record(self, key: str) -> str:
        return self.meta_prefix + key

    def slot(self, queue: str) -> int:
        """The cluster slot every key of ``queue`` lives in."""
        return int(key_slot(self.base(queue).encode()))

    def by_slot(self, queues: Sequence[str]) -> list[list[str]]:
        """``queues`` grouped by cluster slot: the queues one script call may touch together."""
        groups: dict[int, list[str]] = defaultdict(list)
        for q in queues:
            groups[self.slot(q)].append(q)
        return list(groups.values())


def per_queue(claims: Sequence[Claim], size: int) -> Iterator[tuple[str, list[int]]]:
    """The positions of ``claims`` grouped by queue, in chunks of at most ``size``: one script
    call per chunk, so a call touches one queue's keys (one cluster slot)."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(claims):
        groups[c.queue].append(i)
    for queue, indexes in groups.items():
        for start in range(0, len(indexes), size):
            yield queue, indexes[start : start + size]
