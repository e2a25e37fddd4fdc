"""What crosses the job-store seam: the answers and requests of enqueue, claim, heartbeat,
settle and recovery, the history's tallies, stored schedules and the worker registry's
records. Plain values; this module imports nothing of relaymq but other records."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from relaymq.job import MAX_PRIORITY, Claim, Job, JobState, NewJob

Clock = Callable[[], float]
"""Returns seconds since the epoch. Given to a backend, it replaces the server's clock (tests)."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend can promise; tests, the CLI and the dashboard adapt to it (never to names)."""

    durable: bool
    """Accepted jobs survive a restart of the process and of the server."""
    cross_process: bool
    """Several processes (workers, producers, admin) share one state."""
    server_clock: bool
    """Stall, due and TTL decisions use a clock shared by all processes."""
    blocking_wait: bool
    """``wait`` is woken by the server (blocking pop, NOTIFY, delivery) rather than by polling."""
    cluster_safe: bool = False
    """All keys of a queue live together, so the backend runs on a sharded cluster."""
    transactions: bool = True
    """Multi-record transitions are atomic on the server (false: documented weaker guarantee)."""
    delivery_store: bool = False
    """The backend also implements ``DeliveryStore`` (it can hold a broker's job metadata)."""
    migrations: bool = False
    """The backend's storage has versioned migrations that ``migrate`` applies."""
    max_priority: int = MAX_PRIORITY
    """The largest priority ``enqueue`` accepts; every priority from 0 to it keeps its order."""
    settle_claims: bool = False
    """``settle_and_claim`` makes one round trip: the worker then claims with its settles
    (false: the worker's claims and settles are separate calls, made side by side)."""


@dataclass(slots=True, unsafe_hash=True)
class Enqueued:
    """The answer for one ``NewJob``: its id and whether it already existed."""

    id: str
    duplicate: bool = False
    replaced: str | None = None
    """A debounced job: the id of the waiting or delayed job it replaced (deleted), if any."""


def keyed(jobs: Sequence[NewJob]) -> bool:
    """Whether any of ``jobs`` carries a ``KeyRule`` (the backends' slower, keyed path)."""
    return any(j.rule is not None for j in jobs)


def dependent(jobs: Sequence[NewJob]) -> bool:
    """Whether any of ``jobs`` waits for others (the backends' slower path for those)."""
    return any(j.depends_on for j in jobs)


@dataclass(slots=True)
class ClaimBatch:
    """Jobs claimed in one call, with the backend's clock reading at the moment of the claim."""

    jobs: list[Job]
    now: float
    limited: dict[str, float | None] = field(default_factory=dict)
    """Queues whose limits (``set_limits``) held back jobs this claim asked for, each with the
    seconds until its rate window ends, or None when it waits for active jobs to end. Wait for
    them by time, not with ``wait``: their waiting jobs would wake it at once."""


@dataclass(slots=True)
class SettledClaimed:
    """The answer of ``settle_and_claim``."""

    applied: list[bool]
    """``settle``'s answers."""
    batch: ClaimBatch | None = None
    """What the claim took; None when no claim was asked for, or it failed (``claim_error``)."""
    claim_error: Exception | None = None


class Outcome(enum.StrEnum):
    """How a worker ends its claim on a job."""

    COMPLETE = "complete"  # -> completed, result stored
    RETRY = "retry"  # -> delayed (or waiting when delay == 0), error stored, attempts kept
    FAIL = "fail"  # -> failed, into the DLQ
    EXPIRE = "expire"  # -> expired, into the DLQ
    CANCEL = "cancel"  # -> cancelled (the worker acknowledges a cancellation)
    RELEASE = "release"  # -> waiting at once, the attempt not counted (graceful shutdown)


OUTCOME_STATE: dict[Outcome, JobState] = {
    Outcome.COMPLETE: JobState.COMPLETED,
    Outcome.RETRY: JobState.DELAYED,
    Outcome.FAIL: JobState.FAILED,
    Outcome.EXPIRE: JobState.EXPIRED,
    Outcome.CANCEL: JobState.CANCELLED,
    Outcome.RELEASE: JobState.WAITING,
}


OUTCOME_WORDS: dict[Outcome, str] = {
    Outcome.COMPLETE: "completed",
    Outcome.RETRY: "retried",
    Outcome.FAIL: "failed",
    Outcome.EXPIRE: "expired",
    Outcome.CANCEL: "cancelled",
    Outcome.RELEASE: "released",
}
"""The word each applied outcome is counted under: a worker's stats field, a metric's name."""


@dataclass(slots=True, unsafe_hash=True)
class Settle:
    """One fenced transition out of ``active``."""

    claim: Claim
    outcome: Outcome
    result: bytes | None = None
    error: str | None = None
    delay: float = 0.0
    """For RETRY: seconds from the backend's now until the job is eligible again."""


@dataclass(frozen=True, slots=True)
class Tally:
    """What one queue's jobs came to in one minute: the dashboard's history."""

    queue: str
    minute: int
    """``int(unix seconds // 60)``."""
    completed: int = 0
    retried: int = 0
    """Attempts that failed and will run again."""
    failed: int = 0
    """Jobs that ended failed for good (dead-lettered: failed or expired)."""


def merge_tallies(tallies: Sequence[Tally]) -> list[Tally]:
    """One tally per (queue, minute), summed: what a backend adds in one write."""
    sums: dict[tuple[str, int], list[int]] = {}
    for t in tallies:
        s = sums.setdefault((t.queue, t.minute), [0, 0, 0])
        s[0] += t.completed
        s[1] += t.retried
        s[2] += t.failed
    return [Tally(q, m, *s) for (q, m), s in sums.items() if any(s)]


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    """A schedule as the backend keeps it: ``spec`` is opaque (``relaymq.schedules`` encodes
    it); ``next_ms`` and ``paused`` are the state every scheduler process shares."""

    id: str
    spec: bytes
    next_ms: int
    """The next tick to fire, in milliseconds since the epoch."""
    paused: bool = False


@dataclass(frozen=True, slots=True)
class Beat:
    """One heartbeat: renew ``claim``; store ``progress`` when given."""

    claim: Claim
    progress: bytes | None = None


@dataclass(frozen=True, slots=True)
class BeatResult:
    held: bool
    """False when the claim is lost (recovered, finished, removed or cancelled)."""
    cancel_requested: bool = False
    """True when an operator cancelled the job; the worker should stop the handler."""


class CancelResult(enum.StrEnum):
    CANCELLED = "cancelled"  # the job is now cancelled
    ALREADY_TERMINAL = "already_terminal"  # nothing changed; the job had already ended
    NOT_FOUND = "not_found"


@dataclass(frozen=True, slots=True)
class Recovered:
    """What one ``recover_stalled`` pass did."""

    requeued: list[str] = field(default_factory=list)
    """Jobs moved back to ``waiting``."""
    failed: list[str] = field(default_factory=list)
    """Jobs past ``max_stalled``, failed into the DLQ."""
    errors: list[str] = field(default_factory=list)
    """Jobs that could not be examined (corrupt records); the pass went on without them."""


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A registered worker, as ``list_workers`` returns it."""

    id: str
    queues: tuple[str, ...]
    concurrency: int
    host: str
    pid: int
    started_at: float
    seen_at: float = 0.0
    """Backend clock at the last ``register_worker``."""
    refused: tuple[tuple[str, str], ...] = ()
    """(queue, error) for each of ``queues`` that the backend refuses as configured: the
    worker stopped claiming from it (``Backend.check_queue``)."""

    @classmethod
    def for_this_process(
        cls, worker_id: str, queues: Sequence[str], concurrency: int
    ) -> WorkerInfo:
        """The record a worker registers for itself: this host, this pid, started now."""
        return cls(
            worker_id, tuple(queues), concurrency, socket.gethostname(), os.getpid(), time.time()
        )

    def to_record(self) -> dict[str, Any]:
        """The stored form (every backend keeps these fields; ``seen_at`` is the backend's)."""
        return {
            "id": self.id,
            "queues": list(self.queues),
            "concurrency": self.concurrency,
            "host": self.host,
            "pid": self.pid,
            "started_at": self.started_at,
            "refused": [list(pair) for pair in self.refused],
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any], seen_at: float) -> WorkerInfo:
        """The one place a stored worker becomes a ``WorkerInfo``; raises ``KeyError``,
        ``TypeError`` or ``ValueError`` for a damaged record (callers skip it). ``refused``
        may be missing (a record of an older relaymq) or JSON text (a SQL column)."""
        refused = record.get("refused") or {}
        if isinstance(refused, str | bytes):
            refused = json.loads(refused)
        return cls(
            str(record["id"]),
            tuple(str(q) for q in record["queues"]),
            int(record["concurrency"]),
            str(record["host"]),
            int(record["pid"]),
            float(record["started_at"]),
            float(seen_at),
            tuple((str(q), str(e)) for q, e in dict(refused).items()),
        )

    def seen(self, at: float) -> WorkerInfo:
        """This record as seen by the backend at ``at``."""
        return dataclasses.replace(self, seen_at=at)
