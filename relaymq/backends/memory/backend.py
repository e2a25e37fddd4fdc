"""InMemoryBackend: the reference implementation of the contract, process-local, not durable.

Every other backend must behave like this one; when the contract suite and this file disagree
with another backend, the other backend is wrong. Each queue is a ``QueueState`` (state.py):
its jobs, an index per state, the waiting heap (priority, sequence) and the delayed heap (run
time), with the FIFO allocator through which every job enters ``waiting``. Methods follow
base.py's order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Sequence

from relaymq.backends.base import Backend, DeliveryStore
from relaymq.backends.fanout import Fanout
from relaymq.backends.memory.state import QueueState, Row
from relaymq.backends.meta import by_key
from relaymq.backends.wakeup import Wakeup
from relaymq.job import (
    PENDING,
    TERMINAL,
    Claim,
    Job,
    JobState,
    NewJob,
)
from relaymq.policy import DependentStep, KeyStep, dependencies_at_enqueue, key_step
from relaymq.records.limits import Limits
from relaymq.records.meta import MetaRecord
from relaymq.records.search import JobFilter
from relaymq.records.store import (
    OUTCOME_STATE,
    Beat,
    BeatResult,
    Capabilities,
    ClaimBatch,
    Clock,
    Enqueued,
    Outcome,
    Recovered,
    Settle,
    Tally,
    add_tally,
    ended_attempt,
    merge_tallies,
    with_attempt,
)

CLEAN_BATCH = 1000
"""Jobs ``clean`` deletes before it lets other tasks run."""
_DLQ_OR_CANCEL = (Outcome.FAIL, Outcome.EXPIRE, Outcome.CANCEL)


class InMemoryBackend(Backend, DeliveryStore):
    """Process-local reference backend (``memory://``)."""

    capabilities = Capabilities(
        durable=False,
        cross_process=False,
        server_clock=True,
        blocking_wait=True,
        delivery_store=True,
        settle_claims=True,  # the worker claims with its settles
        sequences=True,
        search="native",
    )

    def __init__(self, url: str = "memory://", *, clock: Clock | None = None) -> None:
        self.url = url
        self._now = clock or time.time
        self._queues: dict[str, QueueState] = {}
        self._tallies: dict[str, dict[tuple[int, str], Tally]] = {}
        """Per queue: the tally of each (minute, task)."""
        self._meta: dict[str, MetaRecord] = {}
        self._fanout = Fanout()
        self._wakeup = Wakeup()

    def heartbeat_handle(self) -> None:
        """None: this state lives in one event loop's memory, not behind a connection."""
        return None

    def _queue(self, name: str) -> QueueState:
        q = self._queues.get(name)
        if q is None:
            q = self._queues[name] = QueueState(self._now, lambda at: self._failed(name, at))
        return q

    def _failed(self, queue: str, at: float) -> None:
        """A job failed by its dependency, at ``at``: counted in the history in the same step
        (a worker counts only the outcomes it writes)."""
        self._add_tally(Tally(queue, int(at // 60), failed=1))

    def _add_tally(self, t: Tally) -> None:
        minutes = self._tallies.setdefault(t.queue, {})
        old = minutes.get((t.minute, t.task))
        minutes[(t.minute, t.task)] = t if old is None else add_tally(old, t)

    def _find(self, queue: str, job_id: str) -> tuple[QueueState | None, Row | None]:
        q = self._queues.get(queue)
        return q, (q.jobs.get(job_id) if q is not None else None)

    def _held(self, claim: Claim) -> tuple[QueueState, Row] | None:
        """The queue and job when ``claim`` still holds the job (active, same token)."""
        q, job = self._find(claim.queue, claim.job_id)
        if q is None or job is None or job.state is not JobState.ACTIVE or job.token != claim.token:
            return None
        return q, job

    # -- producer ---------------------------------------------------------------------------

    async def enqueue(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        now = self._now()
        out: list[Enqueued] = []
        for new in jobs:
            q = self._queue(new.queue)
            if new.id in q.jobs:
                out.append(Enqueued(new.id, duplicate=True))
                continue
            replaced = None
            if new.rule is not None:
                held = q.keys.get(new.rule.key)
                holder = q.jobs.get(held[0]) if held is not None else None
                step = key_step(
                    new.rule.mode,
                    None if holder is None else holder.state,
                    held is not None and held[1] > now,
                )
                if step is KeyStep.DUPLICATE:
                    assert held is not None
                    out.append(Enqueued(held[0], duplicate=True))
                    continue
                if step is KeyStep.REPLACE:
                    assert holder is not None
                    q.remove(holder.id)
                    replaced = holder.id
                q.keys[new.rule.key] = (new.id, now + new.rule.window)
            row = Row(
                new.queue,
                new.id,
                new.task,
                new.payload,
                JobState.WAITING,
                priority=new.priority,
                created_at=now,
                ttl=new.ttl,
                max_attempts=new.max_attempts,
                timeout=new.timeout,
                traceparent=new.traceparent,
                depends_on=new.depends_on,
                on_dependency_failure=new.on_dependency_failure,
                limit_key=new.limit_key,
                sequence=new.sequence,
                sequence_on_failure=new.sequence_on_failure,
            )
            if new.depends_on:
                self._add_dependent(q, row, now)
            else:
                q.add(row, now + new.delay if new.delay > 0 else None)
            out.append(Enqueued(new.id, replaced=replaced))
        self._wakeup.notify()
        return out

    @staticmethod
    def _add_dependent(q: QueueState, row: Row, now: float) -> None:
        """Store a job with dependencies as ``relaymq.policy.dependencies_at_enqueue`` says:
        blocked, failed at once, or waiting."""
        states = {i: q.jobs[i].state for i in row.depends_on if i in q.jobs}
        start = dependencies_at_enqueue(row.depends_on, states, row.on_dependency_failure)
        if start.step is DependentStep.BLOCKED:
            q.block(row, list(start.waits_for))
            return
        q.add(row, None)
        if start.step is DependentStep.FAILED:
            row.error = start.error
            q.finish(row, JobState.FAILED, now)

    # -- worker -----------------------------------------------------------------------------

    async def claim(self, queues: Sequence[str], worker_id: str, limit: int) -> ClaimBatch:
        now = self._now()
        claimed: list[Job] = []
        limited: dict[str, float | None] = {}
        for name in queues:
            q = self._queues.get(name)
            if q is None or q.paused:
                continue
            q.promote_due(now)
            want = limit - len(claimed)
            a = q.allowance(now, want)
            take = want if a is None else a.take
            budget = q.key_budget(now)
            taken = 0
            while taken < take:
                job = q.pop_within(budget)
                if job is None:
                    if budget is not None and budget.next_round():
                        continue  # every key with waiting jobs had its turn: a new round
                    break
                claimed.append(q.activate(job, worker_id, now).freeze())
                taken += 1
            if a is not None:
                q.started(a, taken)
                if taken == take < want:
                    limited[name] = a.retry_in
            if budget is not None:
                q.count_keys(budget)
                if taken < take and budget.held_back:  # keys held the rest back
                    limited[name] = budget.retry_in(now)
            if taken < take and name not in limited and q.sequence_waiting():
                limited[name] = None  # sequences held the rest back, until jobs end
        return ClaimBatch(claimed, now, limited)

    async def heartbeat(self, beats: Sequence[Beat]) -> list[BeatResult]:
        now = self._now()
        out: list[BeatResult] = []
        for beat in beats:
            held = self._held(beat.claim)
            if held is None:
                _, job = self._find(beat.claim.queue, beat.claim.job_id)
                cancelled = (
                    job is not None and job.token == beat.claim.token and job.cancel_requested
                )
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
            held = self._held(s.claim)
            if held is None:
                out.append(self._is_repeat(s))
                continue
            q, row = held
            if s.keep > 0:
                attempt = ended_attempt(row, s, now)
                row.attempt_history = with_attempt(row.attempt_history, attempt, s.keep)
            if s.outcome is Outcome.COMPLETE:
                row.result = s.result
                q.finish(row, JobState.COMPLETED, now)
            elif s.outcome in _DLQ_OR_CANCEL:
                row.error = s.error
                q.finish(row, OUTCOME_STATE[s.outcome], now)
            elif s.outcome is Outcome.RETRY:
                row.error = s.error
                if s.delay > 0:
                    q.make_delayed(row, now + s.delay)
                else:
                    q.make_waiting(row)
                wake = True
            else:  # RELEASE: back to the front of its priority, the attempt given back
                row.attempts -= 1
                q.make_waiting(row, keep_seq=True)
                wake = True
            out.append(True)
        if wake:
            self._wakeup.notify()
        return out

    def _is_repeat(self, s: Settle) -> bool:
        """A terminal transition already applied with this token (its reply was lost)."""
        target = OUTCOME_STATE[s.outcome]
        _, job = self._find(s.claim.queue, s.claim.job_id)
        return (
            job is not None
            and target in TERMINAL
            and job.state is target
            and job.token == s.claim.token
        )

    async def wait(self, queues: Sequence[str], timeout: float) -> None:
        ticket = self._wakeup.ticket()
        now = self._now()
        for name in queues:
            q = self._queues.get(name)
            if q is None or q.paused:
                continue
            if q.by_state[JobState.WAITING]:
                return
            due = q.next_due()
            if due is not None:
                timeout = min(timeout, max(0.0, due - now))
        await self._wakeup.wait(timeout, ticket)

    # -- maintenance ------------------------------------------------------------------------

    async def recover_stalled(self, queue: str, threshold: float, max_stalled: int) -> Recovered:
        q = self._queues.get(queue)
        result = Recovered()
        if q is None:
            return result
        now = self._now()
        for job_id in list(q.by_state[JobState.ACTIVE]):
            row = q.jobs[job_id]
            if max(row.heartbeat_at or 0.0, row.claimed_at or 0.0) >= now - threshold:
                continue
            if row.stalls >= max_stalled:
                row.error = f"stalled {row.stalls + 1} times (max_stalled={max_stalled})"
                q.finish(row, JobState.FAILED, now)
                result.failed.append(job_id)
            else:
                row.stalls += 1
                q.make_waiting(row)
                result.requeued.append(job_id)
        if result.requeued:
            self._wakeup.notify()
        return result

    # -- admin and observation --------------------------------------------------------------

    async def get_jobs(self, queue: str, ids: Sequence[str]) -> list[Job | None]:
        rows = [self._find(queue, i)[1] for i in ids]
        return [row.freeze() if row is not None else None for row in rows]

    async def list_jobs(
        self,
        queue: str,
        state: JobState,
        offset: int = 0,
        limit: int = 100,
        where: JobFilter | None = None,
    ) -> list[Job]:
        q = self._queues.get(queue)
        if q is None:
            return []
        if where is not None:  # the reference: every job of the state, in listing order
            every = await self.list_jobs(queue, state, 0, len(q.by_state[state]))
            return [j for j in every if where.matches(j)][offset : offset + limit]
        if state is JobState.WAITING:
            return q.waiting_page(offset, limit)
        if state is JobState.DELAYED:
            return q.delayed_page(offset, limit)
        return q.page(state, offset, limit)

    async def sequence_head(self, queue: str, sequence: str) -> Job | None:
        q = self._queues.get(queue)
        row = q.sequence_head(sequence) if q is not None else None
        return row.freeze() if row is not None else None

    async def counts(self, queue: str) -> dict[JobState, int]:
        q = self._queues.get(queue)
        return {s: len(q.by_state[s]) if q else 0 for s in JobState}

    async def cancel_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        return [self._cancel(queue, i) for i in ids]

    def _cancel(self, queue: str, job_id: str) -> bool:
        q, row = self._find(queue, job_id)
        if q is None or row is None or row.state in TERMINAL:
            return False
        row.cancel_requested = row.state is JobState.ACTIVE
        row.error = "cancelled by request"
        q.finish(row, JobState.CANCELLED, self._now())
        return True

    async def retry_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        return [self._retry(queue, i) for i in ids]

    def _retry(self, queue: str, job_id: str) -> bool:
        q, row = self._find(queue, job_id)
        if q is None or row is None or row.state not in TERMINAL - {JobState.COMPLETED}:
            return False
        row.attempts = row.stalls = 0
        row.cancel_requested = False
        row.finished_at = None
        row.created_at = self._now()  # a replay's TTL counts from the replay
        q.make_waiting(row)
        self._wakeup.notify()
        return True

    async def remove_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        q = self._queues.get(queue)
        return [q is not None and q.remove(i) is not None for i in ids]

    async def pause(self, queue: str) -> None:
        self._queue(queue).paused = True

    async def resume(self, queue: str) -> None:
        self._queue(queue).paused = False
        self._wakeup.notify()

    async def is_paused(self, queue: str) -> bool:
        q = self._queues.get(queue)
        return q is not None and q.paused

    async def drain(self, queue: str) -> int:
        q = self._queues.get(queue)
        if q is None:
            return 0
        ids = [
            *q.by_state[JobState.BLOCKED],
            *q.by_state[JobState.WAITING],
            *q.by_state[JobState.DELAYED],
        ]
        for job_id in ids:  # the jobs blocked on these go too: nothing to tell them
            q.remove(job_id, cascade=False)
        return len(ids)

    async def clean(self, queue: str, state: JobState, older_than: float) -> int:
        q = self._queues.get(queue)
        if q is None or state not in TERMINAL:
            return 0
        cutoff = self._now() - older_than
        ids = [i for i in q.by_state[state] if (q.jobs[i].finished_at or 0.0) < cutoff]
        removed = 0
        for n, job_id in enumerate(ids, 1):
            if job_id in q.by_state[state]:  # not retried meanwhile
                q.remove(job_id)
                removed += 1
            if n % CLEAN_BATCH == 0:
                await asyncio.sleep(0)  # claims take turns with a long purge
        return removed

    async def obliterate(self, queue: str) -> None:  # its keys go with its QueueState
        self._queues.pop(queue, None)
        self._tallies.pop(queue, None)

    async def prune_keys(self, queue: str, older_than: float) -> int:
        q = self._queues.get(queue)
        if q is None:
            return 0
        cutoff = self._now() - older_than
        gone = [
            k
            for k, (holder, until) in q.keys.items()
            if until < cutoff and not (holder in q.jobs and q.jobs[holder].state in PENDING)
        ]
        for k in gone:
            del q.keys[k]
        return len(gone)

    async def set_limits(self, queue: str, limits: Limits | None) -> None:
        self._queue(queue).limits = None if limits is None or limits.empty else limits

    async def list_limits(self) -> dict[str, Limits]:
        return {n: q.limits for n, q in sorted(self._queues.items()) if q.limits is not None}

    async def list_queues(self) -> list[str]:
        return sorted(n for n, q in self._queues.items() if q.jobs or q.paused)

    # -- history ----------------------------------------------------------------------------

    async def add_tallies(self, tallies: Sequence[Tally]) -> None:
        for t in merge_tallies(tallies):
            self._add_tally(t)

    async def tallies(self, queue: str, since: int) -> list[Tally]:
        minutes = self._tallies.get(queue, {})
        return [minutes[k] for k in sorted(minutes) if k[0] >= since]

    async def prune_tallies(self, before: int) -> None:
        for minutes in self._tallies.values():
            for k in [k for k in minutes if k[0] < before]:
                del minutes[k]

    # -- meta -------------------------------------------------------------------------------

    def _meta_live(self, key: str, now: float) -> MetaRecord | None:
        record = self._meta.get(key)
        if record is not None and record.expires is not None and record.expires <= now:
            return None
        return record

    def _meta_write(self, key: str, value: bytes, ttl: float | None, now: float) -> None:
        old = self._meta.get(key)
        expires = None if ttl is None else now + ttl
        self._meta[key] = MetaRecord(key, value, 1 if old is None else old.version + 1, expires)

    async def meta_get(self, key: str) -> MetaRecord | None:
        return self._meta_live(key, self._now())

    async def meta_put(self, key: str, value: bytes, ttl: float | None = None) -> None:
        self._meta_write(key, value, ttl, self._now())

    async def meta_swap(
        self, key: str, expected: int | None, value: bytes, ttl: float | None = None
    ) -> bool:
        now = self._now()
        live = self._meta_live(key, now)
        if (None if live is None else live.version) != expected:
            return False
        self._meta_write(key, value, ttl, now)
        return True

    async def meta_list(self, prefix: str) -> list[MetaRecord]:
        now = self._now()
        for key in [k for k in self._meta if k.startswith(prefix)]:
            if self._meta_live(key, now) is None:
                del self._meta[key]
        return by_key([r for k, r in self._meta.items() if k.startswith(prefix)])

    async def meta_delete(self, key: str) -> bool:
        live = self._meta_live(key, self._now())
        self._meta.pop(key, None)
        return live is not None

    # -- events -----------------------------------------------------------------------------

    async def publish(self, events: Sequence[bytes]) -> None:
        self._fanout.deliver(events)

    async def subscribe(self) -> AsyncGenerator[bytes, None]:
        return self._fanout.subscribe()

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
        a = q.allowance(now, len(deliveries)) if q is not None else None
        budget = q.key_budget(now) if q is not None else None
        take = len(deliveries) if a is None else a.take
        held_back: float | bool | None = False  # when held back: when to try again
        for job_id, token in deliveries:
            job = q.jobs.get(job_id) if q else None
            if q is None or job is None or job.state is not JobState.WAITING or job.token != token:
                stale.append(job_id)
            elif len(claimed) >= take:
                held_back = a.retry_in if a is not None else None  # kept by the caller
            elif budget is not None and not budget.take(job.limit_key):
                held_back = budget.retry_in(now)
            else:
                claimed.append(q.activate(job, worker_id, now).freeze())
        if q is not None and a is not None:
            q.started(a, len(claimed))
        if q is not None and budget is not None:
            q.count_keys(budget)
        limited = {} if held_back is False else {queue: held_back}
        return ClaimBatch(claimed, now, limited), stale

    async def promote_due(self, queue: str, limit: int) -> list[Job]:
        q = self._queues.get(queue)
        return q.promote_due(self._now(), limit) if q is not None else []
