"""MongoDBBackend (``mongodb://host:port/database``): PyMongo's asyncio API.

Every durable fact lives in the database named by the URL path (default ``relaymq``): job
documents with their claim token, claim and heartbeat times, cancellation marker and stall
count; the DLQ (failed and expired job documents); pause flags and FIFO counters; leases; the
worker registry; the event log (collections and indexes: ``indexes.py``; fields:
``records.py``; every filter and pipeline: ``transitions.py``). No process keeps a copy of
waiting jobs. Each transition is one conditional single-document update, fenced by state and
token; times that decide stalls, due jobs, leases and registry expiry are ``$$NOW`` on the
server unless a test clock is given. Writes use write concern ``majority`` with journal unless
the URL or the options say otherwise.

The backend is made of parts over ``parts.py`` (collections, clock, shared reads): enqueue
(``enqueue.py``), claim (``claim.py``), admin and observation (``admin.py``) and the history
(``history.py``); heartbeat, settle, wait, recovery, the meta store and the events are here.

Round trips (each line one request; ``q`` = queues visited):

- ``enqueue``: 1 per queue in the batch (reserve FIFO sequences, read the server clock) + 1
  ``insert_many``. Duplicates are rejected by the unique ``(queue, id)`` index, across processes.
- ``claim``: 1 (pause flags) + ``q`` (candidate ids, in claim order) + 1 ``update_many`` on
  ``{_id in ids, still claimable}`` that stamps a fresh claim id + 1 ``find`` of that claim id.
  The per-document re-check makes concurrent claimers safe: a document goes to the one claimer
  whose update matched it; a claimer that lost races tries again (at most 3 rounds). A queue
  with limits or sequences claims under its lease: +1 take, +1 read of its queue document, +1
  release, and with sequences 2 reads per sequence met (+1 when the claim comes back short).
- ``heartbeat`` and ``settle``: 1 ``bulk_write`` of fenced ``update_one``s; +1 read when some
  did not match (to tell lost claims from idempotent repeats); ``settle`` +1 per queue when it
  holds a RETRY without delay (a new FIFO sequence).
- ``recover_stalled``: 1 scan + 1 sequence reservation + 1 ``bulk_write``, +1 read on races.

So a job costs about 2/B (enqueue) + 4/B (claim) + 1/B (settle) round trips for batches of B,
plus its share of heartbeats: 7 for a batch of one.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from pymongo import AsyncMongoClient, UpdateOne
from pymongo.errors import OperationFailure

from relaymq.backends.base import Backend
from relaymq.backends.mongodb import transitions as tx
from relaymq.backends.mongodb.admin import MongoAdmin
from relaymq.backends.mongodb.claim import MongoClaim
from relaymq.backends.mongodb.config import parse
from relaymq.backends.mongodb.dependencies import Dependencies
from relaymq.backends.mongodb.enqueue import MongoEnqueue
from relaymq.backends.mongodb.errors import refused, translated
from relaymq.backends.mongodb.eventlog import EventLog, Subscription
from relaymq.backends.mongodb.history import MongoHistory
from relaymq.backends.mongodb.indexes import (
    JOB_KEYS,
    JOBS,
    LOCKS,
    META,
    QUEUES,
    TALLIES,
    ensure_indexes,
)
from relaymq.backends.mongodb.meta import MetaCollection
from relaymq.backends.mongodb.parts import RECOVER_BATCH
from relaymq.backends.mongodb.records import (
    JOB_FIELDS,
    Document,
    describe,
    problems,
    text,
    texts,
)
from relaymq.backends.mongodb.upgrade import OLD_SCHEDULES, carry_schedules
from relaymq.backends.wakeup import Wakeup
from relaymq.errors import ConfigError
from relaymq.job import TERMINAL, Claim
from relaymq.records.meta import MetaRecord
from relaymq.records.store import (
    OUTCOME_STATE,
    Beat,
    BeatResult,
    Capabilities,
    Clock,
    Outcome,
    Recovered,
    Settle,
)


class MongoDBBackend(MongoEnqueue, MongoClaim, MongoAdmin, MongoHistory, Backend):
    """Jobs, DLQ, leases, registry and events in one MongoDB database (``mongodb://``)."""

    capabilities = Capabilities(
        durable=True,
        cross_process=True,
        server_clock=True,
        blocking_wait=False,  # polled: the test server has no change streams
        cluster_safe=False,
        transactions=False,  # every transition is one document; no multi-document transactions
        search="native",  # arguments: the payload decoded (records.arguments_of)
        sequences=True,  # decided by claims that take turns under a lease (claim.py)
    )

    def __init__(
        self,
        url: str = "mongodb://127.0.0.1:27017/relaymq",
        *,
        clock: Clock | None = None,
        database: str | None = None,
        write_concern: str | int = "majority",
        journal: bool = True,
        server_selection_timeout: float = 5.0,
        wait_poll_interval: float = 1.0,
        events_poll_interval: float = 0.2,
        events_keep: int = 1000,
        events_gap_timeout: float = 2.0,
        **client_options: Any,
    ) -> None:
        self.url = url
        self.options = parse(
            url,
            database=database,
            write_concern=write_concern,
            journal=journal,
            server_selection_timeout=server_selection_timeout,
            client_options=client_options,
        )
        self.database_name = self.options.database
        self.where = self.options.where
        self._client_options = self.options.client_options
        self._now = tx.Now(clock)
        self._wait_poll = wait_poll_interval
        self._events_options = {
            "keep": events_keep,
            "poll_interval": events_poll_interval,
            "gap_timeout": events_gap_timeout,
        }
        self._client: AsyncMongoClient[Document] | None = None
        self._wakeup = Wakeup()

    # -- connection -------------------------------------------------------------------------

    @translated
    async def connect(self) -> None:
        if self._client is not None:
            return
        client: AsyncMongoClient[Document] = AsyncMongoClient(self.url, **self._client_options)
        db = client[self.database_name]
        try:
            await ensure_indexes(db)
            await carry_schedules(db[OLD_SCHEDULES], MetaCollection(db[META], self._now))
        except OperationFailure as e:
            await client.close()
            if not refused(e):
                raise
            raise ConfigError(
                f"MongoDB server {self.where} refused this backend's setup: {e} (check the "
                "user, password and database in the URL, and indexes of the same name)"
            ) from e
        except BaseException:
            await client.close()
            raise
        self._client = client
        self._jobs = db[JOBS]
        self._queues = db[QUEUES]
        self._tallies = db[TALLIES]
        self._meta = MetaCollection(db[META], self._now)
        self._locks = db[LOCKS]
        self._keys = db[JOB_KEYS]
        self._deps = Dependencies(self._jobs, self._now, self._sequences, self._tallies)
        self._events = EventLog(db, **self._events_options)  # type: ignore[arg-type]

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    # -- internal ---------------------------------------------------------------------------

    async def _current(self, claims: Sequence[Claim], fields: Sequence[str]) -> dict[Any, Document]:
        """The current documents of ``claims``' jobs (one read), keyed by (queue, id)."""
        by_queue: dict[str, list[str]] = {}
        for c in claims:
            by_queue.setdefault(c.queue, []).append(c.job_id)
        query = {"$or": [{"queue": q, "id": {"$in": ids}} for q, ids in by_queue.items()]}
        projection = dict.fromkeys(["queue", "id", "state", "token", *fields], 1)
        return {(d["queue"], d["id"]): d async for d in self._jobs.find(query, projection)}

    # -- worker -----------------------------------------------------------------------------

    @translated
    async def heartbeat(self, beats: Sequence[Beat]) -> list[BeatResult]:
        if not beats:
            return []
        ops = [UpdateOne(tx.fenced(b.claim), tx.beat_update(b, self._now)) for b in beats]
        result = await self._jobs.bulk_write(ops, ordered=False)
        if result.matched_count == len(beats):
            return [BeatResult(held=True) for _ in beats]
        current = await self._current([b.claim for b in beats], ["cancel_requested"])
        answers = []
        for b in beats:
            doc = current.get((b.claim.queue, b.claim.job_id))
            same = doc is not None and doc.get("token") == b.claim.token
            held = same and doc is not None and doc.get("state") == tx.ACTIVE
            cancelled = same and doc is not None and bool(doc.get("cancel_requested"))
            answers.append(BeatResult(held=held, cancel_requested=cancelled and not held))
        return answers

    @translated
    async def settle(self, settles: Sequence[Settle]) -> list[bool]:
        if not settles:
            return []
        seqs = await self._retry_sequences(settles)
        write_id = uuid.uuid4().hex
        ops = [
            UpdateOne(tx.fenced(s.claim), tx.settle_update(s, self._now, write_id, seqs.get(i)))
            for i, s in enumerate(settles)
        ]
        result = await self._jobs.bulk_write(ops, ordered=False)
        if any(s.outcome in (Outcome.RETRY, Outcome.RELEASE) for s in settles):
            self._wakeup.notify()
        await self._tell_dependents(settles)
        if result.matched_count == len(settles):
            return [True] * len(settles)
        current = await self._current([s.claim for s in settles], ["write_id"])
        return [
            self._applied(s, current.get((s.claim.queue, s.claim.job_id)), write_id)
            for s in settles
        ]

    async def _tell_dependents(self, settles: Sequence[Settle]) -> None:
        """The jobs blocked on those that just ended learn it, in queues that have blocked
        jobs (the others pay nothing but a cached read a second); ``repair`` mends the rest."""
        ended: dict[str, list[str]] = {}
        for s in settles:
            if OUTCOME_STATE[s.outcome] in TERMINAL:
                ended.setdefault(s.claim.queue, []).append(s.claim.job_id)
        for queue, ids in ended.items():
            if await self._deps.any_blocked(queue):
                await self._deps.ended_among(queue, ids)
                self._wakeup.notify()

    async def _retry_sequences(self, settles: Sequence[Settle]) -> dict[int, int]:
        """New FIFO sequences for the RETRYs without delay (they rejoin the back of the line)."""
        wanted: dict[str, list[int]] = {}
        for i, s in enumerate(settles):
            if s.outcome is Outcome.RETRY and s.delay <= 0:
                wanted.setdefault(s.claim.queue, []).append(i)
        seqs: dict[int, int] = {}
        for queue, indexes in wanted.items():
            first, _ = await self._sequences(queue, len(indexes))
            seqs |= {i: first + n for n, i in enumerate(indexes)}
        return seqs

    @staticmethod
    def _applied(s: Settle, doc: Document | None, write_id: str) -> bool:
        """Did this settle apply now, or is it a repeat of a terminal transition that did?"""
        if doc is None or doc.get("token") != s.claim.token:
            return False
        if doc.get("write_id") == write_id:
            return True
        target = OUTCOME_STATE[s.outcome]
        return target in TERMINAL and doc.get("state") == str(target)

    @translated
    async def wait(self, queues: Sequence[str], timeout: float) -> None:
        queues = texts(queues, "queue")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        paused: set[str] = set()
        while True:
            ticket = self._wakeup.ticket()  # before the check: a notify in between is kept
            if paused:
                paused = (await self._gates(queues))[0]
            if await self._work_in([q for q in queues if q not in paused], paused):
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            if await self._wakeup.wait(min(self._wait_poll, remaining), ticket):
                return

    async def _work_in(self, queues: list[str], paused: set[str]) -> bool:
        """Whether an unpaused queue of ``queues`` has a claimable job; learns paused ones."""
        while queues:
            query = tx.claimable("", self._now) | {"queue": {"$in": queues}}
            doc = await self._jobs.find_one(query, {"queue": 1})
            if doc is None:
                return False
            now_paused = (await self._gates(queues))[0]
            if doc["queue"] not in now_paused:
                return True
            paused |= now_paused
            queues = [q for q in queues if q not in now_paused]
        return False

    # -- maintenance ------------------------------------------------------------------------

    @translated
    async def recover_stalled(self, queue: str, threshold: float, max_stalled: int) -> Recovered:
        text(queue, "queue")
        result = Recovered(errors=await self._quarantine_strays(queue))
        cursor = self._jobs.find(tx.stalled(queue, threshold, self._now), JOB_FIELDS)
        found = await cursor.sort("heartbeat_at", 1).limit(RECOVER_BATCH).to_list()
        requeue: list[tuple[Any, str, int, int]] = []
        fail: list[tuple[Any, str, int, str]] = []
        for doc in found:
            job_id, token, stalls = doc.get("id"), doc.get("token"), doc.get("stalls")
            if not (isinstance(job_id, str) and type(token) is int):
                result.errors.append(str(job_id if isinstance(job_id, str) else doc["_id"]))
            elif bad := problems(doc):  # fenced by its token, it can still be failed
                fail.append((doc["_id"], job_id, token, describe(doc, bad)))
            elif type(stalls) is int and stalls >= max_stalled:
                reason = f"stalled {stalls + 1} times (max_stalled={max_stalled})"
                fail.append((doc["_id"], job_id, token, reason))
            else:
                requeue.append((doc["_id"], job_id, token, stalls or 0))
        await self._deps.repair(queue)
        if not requeue and not fail:
            return result
        first = (await self._sequences(queue, len(requeue)))[0] if requeue else 0
        write_id = uuid.uuid4().hex
        ops = [
            UpdateOne(
                tx.still_stalled(doc_id, token, threshold, self._now),
                tx.requeue_stalled(stalls, first + n, self._now, write_id),
            )
            for n, (doc_id, _, token, stalls) in enumerate(requeue)
        ] + [
            UpdateOne(
                tx.still_stalled(doc_id, token, threshold, self._now),
                tx.fail_stalled(reason, self._now, write_id),
            )
            for doc_id, _, token, reason in fail
        ]
        outcome = await self._jobs.bulk_write(ops, ordered=False)
        if outcome.matched_count == len(ops):
            applied = None
        else:  # another recovery or a worker got there first for some
            cursor = self._jobs.find(
                {"_id": {"$in": [r[0] for r in requeue + fail]}, "write_id": write_id}, {"_id": 1}
            )
            applied = {doc["_id"] async for doc in cursor}
        result.requeued.extend(r[1] for r in requeue if applied is None or r[0] in applied)
        result.failed.extend(r[1] for r in fail if applied is None or r[0] in applied)
        await self._deps.ended_among(queue, result.failed)
        if result.requeued:
            self._wakeup.notify()
        return result

    # -- meta (meta.py) ---------------------------------------------------------------------

    @translated
    async def meta_get(self, key: str) -> MetaRecord | None:
        return await self._meta.get(key)

    @translated
    async def meta_put(self, key: str, value: bytes, ttl: float | None = None) -> None:
        await self._meta.put(key, value, ttl)

    @translated
    async def meta_swap(
        self, key: str, expected: int | None, value: bytes, ttl: float | None = None
    ) -> bool:
        return await self._meta.swap(key, expected, value, ttl)

    @translated
    async def meta_list(self, prefix: str) -> list[MetaRecord]:
        return await self._meta.list(prefix)

    @translated
    async def meta_delete(self, key: str) -> bool:
        return await self._meta.delete(key)

    # -- events -----------------------------------------------------------------------------

    @translated
    async def publish(self, events: Sequence[bytes]) -> None:
        await self._events.publish(events)

    @translated
    async def subscribe(self) -> AsyncGenerator[bytes, None]:
        return Subscription(self._events.tail(await self._events.position()))
