"""InMemoryBackend: the reference implementation of the contract, process-local and not durable.

Every other backend must behave like this one; when the contract suite and this file disagree
with another backend, the other backend is wrong. Each queue keeps its rows in a dict, an index
per state (insertion-ordered dicts), a heap of waiting jobs keyed by (priority, seq) and a heap
of delayed jobs keyed by run time. Heaps are cleaned lazily: an entry counts only while its row
still has the state and sequence it was pushed with.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field

from relaymq.backends.base import (
    OUTCOME_STATE,
    Backend,
    Beat,
    BeatResult,
    CancelResult,
    Capabilities,
    ClaimBatch,
    Clock,
    DeliveryStore,
    Enqueued,
    Outcome,
    Recovered,
    Settle,
    WorkerInfo,
)
from relaymq.backends.fanout import Fanout
from relaymq.job import TERMINAL, Job, JobState, NewJob


@dataclass(slots=True)
class _Row:
    """The mutable twin of ``Job``: same field names, so ``to_job`` is a plain copy."""

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
    result: bytes | None = None
    error: str | None = None
    finished_at: float | None = None

    def to_job(self) -> Job:
        return Job(
            self.queue, self.id, self.task, self.payload, self.state, self.priority, self.seq,
            self.created_at, self.run_at, self.ttl, self.max_attempts, self.timeout,
            self.attempts, self.token, self.claimed_at, self.heartbeat_at, self.worker_id,
            self.stalls, self.cancel_requested, self.progress, self.result, self.error,
            self.finished_at,
        )  # fmt: skip


@dataclass
class _Queue:
    rows: dict[str, _Row] = field(default_factory=dict)
    by_state: dict[JobState, dict[str, None]] = field(
        default_factory=lambda: {s: {} for s in JobState}
    )
    waiting: list[tuple[int, int, str]] = field(default_factory=list)
    delayed: list[tuple[float, int, str]] = field(default_factory=list)
    paused: bool = False
    seq: itertools.count[int] = field(default_factory=lambda: itertools.count(1))


class InMemoryBackend(Backend, DeliveryStore):
    """Process-local reference backend (``memory://``)."""

    capabilities = Capabilities(
        durable=False, cross_process=False, server_clock=True, blocking_wait=True,
        delivery_store=True,
    )  # fmt: skip

    def __init__(self, url: str = "memory://", *, clock: Clock | None = None) -> None:
        self.url = url
        self._now = clock or time.time
        self._queues: dict[str, _Queue] = {}
        self._locks: dict[str, tuple[str, float]] = {}
        self._workers: dict[str, tuple[WorkerInfo, float]] = {}
        self._fanout = Fanout()
        self._wakeup = asyncio.Event()

    # -- internal ---------------------------------------------------------------------------

    def _queue(self, name: str) -> _Queue:
        q = self._queues.get(name)
        if q is None:
            q = self._queues[name] = _Queue()
        return q

    def _move(self, q: _Queue, row: _Row, state: JobState) -> None:
        del q.by_state[row.state][row.id]
        row.state = state
        q.by_state[state][row.id] = None

    def _make_waiting(self, q: _Queue, row: _Row, *, new_seq: bool = True) -> None:
        """The FIFO allocator: every way into ``waiting`` passes here."""
        if new_seq:
            row.seq = next(q.seq)
        row.run_at = None
        self._move(q, row, JobState.WAITING)
        heapq.heappush(q.waiting, (row.priority, row.seq, row.id))

    def _make_delayed(self, q: _Queue, row: _Row, run_at: float) -> None:
        row.run_at = run_at
        self._move(q, row, JobState.DELAYED)
        heapq.heappush(q.delayed, (run_at, row.seq, row.id))

    def _finish(self, q: _Queue, row: _Row, state: JobState, now: float) -> None:
        row.finished_at = now
        row.worker_id = None
        self._move(q, row, state)

    def _promote(self, q: _Queue, now: float) -> None:
        while q.delayed and q.delayed[0][0] <= now:
            run_at, _, job_id = heapq.heappop(q.delayed)
            row = q.rows.get(job_id)
            if row is not None and row.state is JobState.DELAYED and row.run_at == run_at:
                self._make_waiting(q, row)

    def _notify(self) -> None:
        self._wakeup.set()
        self._wakeup = asyncio.Event()

    def _held(self, claim_queue: str, job_id: str, token: int) -> tuple[_Queue, _Row] | None:
        q = self._queues.get(claim_queue)
        row = q.rows.get(job_id) if q else None
        if q is None or row is None or row.state is not JobState.ACTIVE or row.token != token:
            return None
        return q, row

    # -- producer ---------------------------------------------------------------------------

    async def enqueue(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        now = self._now()
        out: list[Enqueued] = []
        for new in jobs:
            q = self._queue(new.queue)
            if new.id in q.rows:
                out.append(Enqueued(new.id, duplicate=True))
                continue
            row = _Row(
                queue=new.queue,
                id=new.id,
                task=new.task,
                payload=new.payload,
                state=JobState.WAITING,
                priority=new.priority,
                created_at=now,
                ttl=new.ttl,
                max_attempts=new.max_attempts,
                timeout=new.timeout,
            )
            q.rows[row.id] = row
            q.by_state[JobState.WAITING][row.id] = None
            row.seq = next(q.seq)
            if new.delay > 0:
                self._make_delayed(q, row, now + new.delay)
            else:
                heapq.heappush(q.waiting, (row.priority, row.seq, row.id))
            out.append(Enqueued(new.id))
        self._notify()
        return out

    # -- worker -----------------------------------------------------------------------------

    async def claim(self, queues: Sequence[str], worker_id: str, limit: int) -> ClaimBatch:
        now = self._now()
        claimed: list[Job] = []
        for name in queues:
            q = self._queues.get(name)
            if q is None or q.paused:
                continue
            self._promote(q, now)
            while q.waiting and len(claimed) < limit:
                _, seq, job_id = heapq.heappop(q.waiting)
                row = q.rows.get(job_id)
                if row is None or row.state is not JobState.WAITING or row.seq != seq:
                    continue
                claimed.append(self._activate(q, row, worker_id, now))
        return ClaimBatch(claimed, now)

    def _activate(self, q: _Queue, row: _Row, worker_id: str, now: float) -> Job:
        """The one way into ``active``: a new token, a counted attempt."""
        self._move(q, row, JobState.ACTIVE)
        row.token += 1
        row.attempts += 1
        row.claimed_at = row.heartbeat_at = now
        row.worker_id = worker_id
        return row.to_job()

    async def heartbeat(self, beats: Sequence[Beat]) -> list[BeatResult]:
        now = self._now()
        out: list[BeatResult] = []
        for beat in beats:
            c = beat.claim
            held = self._held(c.queue, c.job_id, c.token)
            if held is None:
                q = self._queues.get(c.queue)
                row = q.rows.get(c.job_id) if q else None
                cancelled = row is not None and row.token == c.token and row.cancel_requested
                out.append(BeatResult(held=False, cancel_requested=cancelled))
                continue
            row = held[1]
            row.heartbeat_at = now
            if beat.progress is not None:
                row.progress = beat.progress
            out.append(BeatResult(held=True))
        return out

    async def settle(self, settles: Sequence[Settle]) -> list[bool]:
        now = self._now()
        out: list[bool] = []
        wake = False
        for s in settles:
            c = s.claim
            held = self._held(c.queue, c.job_id, c.token)
            if held is None:
                out.append(self._is_repeat(s))
                continue
            q, row = held
            if s.outcome is Outcome.COMPLETE:
                row.result = s.result
                self._finish(q, row, JobState.COMPLETED, now)
            elif s.outcome in (Outcome.FAIL, Outcome.EXPIRE, Outcome.CANCEL):
                row.error = s.error
                self._finish(q, row, OUTCOME_STATE[s.outcome], now)
            elif s.outcome is Outcome.RETRY:
                row.error = s.error
                row.worker_id = None
                if s.delay > 0:
                    self._make_delayed(q, row, now + s.delay)
                else:
                    self._make_waiting(q, row)
                wake = True
            else:  # RELEASE: back to the front of its priority, the attempt given back
                row.attempts -= 1
                row.worker_id = None
                self._make_waiting(q, row, new_seq=False)
                wake = True
            out.append(True)
        if wake:
            self._notify()
        return out

    def _is_repeat(self, s: Settle) -> bool:
        """A terminal transition already applied with this token (its reply was lost)."""
        target = OUTCOME_STATE[s.outcome]
        q = self._queues.get(s.claim.queue)
        row = q.rows.get(s.claim.job_id) if q else None
        return (
            row is not None
            and target in TERMINAL
            and row.state is target
            and row.token == s.claim.token
        )

    async def wait(self, queues: Sequence[str], timeout: float) -> None:
        now = self._now()
        for name in queues:
            q = self._queues.get(name)
            if q is None or q.paused:
                continue
            if q.by_state[JobState.WAITING]:
                return
            if q.delayed:
                timeout = min(timeout, max(0.0, q.delayed[0][0] - now))
        if timeout <= 0:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can eat a cancel
                await self._wakeup.wait()

    # -- maintenance ------------------------------------------------------------------------

    async def recover_stalled(self, queue: str, threshold: float, max_stalled: int) -> Recovered:
        q = self._queues.get(queue)
        result = Recovered()
        if q is None:
            return result
        now = self._now()
        for job_id in list(q.by_state[JobState.ACTIVE]):
            row = q.rows[job_id]
            last = max(row.heartbeat_at or 0.0, row.claimed_at or 0.0)
            if last >= now - threshold:
                continue
            if row.stalls >= max_stalled:
                row.error = f"stalled {row.stalls + 1} times (max_stalled={max_stalled})"
                self._finish(q, row, JobState.FAILED, now)
                result.failed.append(job_id)
            else:
                row.stalls += 1
                row.worker_id = None
                self._make_waiting(q, row)
                result.requeued.append(job_id)
        if result.requeued:
            self._notify()
        return result

    async def lock(self, name: str, owner: str, ttl: float) -> bool:
        now = self._now()
        held = self._locks.get(name)
        if held is not None and held[0] != owner and held[1] > now:
            return False
        self._locks[name] = (owner, now + ttl)
        return True

    async def unlock(self, name: str, owner: str) -> None:
        held = self._locks.get(name)
        if held is not None and held[0] == owner:
            del self._locks[name]

    # -- admin and observation --------------------------------------------------------------

    async def get_job(self, queue: str, job_id: str) -> Job | None:
        q = self._queues.get(queue)
        row = q.rows.get(job_id) if q else None
        return row.to_job() if row else None

    async def list_jobs(
        self, queue: str, state: JobState, offset: int = 0, limit: int = 100
    ) -> list[Job]:
        q = self._queues.get(queue)
        if q is None:
            return []
        if state is JobState.WAITING:
            live = [e for e in q.waiting if self._live_waiting(q, e)]
            page = heapq.nsmallest(offset + limit, live)[offset:]
            return [q.rows[job_id].to_job() for _, _, job_id in page]
        if state is JobState.DELAYED:
            rows = sorted(
                (q.rows[i] for i in q.by_state[state]), key=lambda r: (r.run_at or 0, r.seq)
            )
            return [r.to_job() for r in rows[offset : offset + limit]]
        ids = itertools.islice(q.by_state[state], offset, offset + limit)
        return [q.rows[i].to_job() for i in ids]

    @staticmethod
    def _live_waiting(q: _Queue, entry: tuple[int, int, str]) -> bool:
        row = q.rows.get(entry[2])
        return row is not None and row.state is JobState.WAITING and row.seq == entry[1]

    async def counts(self, queue: str) -> dict[JobState, int]:
        q = self._queues.get(queue)
        return {s: len(q.by_state[s]) if q else 0 for s in JobState}

    async def cancel(self, queue: str, job_id: str) -> CancelResult:
        q = self._queues.get(queue)
        row = q.rows.get(job_id) if q else None
        if q is None or row is None:
            return CancelResult.NOT_FOUND
        if row.state in TERMINAL:
            return CancelResult.ALREADY_TERMINAL
        row.cancel_requested = row.state is JobState.ACTIVE
        row.error = "cancelled by request"
        self._finish(q, row, JobState.CANCELLED, self._now())
        return CancelResult.CANCELLED

    async def retry_job(self, queue: str, job_id: str) -> bool:
        q = self._queues.get(queue)
        row = q.rows.get(job_id) if q else None
        if q is None or row is None or row.state not in TERMINAL - {JobState.COMPLETED}:
            return False
        row.attempts = 0
        row.stalls = 0
        row.cancel_requested = False
        row.finished_at = None
        self._make_waiting(q, row)
        self._notify()
        return True

    async def remove_job(self, queue: str, job_id: str) -> bool:
        q = self._queues.get(queue)
        row = q.rows.pop(job_id, None) if q else None
        if q is None or row is None:
            return False
        del q.by_state[row.state][job_id]
        return True

    async def pause(self, queue: str) -> None:
        self._queue(queue).paused = True

    async def resume(self, queue: str) -> None:
        self._queue(queue).paused = False
        self._notify()

    async def is_paused(self, queue: str) -> bool:
        q = self._queues.get(queue)
        return q is not None and q.paused

    async def drain(self, queue: str) -> int:
        q = self._queues.get(queue)
        if q is None:
            return 0
        ids = [*q.by_state[JobState.WAITING], *q.by_state[JobState.DELAYED]]
        for job_id in ids:
            await self.remove_job(queue, job_id)
        return len(ids)

    async def clean(self, queue: str, state: JobState, older_than: float) -> int:
        q = self._queues.get(queue)
        if q is None or state not in TERMINAL:
            return 0
        cutoff = self._now() - older_than
        ids = [i for i in q.by_state[state] if (q.rows[i].finished_at or 0) < cutoff]
        for job_id in ids:
            await self.remove_job(queue, job_id)
        return len(ids)

    async def obliterate(self, queue: str) -> None:
        self._queues.pop(queue, None)

    async def list_queues(self) -> list[str]:
        return sorted(n for n, q in self._queues.items() if q.rows or q.paused)

    async def register_worker(self, info: WorkerInfo, ttl: float) -> None:
        now = self._now()
        self._workers[info.id] = (_with_seen(info, now), now + ttl)

    async def unregister_worker(self, worker_id: str) -> None:
        self._workers.pop(worker_id, None)

    async def list_workers(self) -> list[WorkerInfo]:
        now = self._now()
        return [info for info, until in self._workers.values() if until > now]

    # -- delivery store ---------------------------------------------------------------------

    async def claim_delivered(
        self, queue: str, deliveries: Sequence[tuple[str, int]], worker_id: str
    ) -> tuple[ClaimBatch, list[str]]:
        now = self._now()
        q = self._queues.get(queue)
        if q is not None and q.paused:
            return ClaimBatch([], now), []
        claimed: list[Job] = []
        stale: list[str] = []
        for job_id, token in deliveries:
            row = q.rows.get(job_id) if q else None
            if q is None or row is None or row.state is not JobState.WAITING or row.token != token:
                stale.append(job_id)
            else:
                claimed.append(self._activate(q, row, worker_id, now))
        return ClaimBatch(claimed, now), stale

    async def promote_due(self, queue: str, limit: int) -> list[Job]:
        q = self._queues.get(queue)
        if q is None:
            return []
        now = self._now()
        promoted: list[Job] = []
        while q.delayed and q.delayed[0][0] <= now and len(promoted) < limit:
            run_at, _, job_id = heapq.heappop(q.delayed)
            row = q.rows.get(job_id)
            if row is not None and row.state is JobState.DELAYED and row.run_at == run_at:
                self._make_waiting(q, row)
                promoted.append(row.to_job())
        return promoted

    # -- events -----------------------------------------------------------------------------

    async def publish(self, events: Sequence[bytes]) -> None:
        self._fanout.deliver(events)

    async def subscribe(self) -> AsyncGenerator[bytes, None]:
        return self._fanout.subscribe()


def _with_seen(info: WorkerInfo, now: float) -> WorkerInfo:
    return WorkerInfo(
        info.id, info.queues, info.concurrency, info.host, info.pid, info.started_at, now
    )
