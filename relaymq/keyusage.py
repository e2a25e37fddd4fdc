"""What a queue's limits hold back right now, for operators (``relaymq queue limits``, the
dashboard, the Prometheus gauge ``relaymq_queue_held_back_jobs``): the active jobs of the
busiest limit keys, the keys at their cap (``Limits.key_max_active``), and how many waiting
jobs the limits hold back.

Read through the backend's listings (no backend method of its own): the active jobs (at most
``ACTIVE_LOOK``; bounded by the workers' concurrency) and the first ``relaymq.policy.KEY_SCAN``
waiting jobs in claim order, which is as far as a claim looks past held keys. So the figures
are a reading, not a snapshot taken in one atomic step: a claim may move jobs in between.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from relaymq.instrumented import Instrumented
from relaymq.job import JobState
from relaymq.policy import KEY_SCAN
from relaymq.records.limits import Limits

ACTIVE_LOOK = 10_000
"""Active jobs read at most."""


@dataclass(frozen=True, slots=True)
class KeyUsage:
    """One reading of a queue's keys (``key_usage``)."""

    active: list[tuple[str, int]] = field(default_factory=list)
    """(limit key, its active jobs) of the busiest keys, busiest first."""
    at_cap: list[str] = field(default_factory=list)
    """The keys whose active jobs reached ``key_max_active``, sorted."""
    held_back: int = 0
    """Waiting jobs the limits hold back now: every waiting job while the queue's
    ``max_active`` is reached, else those (of the first ``KEY_SCAN`` in line) whose key is at
    its cap. The rates are not counted (their windows are the claim's own state)."""

    def as_json(self) -> dict[str, object]:
        return {
            "active_by_key": dict(self.active),
            "keys_at_cap": self.at_cap,
            "held_back": self.held_back,
        }


async def key_usage(
    ops: Instrumented, queue: str, limits: Limits | None, top: int = 10
) -> KeyUsage:
    """Read ``queue``'s keys under ``limits`` (None: the queue has none: nothing is held)."""
    if limits is None:
        return KeyUsage()
    active = await ops.list_jobs(queue, JobState.ACTIVE, limit=ACTIVE_LOOK)
    by_key = Counter(j.limit_key for j in active if j.limit_key is not None)
    cap = limits.key_max_active
    at_cap = sorted(k for k, n in by_key.items() if cap is not None and n >= cap)
    if limits.max_active is not None and len(active) >= limits.max_active:
        held = (await ops.counts(queue))[JobState.WAITING]
    elif at_cap:
        waiting = await ops.list_jobs(queue, JobState.WAITING, limit=KEY_SCAN)
        capped = set(at_cap)
        held = sum(1 for j in waiting if j.limit_key in capped)
    else:
        held = 0
    busiest = sorted(by_key.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return KeyUsage(busiest, at_cap, held)
