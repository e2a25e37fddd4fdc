"""The backend contract: what every storage/broker adapter promises (the job store seam, and
``Backend``: the three seams together).

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
from collections.abc import Sequence
from typing import Any, Self

from relaymq.backends.meta import MetaStore
from relaymq.backends.notifier import Notifier
from relaymq.job import Job, JobState, NewJob
from relaymq.records import events
from relaymq.records.limits import Limits
from relaymq.records.search import JobFilter
from relaymq.records.store import (
    Beat,
    BeatResult,
    Capabilities,
    ClaimBatch,
    Enqueued,
    Recovered,
    Settle,
    SettledClaimed,
    Tally,
)


class JobStore(abc.ABC):
    """The job store seam: only the transitions that must be atomic with a job, batch forms
    only. Every backend implements each method, in this order."""

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

        A job with a ``sequence`` is taken only when ``relaymq.policy.sequence_head`` names it
        among every job of its (queue, sequence), in enqueue order, decided in the same atomic
        step against every process's claims: so a sequence never has two active jobs, and its
        jobs start in enqueue order. A job that is not its sequence's head is passed over (it
        keeps its place). Backends without ``Capabilities.sequences`` refuse such jobs at
        ``enqueue``.
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

    # -- admin and observation --------------------------------------------------------------

    @abc.abstractmethod
    async def get_jobs(self, queue: str, ids: Sequence[str]) -> list[Job | None]:
        """The current records of ``ids``, in the order given, None for each absent one; one
        round trip for the batch. Raises ``CorruptRecordError`` when one is unreadable."""

    @abc.abstractmethod
    async def list_jobs(
        self,
        queue: str,
        state: JobState,
        offset: int = 0,
        limit: int = 100,
        where: JobFilter | None = None,
    ) -> list[Job]:
        """A page of jobs in ``state``: waiting in claim order, delayed by run time, others
        oldest first. Costs a page, not the queue. An unreadable record is listed with what
        could be read and the damage described in ``extra["corrupt"]``.

        ``where``: only the jobs it matches (``JobFilter.matches``), counted by ``offset``
        and ``limit``, found by the backend's own query. A backend applies the conditions its
        ``capabilities.search`` names, and callers give it no others: "native" all of them,
        "scan" none (``where`` is None)."""

    async def sequence_head(self, queue: str, sequence: str) -> Job | None:
        """The job that ``sequence`` of ``queue`` waits on: its earliest job, in enqueue order,
        that holds its place (``relaymq.policy.holds_sequence``); None when no job does. One
        indexed read. Backends without ``Capabilities.sequences`` hold no sequence: None."""
        return None

    @abc.abstractmethod
    async def counts(self, queue: str) -> dict[JobState, int]:
        """Jobs per state, every state present. O(1) per state: never a scan of the queue."""

    @abc.abstractmethod
    async def cancel_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        """Cancel each of a batch of distinct ids at once (terminal ``cancelled``), in one
        round trip: per id, True when the job is now cancelled (it was waiting, delayed or
        active); False when it had ended (it is unchanged) or is absent.

        An active job's claim is lost from then on: the worker's heartbeat reports
        ``cancel_requested`` and its later writes are rejected."""

    @abc.abstractmethod
    async def retry_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        """Operator retry of a batch of distinct ids, in one round trip: each failed, expired
        or cancelled job goes back to ``waiting`` with its attempts and stalls reset, through
        the FIFO allocator (the retried jobs join the back of the line in the order given),
        with ``created_at = now`` so its TTL counts from the replay. Per id, True when the job
        is waiting again; False when it was not in such a state or is absent."""

    @abc.abstractmethod
    async def remove_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        """Delete each of a batch of distinct ids in any state (an active job's claim is
        lost), in one round trip: per id, True when it was deleted; False when absent."""

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
        """Delete jobs in terminal ``state`` that finished more than ``older_than`` seconds ago,
        with every trace of them (record, indexes, flow edges); the number deleted. Deletes in
        batches of at most a few thousand jobs per script call, statement or transaction, so
        claims never wait long behind it; jobs in any other state are never touched."""

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


class Backend(JobStore, Notifier, MetaStore):
    """Base class of every backend: the three seams (the job store, the notifier,
    ``relaymq.backends.notifier``, and the meta store, ``relaymq.backends.meta``: schedules,
    workers and leases live there), with the lifecycle they share. Backend modules keep the
    job store's methods first, in its order, then the meta store's and the notifier's."""

    capabilities: Capabilities
    url: str = ""
    create_missing: bool = True
    """Whether ``connect`` may create missing storage (a database file). Read-only tools set it
    to False so that a mistyped location is an error, not a new empty queue store."""
    retention: float | None = None
    """Seconds finished (terminal) jobs of a queue without a retention of its own are kept
    (0: for ever); None: ``relaymq.retention``'s defaults. The elected maintenance of each
    queue applies the policy through ``clean`` (never the backend itself)."""

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

    async def enqueue_announced(self, jobs: Sequence[NewJob], at: float) -> list[Enqueued]:
        """``enqueue``, and publish each job's event (``job:waiting``, ``job:delayed`` or
        ``job:deduplicated``, stamped ``at``) in one message once the jobs are stored.

        This default makes two calls; a backend that can store and publish in one round trip
        (one script, statement or transaction) overrides it, to the same effect."""
        answers = await self.enqueue(jobs)
        if jobs:
            await self.publish([events.encode(events.enqueued(jobs, answers, at))])
        return answers


class DeliveryStore(abc.ABC):
    """What a backend adds to serve as the metadata store of a message broker (RabbitMQ).

    The broker delivers messages that name a job and the token it was published for; the
    store decides, atomically, whether a delivery may start the job. Everything else (settle,
    heartbeat, recovery, admin) is the ordinary contract.
    """

    delivers_sequences = False
    """Whether ``claim_delivered`` keeps sequences: it starts a job of one only as its head
    and holds back the other live deliveries (kept by the caller; ``limited`` names the queue)."""

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
