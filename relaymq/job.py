"""The job record and the values that travel with it across the backend seam.

The records made for every job (``Job``, ``NewJob``, ``Claim``; ``Settle``, ``Enqueued`` and
``ClaimBatch`` in ``backends.base``; ``Call``; ``events.Event``) are slotted dataclasses, not
frozen ones. A frozen dataclass sets each field through ``object.__setattr__``: with them, those
constructors were 30 % of the instructions of a job drained on memory:// and 11 % on Redis.
They are still snapshots that nothing in relaymq changes once made; those that were hashable
stay hashable (``unsafe_hash``).
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from relaymq.serializers import DEFAULT_SERIALIZER, Serializer

MAX_PRIORITY = 255
"""The largest priority a job may have (0 runs first); every backend keeps the order of 0 to it."""


class JobState(enum.StrEnum):
    """The eight states of a job. See ``TERMINAL`` for the ones a job never leaves by itself."""

    BLOCKED = "blocked"
    """Waits for the jobs it depends on (``depends_on``) to end."""
    WAITING = "waiting"
    DELAYED = "delayed"
    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


TERMINAL: frozenset[JobState] = frozenset(
    {JobState.COMPLETED, JobState.FAILED, JobState.EXPIRED, JobState.CANCELLED}
)
"""A terminal job leaves its state only by an operator's manual retry (``retry_job``)."""

DLQ_STATES: frozenset[JobState] = frozenset({JobState.FAILED, JobState.EXPIRED})
"""The dead-letter queue of a queue is its failed and expired jobs."""


@dataclass(slots=True, unsafe_hash=True)
class Claim:
    """Proof that a worker holds the current attempt of a job.

    ``token`` is a per-job fencing token that increases on every claim, so a write that carries
    an older token is recognisably stale.
    """

    queue: str
    job_id: str
    token: int
    claimed_at: float


PENDING: frozenset[JobState] = frozenset({JobState.WAITING, JobState.DELAYED, JobState.ACTIVE})
"""A job that has not ended yet."""


class KeyMode(enum.StrEnum):
    THROTTLE = "throttle"
    """Drop the new job while the key is held (answered as a duplicate of the holder)."""
    DEBOUNCE = "debounce"
    """Replace the holder while it waits; the new job is delayed by its ``delay``."""


@dataclass(frozen=True, slots=True)
class KeyRule:
    """Deduplication beyond the job id, by a key of the producer's choosing, per queue.

    Throttle: the job is stored only if no job holds ``key``. A job holds its key while it
    is waiting, delayed or active, and for ``window`` seconds after it was enqueued.
    Debounce: the job is stored and takes ``key``; a waiting or delayed job that held it is
    deleted (replaced), so of a burst only the last runs, ``delay`` after the last enqueue."""

    key: str
    mode: KeyMode
    window: float = 0.0
    """Throttle only: seconds from the enqueue during which the key stays held."""


class DependencyPolicy(enum.StrEnum):
    """What a job does when a job it depends on ends other than completed (failed, expired,
    cancelled, or removed before it ended)."""

    FAIL = "fail"
    """End this job failed as well (into the DLQ), and so on down the chain."""
    IGNORE = "ignore"
    """Run it once every dependency has ended; it sees the results of the completed ones."""
    INCLUDE = "include"
    """As IGNORE, and it also sees which dependencies did not complete, and why."""


class SequenceFailure(enum.StrEnum):
    """What a job of a sequence (``NewJob.sequence``) does to its sequence once it is
    dead-lettered (failed or expired)."""

    HOLD = "hold"
    """It holds the sequence (the jobs behind it wait) until it is retried (replayed from the
    DLQ), cancelled or removed."""
    CONTINUE = "continue"
    """It leaves the sequence: the next job runs."""


class Outcome(enum.StrEnum):
    """How a worker ends its claim on a job."""

    COMPLETE = "complete"  # -> completed, result stored
    RETRY = "retry"  # -> delayed (or waiting when delay == 0), error stored, attempts kept
    FAIL = "fail"  # -> failed, into the DLQ
    EXPIRE = "expire"  # -> expired, into the DLQ
    CANCEL = "cancel"  # -> cancelled (the worker acknowledges a cancellation)
    RELEASE = "release"  # -> waiting at once, the attempt not counted (graceful shutdown)


ATTEMPTS_KEPT = 20
"""How many attempts a job's history keeps by default (``Settings.attempt_history``)."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """One ended attempt of a job, as its history keeps it (``Job.attempt_history``). The
    backend writes it in the same atomic step as the attempt's outcome."""

    attempt: int
    """Its number: the job's ``attempts`` while it ran (1 for the first; an operator's retry
    counts from 1 again)."""
    outcome: Outcome
    started_at: float | None
    """When it was claimed (backend clock)."""
    ended_at: float
    """When its outcome was written (backend clock)."""
    worker: str | None = None
    """The worker that ran it."""
    ran_for: float | None = None
    """Seconds its handler ran; None when the handler never started (the job had expired, was
    cancelled first, or could not be decoded)."""
    error: str | None = None
    """What went wrong (type, message and traceback), for every outcome but ``complete``."""

    def to_record(self) -> dict[str, Any]:
        """The stored form: one JSON object (or document) per attempt, these keys on every
        backend."""
        return {
            "attempt": self.attempt,
            "outcome": self.outcome.value,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "worker": self.worker,
            "ran_for": self.ran_for,
            "error": self.error,
        }

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> Attempt:
        """An attempt from its stored form; ``KeyError``, ``TypeError`` or ``ValueError`` when
        it is not one."""

        def seconds(value: Any) -> float | None:
            if value is None:
                return None
            if isinstance(value, dt.datetime):  # MongoDB's dates: UTC, maybe without a zone
                return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp()
            return float(value)

        ended = seconds(r["ended_at"])
        if ended is None:
            raise ValueError("an attempt without ended_at")
        worker, error = r.get("worker"), r.get("error")
        return cls(
            int(r["attempt"]),
            Outcome(r["outcome"]),
            seconds(r.get("started_at")),
            ended,
            None if worker is None else str(worker),
            seconds(r.get("ran_for")),
            None if error is None else str(error),
        )


def attempts_from(stored: str | bytes | Sequence[Any] | None) -> tuple[Attempt, ...]:
    """A stored history (a JSON array, or a list of mappings) as ``Attempt`` records, oldest
    first. The history is for people to read: an entry that cannot be read is left out rather
    than making the whole job unreadable."""
    if stored is None or stored == b"" or stored == "":
        return ()
    if isinstance(stored, str | bytes):
        try:
            stored = json.loads(stored)
        except ValueError:
            return ()
    if not isinstance(stored, list):  # e.g. Lua's cjson writes an empty array as {}
        return ()
    out = []
    for entry in stored:
        try:
            out.append(Attempt.from_record(entry))
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
    return tuple(out)


MAX_ERROR_CHARS = 4000
"""The longest error text stored with a job (``describe``)."""


def describe(e: BaseException) -> str:
    """The stored error: type, message and a trimmed traceback; never fails itself."""
    try:
        text = "".join(traceback.format_exception(e))
    except Exception:
        text = f"{type(e).__name__}: <unprintable exception>"
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS // 4] + "\n...\n" + text[-MAX_ERROR_CHARS // 2 :]
    return text


def error_line(error: str | None) -> str:
    """The line of a stored error that says what happened: a traceback's last line."""
    lines = [line for line in (error or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


@dataclass(slots=True, unsafe_hash=True)
class NewJob:
    """A job as a producer hands it to ``Backend.enqueue``: the payload is already serialized."""

    queue: str
    id: str
    task: str
    payload: bytes
    priority: int = 0
    delay: float = 0.0
    """Seconds from the backend's *now* until the job becomes eligible."""
    ttl: float | None = None
    """Seconds from ``created_at`` after which the job expires instead of running."""
    max_attempts: int = 1
    timeout: float | None = None
    traceparent: str | None = None
    """The W3C trace context of the enqueue that made the job (set only while tracing is on,
    by ``relaymq.tracing``); stored with the job so each attempt's span joins the trace."""
    rule: KeyRule | None = None
    """Throttle or debounce by key (``KeyRule``); None for the plain job-id deduplication."""
    depends_on: tuple[str, ...] = ()
    """Ids of jobs of the same queue this job waits for (existing, or earlier in the batch)."""
    on_dependency_failure: DependencyPolicy = DependencyPolicy.FAIL
    limit_key: str | None = None
    """The key its queue's per-key limits count it under (``Limits.key_rate``)."""
    sequence: str | None = None
    """The jobs of one sequence of a queue run one at a time, in enqueue order
    (``relaymq.policy.sequence_head``)."""
    sequence_on_failure: SequenceFailure = SequenceFailure.HOLD


@dataclass(slots=True)
class Job:
    """A stored job as a backend returns it. Times are seconds since the epoch, backend clock.
    A snapshot: changing one changes nothing stored."""

    queue: str
    id: str
    task: str
    payload: bytes
    state: JobState
    priority: int = 0
    seq: int = 0
    created_at: float = 0.0
    run_at: float | None = None
    ttl: float | None = None
    max_attempts: int = 1
    timeout: float | None = None
    attempts: int = 0
    token: int = 0
    claimed_at: float | None = None
    heartbeat_at: float | None = None
    worker_id: str | None = None
    stalls: int = 0
    cancel_requested: bool = False
    progress: bytes | None = None
    """As stored (serialized); ``progress_value()`` decodes it."""
    result: bytes | None = None
    """As stored (serialized); ``result_value()`` decodes it."""
    error: str | None = None
    finished_at: float | None = None
    extra: dict[str, str] = field(default_factory=dict)
    """Backend-specific facts worth showing an operator (never needed by the core)."""
    traceparent: str | None = None
    """As given at enqueue (``NewJob.traceparent``); None when tracing was off."""
    depends_on: tuple[str, ...] = ()
    """As given at enqueue: the jobs it waited for (``blocked`` until they ended)."""
    on_dependency_failure: DependencyPolicy = DependencyPolicy.FAIL
    limit_key: str | None = None
    """As given at enqueue (``NewJob.limit_key``)."""
    sequence: str | None = None
    """As given at enqueue (``NewJob.sequence``)."""
    sequence_on_failure: SequenceFailure = SequenceFailure.HOLD
    attempt_history: tuple[Attempt, ...] = ()
    """Its last attempts (``Settings.attempt_history`` of them at most), oldest first: when
    each started and ended, on which worker, how long its handler ran, and its error."""

    @property
    def claim(self) -> Claim:
        """The claim this record was returned with (meaningful for jobs returned by ``claim``)."""
        return Claim(self.queue, self.id, self.token, self.claimed_at or 0.0)

    def progress_value(self, serializer: Serializer = DEFAULT_SERIALIZER) -> Any:
        """The last progress its handler reported, decoded; None when none was stored."""
        return None if self.progress is None else serializer.loads(self.progress)

    def result_value(self, serializer: Serializer = DEFAULT_SERIALIZER) -> Any:
        """The handler's return value, decoded; None unless the job completed."""
        return None if self.result is None else serializer.loads(self.result)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def expired_at(self, now: float) -> bool:
        """True when the job's TTL (measured from ``created_at``) has passed at ``now``."""
        return self.ttl is not None and self.created_at + self.ttl <= now
