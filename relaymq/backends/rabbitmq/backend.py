"""RabbitMQBackend: RabbitMQ delivers, a metadata store (another relaymq backend) decides.

Job state, the DLQ, pause flags, cancellation, leases, the worker registry and events live in
the store (``?store=<URL>``, Redis by default; SQLite, PostgreSQL or memory work too): every
transition is the store's one atomic operation. The broker only carries deliveries: a
persistent message ``(job id, token)`` in a durable priority queue per relaymq queue,
published with confirms whenever a job becomes ``waiting`` with that token.

- A delivery starts a job only through ``store.claim_delivered``, which claims it while the job
  is still waiting with exactly the delivery's token. Any other delivery (a broker redelivery
  after a reconnect, a duplicate from reconciliation, a job since finished, cancelled, removed or
  recovered) is acknowledged and dropped; ``stale_deliveries`` counts them.
- Metadata first, message second: a job is stored before its delivery is published. A
  delivery that could not be published (broker down) is kept and published again after the
  reconnect; a process that died in between is covered by reconciliation: the elected
  maintenance pass (``recover_stalled``) republishes the deliveries of jobs that have waited at
  the head of their queue for ``reconcile_after`` seconds while the broker had nothing ready.
- Delayed jobs and retries with a delay stay in the store (state ``delayed``) and reach the
  broker only when due: ``claim`` promotes due jobs through ``store.promote_due`` (at most every
  ``promote_interval`` per queue, earlier when this process knows a due time) and publishes them;
  ``wait`` returns when the earliest due time this process knows of arrives. They then queue
  behind the deliveries already on the broker at their priority (broker FIFO).
- Stalled recovery is the store's conditional pass; only the jobs it moved back to waiting get a
  replacement delivery, with the token they have now.

Sequences (with a store that ``delivers_sequences``: Redis, PostgreSQL): a delivery of a job
that is not its sequence's head is held back by ``claim_delivered`` like one of a key at its
cap: parked and offered again by the next claims, so it starts once the jobs before it end.

Ordering: the broker hands out higher broker priority first, FIFO within a priority (see
``topology`` for the mapping); each claim batch is returned in the store's (priority, seq) order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Coroutine, Sequence
from typing import Any, TypeVar

import aiormq

from relaymq.backends.base import Backend, DeliveryStore
from relaymq.backends.rabbitmq import config, topology
from relaymq.backends.rabbitmq.consumer import PARK_MAX, Inbox, Key, QueueDeliveries, ack
from relaymq.backends.rabbitmq.errors import guarded
from relaymq.backends.rabbitmq.publisher import Outgoing, Publisher
from relaymq.backends.rabbitmq.reconcile import Reconciler, waiting_jobs
from relaymq.backends.wakeup import Wakeup
from relaymq.errors import BackendError, ConfigError, RelayError
from relaymq.job import Claim, Job, JobState, NewJob
from relaymq.records.limits import Limits
from relaymq.records.meta import MetaRecord
from relaymq.records.search import JobFilter
from relaymq.records.store import (
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
    refuse_sequences,
)

T = TypeVar("T")


class RabbitMQBackend(Backend):
    """Broker delivery over a metadata store (``amqp://...?store=<backend URL>``)."""

    def __init__(self, url: str, *, store: Backend, clock: Clock | None = None) -> None:
        self.url = url
        self.options = config.parse(url)
        self._now = clock or time.time
        self.store = store
        """The metadata store; this backend connects and closes it (``from_url`` builds it)."""
        if not store.capabilities.delivery_store or not isinstance(store, DeliveryStore):
            raise ConfigError(
                f"{self.options.store!r} cannot hold a broker's job metadata "
                "(its backend does not implement DeliveryStore)"
            )
        self._delivery: DeliveryStore = store
        caps = store.capabilities
        self.capabilities = Capabilities(
            durable=caps.durable,
            cross_process=caps.cross_process,
            server_clock=caps.server_clock,
            blocking_wait=True,
            cluster_safe=caps.cluster_safe,
            transactions=caps.transactions,
            max_priority=self.options.max_priority,
            search=caps.search,  # its store's listing
            fair_claims=False,
            sequences=caps.sequences and store.delivers_sequences,
        )
        self.stale_deliveries = 0
        """Deliveries acknowledged and dropped because their token no longer matched."""
        o = self.options
        arguments = topology.queue_arguments(o.max_priority, o.queue_expires, o.queue_type)
        self._broker = Publisher(self.options, arguments)
        self._later = Reconciler(store, store, self._broker, self.options, self._now)
        self._inboxes: dict[int, Inbox] = {}
        """Per priority band (one channel and window each; classic queues: band 0 only)."""
        self._consumer_lock = asyncio.Lock()
        self._wakeup = Wakeup()
        self._background: set[asyncio.Future[Any]] = set()

    def heartbeat_handle(self) -> Backend | None:
        """The metadata store's: claims are held and renewed there, not on the broker."""
        return self.store.heartbeat_handle()

    @classmethod
    def inner_urls(cls, url: str) -> dict[str, str]:
        return {"store": config.parse(url).store}

    async def connect(self) -> None:
        await self.store.connect()
        await self._broker.open()

    async def check_queue(self, queue: str) -> None:
        """Declare ``queue``'s broker queue again: one declared with other arguments is the
        ``ConfigError`` that ``enqueue`` raises."""
        await self._broker.ready_count(queue)

    async def close(self) -> None:
        if self._background:  # transitions whose caller was cancelled: let them publish
            await asyncio.wait(list(self._background), timeout=10)
        for inbox in self._inboxes.values():
            await inbox.close()
        self._inboxes.clear()
        await self._broker.close()
        await self.store.close()

    # -- producer ---------------------------------------------------------------------------

    async def enqueue(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        return await self._shielded(self._enqueue(jobs))

    async def _enqueue(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        if not self.capabilities.sequences:
            refuse_sequences(jobs, f"RabbitMQBackend over {type(self.store).__name__}")
        for new in jobs:
            if new.priority > self.capabilities.max_priority:
                raise ConfigError(
                    f"priority {new.priority} of job {new.id!r} is past this RabbitMQ backend's "
                    f"max_priority={self.options.max_priority}: the broker would run it out of "
                    "order. Use priorities 0 to max_priority, or raise max_priority in the URL "
                    "(up to 255) for new queues."
                )
        for queue in {new.queue for new in jobs}:  # an incompatible queue fails before storing
            await guarded(self._broker.declare(queue), self.options.call_timeout)
        answers = await self.store.enqueue(jobs)
        now = self._now()
        out: list[Outgoing] = []
        for new, answer in zip(jobs, answers, strict=True):
            if answer.duplicate:
                continue
            if new.delay > 0:
                self._later.note_due(new.queue, now + new.delay)
            else:
                out.append((new.queue, new.id, 0, new.priority))
        await self._broker.publish(out)
        return answers

    # -- worker -----------------------------------------------------------------------------

    async def claim(self, queues: Sequence[str], worker_id: str, limit: int) -> ClaimBatch:
        claimed: list[Job] = []
        limited: dict[str, float | None] = {}
        now = self._now()
        for band in range(self.options.priority_bands):  # the most urgent band first
            want = limit - len(claimed)
            if want <= 0:
                break
            inbox = await self._open_inbox(band)
            if inbox.window_for(want) != inbox.window:
                await guarded(inbox.open_window(want), self.options.call_timeout)
            for name in queues:
                if len(claimed) >= limit:
                    break
                qd = await self._deliveries(name, band)
                if band == 0 and self._later.promote_due(name, now):
                    if not await self.store.is_paused(name):  # paused: they stay delayed
                        await self._shielded(self._later.promote(name, now))
                if qd.paused:
                    if await self.store.is_paused(name):
                        continue
                    qd = await self._deliveries(name, band, resume=True)
                want = limit - len(claimed)
                jobs, now = await self._claim_from(inbox, qd, worker_id, want, limited)
                claimed += jobs
        return ClaimBatch(claimed, now, limited)

    async def _claim_from(
        self,
        inbox: Inbox,
        qd: QueueDeliveries,
        worker_id: str,
        limit: int,
        limited: dict[str, float | None],
    ) -> tuple[list[Job], float]:
        claimed: list[Job] = []
        now = self._now()
        parked = qd.unpark()  # offered first: the limits may allow them now
        while len(claimed) < limit:
            want = limit - len(claimed)
            if parked:
                taken, parked = parked, []
            else:
                if qd.buffered < want and inbox.room_for(qd) > 0:
                    await guarded(inbox.fill(qd, want), self.options.call_timeout)
                taken = qd.take(want)
            if not taken:
                break
            try:
                batch, stale = await self._delivery.claim_delivered(
                    qd.queue, [(d.job_id, d.token) for d in taken], worker_id
                )
            except BaseException:
                qd.give_back(taken)
                raise
            now = batch.now
            won = {j.id: j for j in batch.jobs}
            lost = set(stale) - won.keys()
            kept = [d for d in taken if d.job_id not in won and d.job_id not in lost]
            self.stale_deliveries += sum(1 for d in taken if d.job_id in lost)
            for d in taken:
                job = won.get(d.job_id)
                if job is not None:  # acknowledged once its claim is settled
                    inbox.hold(_key(job.claim), d, job.priority)
            done = lost | (won.keys() if inbox.per_consumer else set())  # (quorum: claimed)
            await ack([d.message for d in taken if d.job_id in done])
            claimed += batch.jobs
            if kept and batch.limited and len(qd.parked) + len(kept) <= PARK_MAX:
                # Held back by the queue's limits: parked, and the deliveries behind them
                # are taken meanwhile (this claim, or the next one once its window is open).
                limited.update(batch.limited)
                qd.parked += kept
                continue
            if kept:
                # The queue is paused (or too much is parked): hand them back to the broker,
                # and stop consuming until a later claim finds it open again.
                limited.update(batch.limited)
                await guarded(inbox.pause(qd, kept), self.options.call_timeout)
                break
            if not lost and len(taken) < want and not inbox.per_consumer:
                break
        claimed.sort(key=lambda j: (j.priority, j.seq))
        return claimed, now

    async def heartbeat(self, beats: Sequence[Beat]) -> list[BeatResult]:
        results = await self.store.heartbeat(beats)
        lost = [_key(b.claim) for b, r in zip(beats, results, strict=True) if not r.held]
        if lost:  # the worker writes nothing more for these
            await self._done(lost)
        return results

    async def settle(self, settles: Sequence[Settle]) -> list[bool]:
        return await self._shielded(self._settle(settles))

    async def _settle(self, settles: Sequence[Settle]) -> list[bool]:
        applied = await self.store.settle(settles)
        now = self._now()
        out: list[Outgoing] = []
        for s, ok in zip(settles, applied, strict=True):
            if not ok:
                continue
            if s.outcome is Outcome.RELEASE or (s.outcome is Outcome.RETRY and s.delay <= 0):
                c = s.claim
                priority = next(
                    (p for i in self._inboxes.values() if (p := i.priority(_key(c))) is not None),
                    None,
                )
                if priority is None:
                    [job] = await self.store.get_jobs(c.queue, [c.job_id])
                    if job is None:
                        continue
                    priority = job.priority
                out.append((c.queue, c.job_id, c.token, priority))
            elif s.outcome is Outcome.RETRY:
                self._later.note_due(s.claim.queue, now + s.delay)
        await self._broker.publish(out)  # the new deliveries first, then the old ones go
        await self._done([_key(s.claim) for s in settles])
        return applied

    async def wait(self, queues: Sequence[str], timeout: float) -> None:
        bands = range(self.options.priority_bands)
        deliveries = [await self._deliveries(name, b) for name in queues for b in bands]
        ticket = self._wakeup.ticket()
        if any(qd.has_work() for qd in deliveries):
            return
        now = self._now()
        for name in queues:
            due = self._later.next_due.get(name)
            if due is not None:
                timeout = min(timeout, max(0.0, due - now))
        await self._wakeup.wait(timeout, ticket)

    # -- maintenance ------------------------------------------------------------------------

    async def recover_stalled(self, queue: str, threshold: float, max_stalled: int) -> Recovered:
        return await self._shielded(self._recover_stalled(queue, threshold, max_stalled))

    async def _recover_stalled(self, queue: str, threshold: float, max_stalled: int) -> Recovered:
        # The store first: recovery must not wait for the broker (reconciliation asks it).
        found = await self.store.recover_stalled(queue, threshold, max_stalled)
        problem: RelayError | None = None
        if found.requeued:
            # The store moved them back to waiting in its conditional step; each gets one
            # replacement delivery for the token it has now. A publish the broker does not
            # confirm is kept and tried again by the publisher.
            jobs = await waiting_jobs(self.store, queue, found.requeued)
            try:
                await self._broker.publish([(queue, j.id, j.token, j.priority) for j in jobs])
            except ConfigError as e:  # reconciliation republishes them once the queue is fixed
                problem = e
            self._later.replaced(queue, jobs, threshold)
        try:
            await self._later.republish_untaken(queue, threshold)
            await self._later.reconcile(queue)
        except (ConfigError, BackendError) as e:
            problem = problem or e
        if problem is not None and not (found.requeued or found.failed):
            raise problem
        return found  # what the store did is reported (job:stalled events) in any case

    # -- admin and observation --------------------------------------------------------------

    async def get_jobs(self, queue: str, ids: Sequence[str]) -> list[Job | None]:
        return await self.store.get_jobs(queue, ids)

    async def list_jobs(
        self,
        queue: str,
        state: JobState,
        offset: int = 0,
        limit: int = 100,
        where: JobFilter | None = None,
    ) -> list[Job]:
        return await self.store.list_jobs(queue, state, offset, limit, where)

    async def sequence_head(self, queue: str, sequence: str) -> Job | None:
        return await self.store.sequence_head(queue, sequence)

    async def counts(self, queue: str) -> dict[JobState, int]:
        return await self.store.counts(queue)

    async def cancel_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        return await self.store.cancel_jobs(queue, ids)  # their deliveries are stale now

    async def retry_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        return await self._shielded(self._retry_jobs(queue, ids))

    async def _retry_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        """One store call, one read of the retried jobs' tokens, one publish of their
        deliveries."""
        done = await self.store.retry_jobs(queue, ids)
        retried = [job_id for job_id, ok in zip(ids, done, strict=True) if ok]
        if retried:
            jobs = [j for j in await self.store.get_jobs(queue, retried) if _waiting(j)]
            await self._broker.publish(
                [(queue, j.id, j.token, j.priority) for j in jobs if j is not None]
            )
        return done

    async def remove_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        return await self.store.remove_jobs(queue, ids)

    async def pause(self, queue: str) -> None:
        await self.store.pause(queue)

    async def resume(self, queue: str) -> None:
        await self.store.resume(queue)
        self._wakeup.notify()  # a claim in this process consumes the queue again

    async def is_paused(self, queue: str) -> bool:
        return await self.store.is_paused(queue)

    async def drain(self, queue: str) -> int:
        return await self.store.drain(queue)  # their deliveries are stale now

    async def clean(self, queue: str, state: JobState, older_than: float) -> int:
        return await self.store.clean(queue, state, older_than)

    async def obliterate(self, queue: str) -> None:
        await self.store.obliterate(queue)
        for name in self._broker.names(queue):
            if name in self._broker.declared:

                async def purge(ch: aiormq.abc.AbstractChannel, name: str = name) -> None:
                    await ch.queue_purge(name)

                await guarded(self._broker.on_side_channel(purge), self.options.call_timeout)

    async def prune_keys(self, queue: str, older_than: float) -> int:
        return await self.store.prune_keys(queue, older_than)

    async def set_limits(self, queue: str, limits: Limits | None) -> None:
        if limits is not None and limits.fair:
            raise ConfigError(
                f"queue {queue!r}: fair=True needs claims that choose their jobs; RabbitMQ "
                "delivers each queue's jobs in its own order (use a key cap, key_max_active)"
            )
        await self.store.set_limits(queue, limits)

    async def list_limits(self) -> dict[str, Limits]:
        return await self.store.list_limits()

    async def list_queues(self) -> list[str]:
        return await self.store.list_queues()

    # -- history (the store's) ----------------------------------------------------------------

    async def add_tallies(self, tallies: Sequence[Tally]) -> None:
        await self.store.add_tallies(tallies)

    async def tallies(self, queue: str, since: int) -> list[Tally]:
        return await self.store.tallies(queue, since)

    async def prune_tallies(self, before: int) -> None:
        await self.store.prune_tallies(before)

    # -- meta: kept by the metadata store ---------------------------------------------------

    async def meta_get(self, key: str) -> MetaRecord | None:
        return await self.store.meta_get(key)

    async def meta_put(self, key: str, value: bytes, ttl: float | None = None) -> None:
        await self.store.meta_put(key, value, ttl)

    async def meta_swap(
        self, key: str, expected: int | None, value: bytes, ttl: float | None = None
    ) -> bool:
        return await self.store.meta_swap(key, expected, value, ttl)

    async def meta_list(self, prefix: str) -> list[MetaRecord]:
        return await self.store.meta_list(prefix)

    async def meta_delete(self, key: str) -> bool:
        return await self.store.meta_delete(key)

    async def lease(self, name: str, owner: str, ttl: float) -> bool:
        return await self.store.lease(name, owner, ttl)

    # -- events -----------------------------------------------------------------------------

    async def publish(self, events: Sequence[bytes]) -> None:
        await self.store.publish(events)

    async def subscribe(self) -> AsyncGenerator[bytes, None]:
        return await self.store.subscribe()

    # -- the broker side --------------------------------------------------------------------

    @property
    def broker_queues(self) -> list[str]:
        """The broker queues this handle has declared (tests delete them afterwards)."""
        return sorted(self._broker.declared)

    @property
    def unpublished(self) -> int:
        """Deliveries waiting for the broker to come back."""
        return self._broker.unpublished

    async def delete_broker_queues(self) -> None:
        """Delete every broker queue this handle declared (test clean-up)."""
        for name in self.broker_queues:

            async def delete(channel: aiormq.abc.AbstractChannel, name: str = name) -> None:
                await channel.queue_delete(name)

            await guarded(self._broker.on_side_channel(delete), self.options.call_timeout)
        self._broker.declared.clear()

    @property
    def _inbox(self) -> Inbox | None:
        """The inbox of band 0 (the only one of classic queues)."""
        return self._inboxes.get(0)

    async def _open_inbox(self, band: int = 0) -> Inbox:
        if band not in self._inboxes:
            async with self._consumer_lock:
                if band not in self._inboxes:
                    connection = self._broker.connection
                    assert connection is not None, "connect() first"
                    quorum = self.options.queue_type == "quorum"
                    inbox = Inbox(connection, self.options.prefetch, self._wakeup.notify, quorum)
                    await guarded(inbox.open(), self.options.call_timeout)
                    self._inboxes[band] = inbox
        return self._inboxes[band]

    async def _done(self, keys: Sequence[Key]) -> None:
        """The worker is done with these claims: their deliveries are acknowledged."""
        for inbox in self._inboxes.values():
            await guarded(inbox.done(keys), self.options.call_timeout)

    async def _deliveries(
        self, queue: str, band: int = 0, *, resume: bool = False
    ) -> QueueDeliveries:
        """The deliveries of ``queue`` (of its band ``band``), consumed from the first call on
        (again: ``resume``)."""
        inbox = await self._open_inbox(band)
        qd = inbox.get(queue)
        if qd is None or resume:
            async with self._consumer_lock:
                qd = inbox.get(queue)
                if qd is None or (resume and qd.paused):
                    names = await guarded(self._broker.declare(queue), self.options.call_timeout)
                    qd = await guarded(inbox.consume(queue, names[band]), self.options.call_timeout)
        return qd

    async def _shielded(self, operation: Coroutine[Any, Any, T]) -> T:
        """Run a store transition and the publish that follows it to the end, even when the
        caller is cancelled midway: a job made waiting must get its delivery."""
        task = asyncio.ensure_future(operation)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(_finished)
        return await asyncio.shield(task)


def _finished(task: asyncio.Future[Any]) -> None:
    """A shielded transition ended: its error reached its caller, or (a caller cancelled
    meanwhile) nobody, which is fine: it is not reported as never retrieved."""
    if not task.cancelled():
        task.exception()


def _key(claim: Claim) -> Key:
    return claim.queue, claim.job_id, claim.token


def _waiting(job: Job | None) -> bool:
    return job is not None and job.state is JobState.WAITING
