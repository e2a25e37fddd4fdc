"""The backend contract: what every storage/broker adapter promises.

Rules that hold on every backend (see DESIGN.md section 3):

1. Each transition is ONE atomic backend operation (a Lua script, one SQL transaction, one
   conditional document update). Nothing above this seam composes a transition from smaller calls.
2. Times compared across processes (stall, due, TTL) come from the backend's clock: the server's
   where it has one, or the ``clock`` given to the constructor (a test clock).
3. The core decides (attempts, backoff, retry or fail); the backend stores the decision.
4. Backends neither log nor serialize: payloads, results and event bodies are opaque ``bytes``.
   Driver exceptions are translated to ``relaymq.errors`` at the boundary.
5. Every write after a claim is fenced: it applies only while the job is ``active`` with the
   claim's token. A stale claim changes nothing and is reported as lost.

Batch-first: every call a worker makes per job takes a batch, so a worker spends one round trip
per batch. Methods are listed in the order every backend module keeps them.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import json
import os
import socket
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from relaymq.job import Claim, Job, JobState, NewJob
from relaymq.limits import Limits
from relaymq.options import MAX_PRIORITY

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
        return cls(worker_id, tuple(queues), concurrency, socket.gethostname(), os.getpid(),
                   time.time())  # fmt: skip

    def to_record(self) -> dict[str, Any]:
        """The stored form (every backend keeps these fields; ``seen_at`` is the backend's)."""
        return {
            "id": self.id, "queues": list(self.queues), "concurrency": self.concurrency,
            "host": self.host, "pid": self.pid, "started_at": self.started_at,
            "refused": [list(pair) for pair in self.refused],
        }  # fmt: skip

    @classmethod
    def from_record(cls, record: Mapping[str, Any], seen_at: float) -> WorkerInfo:
        """The one place a stored worker becomes a ``WorkerInfo``; raises ``KeyError``,
        ``TypeError`` or ``ValueError`` for a damaged record (callers skip it). ``refused``
        may be missing (a record of an older relaymq) or JSON text (a SQL column)."""
        refused = record.get("refused") or {}
        if isinstance(refused, str | bytes):
            refused = json.loads(refused)
        return cls(
            str(record["id"]), tuple(str(q) for q in record["queues"]),
            int(record["concurrency"]), str(record["host"]), int(record["pid"]),
            float(record["started_at"]), float(seen_at),
            tuple((str(q), str(e)) for q, e in dict(refused).items()),
        )  # fmt: skip

    def seen(self, at: float) -> WorkerInfo:
        """This record as seen by the backend at ``at``."""
        return dataclasses.replace(self, seen_at=at)


class Backend(abc.ABC):
    """Base class of every backend. Subclasses implement every abstract method, in this order."""

    capabilities: Capabilities
    url: str = ""
    create_missing: bool = True
    """Whether ``connect`` may create missing storage (a database file). Read-only tools set it
    to False so that a mistyped location is an error, not a new empty queue store."""
    retention: float | None = None
    """Seconds finished (terminal) jobs are kept; None keeps them until ``clean``. The elected
    maintenance runner of each queue applies it through ``clean`` (never the backend itself)."""

    _made_with: tuple[tuple[Any, ...], dict[str, Any]]

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        self = super().__new__(cls)
        self._made_with = (args, kwargs)  # what heartbeat_handle builds its twin from
        return self

    def heartbeat_handle(self) -> Backend | None:
        """A new, unconnected handle on the same state with its own connections, for the
        heartbeats a worker sends from its own thread while its event loop is blocked
        (``relaymq.worker.loopwatch``). None when the backend cannot have one (in-memory state
        belongs to one event loop). The default builds this class again with the arguments
        this handle was built with."""
        args, kwargs = self._made_with
        return type(self)(*args, **kwargs)

    @classmethod
    def inner_urls(cls, url: str) -> dict[str, str]:
        """The URLs of the backends this one is built over, by constructor keyword (a broker's
        metadata store). ``from_url`` builds each and passes it in; most backends have none."""
        return {}

    async def connect(self) -> None:
        """Open connections and prepare storage. Idempotent."""

    async def close(self) -> None:
        """Release connections. The backend may not be used afterwards."""

    async def check_queue(self, queue: str) -> None:
        """Raise ``ConfigError`` when this backend refuses to serve ``queue`` as configured (a
        broker queue declared with other arguments): a worker checks its queues at start, and
        again while one is refused. Storage-wide refusals (missing migrations) are
        ``connect``'s. The default accepts every queue."""

    async def migrate(self) -> list[str]:
        """Apply pending storage migrations (without ``connect``); the names applied now.

        Backends without versioned migrations (``capabilities.migrations`` false) prepare
        their storage on ``connect`` and apply nothing here.
        """
        return []

    async def __aenter__(self) -> Backend:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- producer ---------------------------------------------------------------------------

    @abc.abstractmethod
    async def enqueue(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        """Store each job as ``waiting`` (``delayed`` when ``delay > 0``), in order.

        Each job gets the next per-queue FIFO sequence. A job whose id already exists in its
        queue creates nothing and is answered with ``duplicate=True``; so is a repeated id
        within the same batch. When this returns, every non-duplicate job is durably accepted.

        A job with a ``rule`` (``KeyRule``) is deduplicated by its key too, in the same atomic
        step, in batch order: a throttled job whose key is held creates nothing and is answered
        with ``duplicate=True`` and the id of the job holding the key; a debounced job deletes
        the waiting or delayed job holding its key (``replaced``) and takes the key. Keys are
        per queue; ``obliterate`` forgets them. Batches without rules never pay for them.

        A job with ``depends_on`` waits for those jobs of its queue (existing, or earlier in
        the batch; the core checks that they exist): it is stored ``blocked`` while any has
        not ended, and each end (completed, failed, expired, cancelled, or deleted before it
        ended) is counted in the same atomic step as that transition. When the last ends, the
        job becomes ``delayed``, due at once. Under ``DependencyPolicy.FAIL``, a dependency
        that ends other than completed fails the job instead (error ``dependency <id> ended
        <state>``, into the DLQ), which its own dependents count in turn. Dependencies that
        ended before the enqueue count at once. Jobs without dependencies never pay for them.
        """

    async def enqueue_announced(self, jobs: Sequence[NewJob], at: float) -> list[Enqueued]:
        """``enqueue``, and publish each job's event (``job:waiting``, ``job:delayed`` or
        ``job:deduplicated``, stamped ``at``) in one message once the jobs are stored.

        This default makes two calls; a backend that can store and publish in one round trip
        (one script, statement or transaction) overrides it, to the same effect."""
        from relaymq import events  # it imports this module

        answers = await self.enqueue(jobs)
        await events.publish(self, events.enqueued(jobs, answers, at))
        return answers

    # -- worker -----------------------------------------------------------------------------

    @abc.abstractmethod
    async def claim(self, queues: Sequence[str], worker_id: str, limit: int) -> ClaimBatch:
        """Atomically take up to ``limit`` eligible jobs from ``queues``.

        First promotes due delayed jobs to ``waiting``. Then takes waiting jobs of unpaused
        queues, lower priority number first, FIFO within a priority; queues are visited in the
        order given until ``limit`` is reached (the worker rotates that order for fairness).
        Each job becomes ``active`` with ``token + 1``, ``attempts + 1``,
        ``claimed_at = heartbeat_at = now`` and ``worker_id``. Two concurrent claims never
        return the same job.

        A queue with limits (``set_limits``) gives at most its ``relaymq.policy.allowance``,
        decided in the same atomic step against every process's claims: its active jobs stay
        within ``max_active``, and each claim counts its starts in the rate window. With
        ``key_rate``, a job whose ``limit_key`` used its key window is passed over (it keeps
        its place) and the jobs behind it are taken, ``relaymq.policy.KEY_SCAN`` looked at at
        most. A queue that gave its whole allowance while the claim asked for more, or whose
        keys held jobs back, is named in ``limited``.
        Claims of queues without limits pay nothing for them.
        """

    @abc.abstractmethod
    async def heartbeat(self, beats: Sequence[Beat]) -> list[BeatResult]:
        """Renew each claim that is still held (sets ``heartbeat_at = now``), fenced.

        Reports per beat whether the claim is held and whether cancellation was requested.
        A lost claim changes nothing.
        """

    @abc.abstractmethod
    async def settle(self, settles: Sequence[Settle]) -> list[bool]:
        """Apply each fenced transition; True when applied.

        A transition applies only while the job is ``active`` with the claim's token; otherwise
        nothing changes and the answer is False (claim lost). Repeating a terminal transition
        with the same token after it applied (a lost reply) answers True and changes nothing.
        FAIL and EXPIRE place the job in the DLQ in the same atomic step; RETRY stores the
        error and makes the job eligible after ``delay``; RELEASE makes it eligible at once
        and gives back the attempt.
        """

    async def settle_and_claim(
        self, settles: Sequence[Settle], queues: Sequence[str], worker_id: str, limit: int
    ) -> SettledClaimed:
        """``settle(settles)``, then (when ``limit`` > 0) ``claim(queues, worker_id, limit)``,
        in one round trip where the backend can (``capabilities.settle_claims``).

        A claim that fails alone leaves the settle's answers standing (``claim_error``). When
        this raises, the settle did not apply, or may not have (its reply was lost), and the
        caller holds no job claimed here: the claim did not run, was rolled back with the
        settle, or its jobs were released again (best effort; a job whose release failed too
        is recovered as stalled, as after any lost claim reply). This default makes the two
        calls."""
        applied = await self.settle(settles)
        if limit <= 0 or not queues:
            return SettledClaimed(applied)
        try:
            return SettledClaimed(applied, await self.claim(queues, worker_id, limit))
        except Exception as e:
            return SettledClaimed(applied, claim_error=e)

    @abc.abstractmethod
    async def wait(self, queues: Sequence[str], timeout: float) -> None:
        """Return when work may have arrived in ``queues``, or after ``timeout`` seconds.

        Returns at once when a job of an unpaused queue is already waiting, so a wake-up sent
        between an empty claim and this call is never lost. May return early without work.
        Idle waits make at most about one request a second per queue.
        """

    # -- maintenance ------------------------------------------------------------------------

    @abc.abstractmethod
    async def recover_stalled(self, queue: str, threshold: float, max_stalled: int) -> Recovered:
        """Return stalled jobs of ``queue`` to ``waiting``.

        A job is stalled when it is active and the newer of ``heartbeat_at``/``claimed_at`` is
        older than ``threshold`` seconds. For each, one conditional step re-checks "still
        active, same token, still stale", then either fails it into the DLQ (when it has
        already been recovered ``max_stalled`` times) or counts a stall and re-enqueues it
        through the same priority/FIFO allocator as ``enqueue``. It never touches a job that
        is not active; one unreadable job does not stop the pass.
        """

    @abc.abstractmethod
    async def lock(self, name: str, owner: str, ttl: float) -> bool:
        """Take or renew a lease named ``name`` for ``owner`` for ``ttl`` seconds.

        True when ``owner`` holds it afterwards. Shared by every process of the backend.
        """

    @abc.abstractmethod
    async def unlock(self, name: str, owner: str) -> None:
        """Give up a lease if ``owner`` holds it."""

    # -- admin and observation --------------------------------------------------------------

    @abc.abstractmethod
    async def get_job(self, queue: str, job_id: str) -> Job | None:
        """The job's current record, or None. Raises ``CorruptRecordError`` for unreadable ones."""

    @abc.abstractmethod
    async def get_jobs(self, queue: str, ids: Sequence[str]) -> list[Job | None]:
        """The current records of ``ids``, in the order given, None for each absent one; one
        round trip for the batch. Raises ``CorruptRecordError`` when one is unreadable."""

    @abc.abstractmethod
    async def list_jobs(
        self, queue: str, state: JobState, offset: int = 0, limit: int = 100
    ) -> list[Job]:
        """A page of jobs in ``state``: waiting in claim order, delayed by run time, others
        oldest first. Costs a page, not the queue. An unreadable record is listed with what
        could be read and the damage described in ``extra["corrupt"]``."""

    @abc.abstractmethod
    async def counts(self, queue: str) -> dict[JobState, int]:
        """Jobs per state, every state present. O(1) per state: never a scan of the queue."""

    @abc.abstractmethod
    async def cancel(self, queue: str, job_id: str) -> CancelResult:
        """Cancel a waiting, delayed or active job at once (terminal ``cancelled``).

        An active job's claim is lost from then on: the worker's heartbeat reports
        ``cancel_requested`` and its later writes are rejected. A terminal job is unchanged.
        """

    @abc.abstractmethod
    async def retry_job(self, queue: str, job_id: str) -> bool:
        """Operator retry: move a failed, expired or cancelled job back to ``waiting`` with its
        attempts and stalls reset, through the FIFO allocator, with ``created_at = now`` so its
        TTL counts from the replay. False when the job is not in such a state."""

    @abc.abstractmethod
    async def remove_job(self, queue: str, job_id: str) -> bool:
        """Delete a job in any state; an active job's claim is lost. False when absent."""

    @abc.abstractmethod
    async def cancel_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        """``cancel`` for a batch of distinct ids, in one round trip: per id, True when the
        job is now cancelled (it was waiting, delayed or active); False when it had ended or
        is absent."""

    @abc.abstractmethod
    async def retry_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        """``retry_job`` for a batch of distinct ids, in one round trip: per id, True when
        the job is waiting again, as ``retry_job`` leaves it (``created_at = now``); the
        retried jobs join the back of the line in the order given."""

    @abc.abstractmethod
    async def remove_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        """``remove_job`` for a batch of distinct ids, in one round trip: per id, True when
        it was deleted."""

    @abc.abstractmethod
    async def pause(self, queue: str) -> None:
        """Stop claims from ``queue`` in every process until ``resume``."""

    @abc.abstractmethod
    async def resume(self, queue: str) -> None:
        """Undo ``pause`` and wake waiting workers."""

    @abc.abstractmethod
    async def is_paused(self, queue: str) -> bool:
        """Whether ``queue`` is paused."""

    @abc.abstractmethod
    async def drain(self, queue: str) -> int:
        """Delete every blocked, waiting and delayed job of ``queue`` (none of it has started);
        the number deleted."""

    @abc.abstractmethod
    async def clean(self, queue: str, state: JobState, older_than: float) -> int:
        """Delete jobs in terminal ``state`` that finished more than ``older_than`` seconds ago."""

    @abc.abstractmethod
    async def obliterate(self, queue: str) -> None:
        """Delete the queue: every job in every state, its pause flag and its counters."""

    @abc.abstractmethod
    async def prune_keys(self, queue: str, older_than: float) -> int:
        """Forget ``queue``'s throttle and debounce keys that hold nothing any more: the window
        ended more than ``older_than`` seconds ago and the job that took the key is no longer
        waiting, delayed or active. Returns how many. The elected maintenance calls it, so keys
        of a queue do not pile up; ``older_than`` leaves a keyed enqueue in flight its key."""

    @abc.abstractmethod
    async def set_limits(self, queue: str, limits: Limits | None) -> None:
        """Store ``queue``'s limits, for every process's next claim; None (or empty limits)
        removes them. The count of the current rate window is kept. ``obliterate`` forgets
        them with the queue."""

    @abc.abstractmethod
    async def list_limits(self) -> dict[str, Limits]:
        """Every queue's stored limits, by queue."""

    @abc.abstractmethod
    async def list_queues(self) -> list[str]:
        """Names of the queues that hold jobs or are paused, sorted."""

    @abc.abstractmethod
    async def register_worker(self, info: WorkerInfo, ttl: float) -> None:
        """Record (or renew) a worker; it is listed until ``ttl`` seconds pass without renewal."""

    @abc.abstractmethod
    async def unregister_worker(self, worker_id: str) -> None:
        """Remove a worker from the registry."""

    @abc.abstractmethod
    async def list_workers(self) -> list[WorkerInfo]:
        """Workers whose registration has not lapsed."""

    # -- history ----------------------------------------------------------------------------

    @abc.abstractmethod
    async def add_tallies(self, tallies: Sequence[Tally]) -> None:
        """Add ``tallies`` to the stored counters of their (queue, minute), atomically and in
        one round trip where the backend allows: many workers add at once, none is lost."""

    @abc.abstractmethod
    async def tallies(self, queue: str, since: int) -> list[Tally]:
        """The stored minutes of ``queue`` from minute ``since`` on, oldest first (only
        minutes with a count)."""

    @abc.abstractmethod
    async def prune_tallies(self, before: int) -> None:
        """Forget every queue's minutes before ``before`` (a backend may keep up to a day
        more, when it stores a day as one record); ``obliterate`` forgets a queue's."""

    # -- schedules --------------------------------------------------------------------------

    @abc.abstractmethod
    async def save_schedule(self, schedule: StoredSchedule) -> bool:
        """Create or update a schedule, atomically. When one with the same id and the same
        ``spec`` is stored, it is kept as it is (its ``next_ms`` and ``paused`` win); a changed
        ``spec`` replaces the stored one and its ``next_ms`` but keeps ``paused``. True when
        something was written."""

    @abc.abstractmethod
    async def list_schedules(self) -> list[StoredSchedule]:
        """Every stored schedule, by id."""

    @abc.abstractmethod
    async def remove_schedule(self, schedule_id: str) -> bool:
        """Delete a schedule; False when absent."""

    @abc.abstractmethod
    async def pause_schedule(
        self, schedule_id: str, paused: bool, next_ms: int | None = None
    ) -> bool:
        """Set a schedule's ``paused`` flag, and its ``next_ms`` unless None; False when
        absent."""

    @abc.abstractmethod
    async def advance_schedule(self, schedule_id: str, expected_ms: int, next_ms: int) -> bool:
        """Move a schedule's ``next_ms`` from ``expected_ms`` to ``next_ms``, only while it is
        still ``expected_ms`` (compare and set): True when this call moved it."""

    # -- events -----------------------------------------------------------------------------

    @abc.abstractmethod
    async def publish(self, events: Sequence[bytes]) -> None:
        """Deliver encoded events to every current subscriber, in every process."""

    @abc.abstractmethod
    async def subscribe(self) -> AsyncGenerator[bytes, None]:
        """Start a subscription; iterate it for encoded events published from then on.

        The subscription is live when this returns, so no event published afterwards is
        missed; order is kept per publisher. Closing the iterator (``aclose``) ends it.
        """


class DeliveryStore(abc.ABC):
    """What a backend adds to serve as the metadata store of a message broker (RabbitMQ).

    The broker delivers messages that name a job and the token it was published for; the
    store decides, atomically, whether a delivery may start the job. Everything else (settle,
    heartbeat, recovery, admin) is the ordinary contract.
    """

    @abc.abstractmethod
    async def claim_delivered(
        self, queue: str, deliveries: Sequence[tuple[str, int]], worker_id: str
    ) -> tuple[ClaimBatch, list[str]]:
        """Claim each delivered ``(job_id, token)`` only while that job is ``waiting`` with
        exactly that token and ``queue`` is not paused; a claim is the ordinary one (token + 1,
        attempts + 1, claimed_at = now).

        Returns the claimed jobs, and the ids of stale deliveries: the job is gone, no longer
        waiting, or has another token. Deliveries in neither list (a paused queue, or beyond
        the queue's limits, which ``claim`` describes; then ``limited`` names it) are for the
        caller to keep and offer again.
        """

    @abc.abstractmethod
    async def promote_due(self, queue: str, limit: int) -> list[Job]:
        """Move up to ``limit`` due delayed jobs of ``queue`` to ``waiting`` (through the FIFO
        allocator) and return them, so the caller can publish their deliveries."""
