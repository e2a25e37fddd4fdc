"""What crosses the job-store seam: the answers and requests of enqueue, claim, heartbeat,
settle and recovery, the history's tallies, stored schedules and the worker registry's
records. Plain values; this module imports nothing of relaymq but other records."""

from __future__ import annotations

import bisect
import dataclasses
import enum
import json
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from relaymq.errors import ConfigError
from relaymq.job import (
    ATTEMPTS_KEPT,
    MAX_PRIORITY,
    Attempt,
    Claim,
    Job,
    JobState,
    NewJob,
)
from relaymq.job import Outcome as Outcome  # its home was here: importable from both

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
    joins_transactions: bool = False
    """Enqueues and settles can be written in a caller's own transaction, on its connection
    (``relaymq.backends.transactional``: the SQL backends)."""
    coalesce_enqueues: bool = False
    """Enqueues made while another is in flight are sent together as one batch
    (``relaymq.coalesce``): the backend stores a batch in one round trip, in order, and
    refuses it as a whole."""
    fair_claims: bool = True
    """Claims can rotate over limit keys (``Limits.fair``); false: the broker hands out jobs in
    its own order, and ``set_limits`` refuses ``fair``."""
    sequences: bool = False
    """Jobs of a sequence (``NewJob.sequence``) run one at a time in enqueue order, decided in
    the claim; false: ``enqueue`` refuses a job with a sequence, naming the backend."""
    search: str = "scan"
    """What ``list_jobs(where=...)`` finds with the backend's own query: "native" (every
    condition of a ``JobFilter``: SQL over the payload's JSON, MongoDB's filter over a decoded
    copy of it) or "scan" (none: the caller reads pages and checks them, up to a bound)."""


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


def refuse_sequences(jobs: Sequence[NewJob], backend: str) -> None:
    """``ConfigError`` when any of ``jobs`` has a sequence: for the backends whose claims do
    not keep sequences (``Capabilities.sequences`` false), so none is silently run out of
    order."""
    for new in jobs:
        if new.sequence is not None:
            raise ConfigError(
                f"job {new.id!r} has sequence={new.sequence!r}, and {backend} does not run "
                "sequences yet: its claims would not keep their order. Use the memory, "
                "SQLite, PostgreSQL, Redis or MongoDB backend, or RabbitMQ over a Redis or "
                "PostgreSQL store."
            )


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
    ran_for: float | None = None
    """Seconds the handler ran (None: it never started), for the job's attempt history."""
    keep: int = ATTEMPTS_KEPT
    """How many attempts the job's history keeps, this one included (0: none is recorded).
    The backend adds this attempt (``relaymq.job.Attempt``: its number, the claim's time and
    worker, the settle's time, ``ran_for`` and ``error``) in the settle's own atomic step."""


def ended_attempt(job: Job, s: Settle, now: float) -> Attempt:
    """The attempt ``s`` ends, as the history keeps it (``job``: the record as claimed)."""
    error = None if s.outcome is Outcome.COMPLETE else s.error
    return Attempt(job.attempts, s.outcome, job.claimed_at, now, job.worker_id, s.ran_for, error)


def with_attempt(history: tuple[Attempt, ...], attempt: Attempt, keep: int) -> tuple[Attempt, ...]:
    """``history`` with ``attempt`` added, the last ``keep`` of them (``keep`` 0: unchanged).
    Backends that store the history themselves (JSON, documents, Lua) follow this rule."""
    if keep <= 0:
        return history
    return (*history, attempt)[-keep:]


TIME_BUCKETS: tuple[float, ...] = (
    *(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
    *(1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)
"""Upper bounds in seconds of the buckets a tally counts durations in (run times, pickup
latencies); a last bucket counts everything longer. Fixed, so minutes from any worker add up."""


def time_bucket(seconds: float) -> int:
    """The index of the bucket of ``TIME_BUCKETS`` that ``seconds`` falls in."""
    return bisect.bisect_left(TIME_BUCKETS, seconds)


def add_counts(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """Two histograms added bucket by bucket (either may be shorter, or empty), without
    trailing empty buckets: the form every backend reads back."""
    n = max(len(a), len(b))
    out = [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)]
    while out and not out[-1]:
        out.pop()
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Tally:
    """What one queue's jobs (of one task, when ``task`` is given) came to in one minute: the
    dashboard's history and figures."""

    queue: str
    minute: int
    """``int(unix seconds // 60)``."""
    completed: int = 0
    retried: int = 0
    """Attempts that failed and will run again."""
    failed: int = 0
    """Jobs that ended failed for good (dead-lettered: failed or expired)."""
    task: str = ""
    """The jobs' task; "" for counts kept per queue only (jobs failed by a dependency)."""
    run_times: tuple[int, ...] = ()
    """Attempts whose handler ran, counted per bucket of ``TIME_BUCKETS`` by run time."""
    pickups: tuple[int, ...] = ()
    """First attempts counted per bucket of ``TIME_BUCKETS`` by the time from the job's enqueue
    to its start (a delay asked for at enqueue included)."""

    @property
    def empty(self) -> bool:
        return not (
            self.completed
            or self.retried
            or self.failed
            or any(self.run_times)
            or any(self.pickups)
        )


def merge_tallies(tallies: Sequence[Tally]) -> list[Tally]:
    """One tally per (queue, task, minute), summed: what a backend adds in one write."""
    sums: dict[tuple[str, str, int], Tally] = {}
    for t in tallies:
        key = (t.queue, t.task, t.minute)
        old = sums.get(key)
        sums[key] = t if old is None else add_tally(old, t)
    return [t for t in sums.values() if not t.empty]


def add_tally(a: Tally, b: Tally) -> Tally:
    """``a`` and ``b`` (of the same queue, task and minute) added up."""
    return Tally(
        a.queue,
        a.minute,
        a.completed + b.completed,
        a.retried + b.retried,
        a.failed + b.failed,
        a.task,
        add_counts(a.run_times, b.run_times),
        add_counts(a.pickups, b.pickups),
    )


def percentile(counts: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0-1) of durations counted per bucket of ``TIME_BUCKETS``, read by
    linear interpolation inside its bucket (the last, open bucket answers its lower bound);
    None when nothing was counted."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            low = TIME_BUCKETS[i - 1] if i > 0 else 0.0
            if i >= len(TIME_BUCKETS):
                return low
            return low + (TIME_BUCKETS[i] - low) * max(0.0, rank - seen) / n
        seen += n
    return TIME_BUCKETS[-1]


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
    processed: int = 0
    """Attempts it ended with an outcome since it started (completed, retried, failed,
    expired or cancelled), as of its last registration."""
    failed: int = 0
    """Of those, the attempts that failed (retried, failed or expired)."""
    beat: float = 0.0
    """Seconds within which it renews its registration; past them it has gone silent."""

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
            "processed": self.processed,
            "failed": self.failed,
            "beat": self.beat,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any], seen_at: float) -> WorkerInfo:
        """The one place a stored worker becomes a ``WorkerInfo``; raises ``KeyError``,
        ``TypeError`` or ``ValueError`` for a damaged record (callers skip it). ``refused``
        and the counts may be missing (a record of an older relaymq); ``refused`` may be JSON
        text (a SQL column)."""
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
            int(record.get("processed", 0)),
            int(record.get("failed", 0)),
            float(record.get("beat", 0.0)),
        )

    def seen(self, at: float) -> WorkerInfo:
        """This record as seen by the backend at ``at``."""
        return dataclasses.replace(self, seen_at=at)
