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

Round trips (each line one request; ``q`` = queues visited):

- ``enqueue``: 1 per queue in the batch (reserve FIFO sequences, read the server clock) + 1
  ``insert_many``. Duplicates are rejected by the unique ``(queue, id)`` index, across processes.
- ``claim``: 1 (pause flags) + ``q`` (candidate ids, in claim order) + 1 ``update_many`` on
  ``{_id in ids, still claimable}`` that stamps a fresh claim id + 1 ``find`` of that claim id.
  The per-document re-check makes concurrent claimers safe: a document goes to the one claimer
  whose update matched it; a claimer that lost races tries again (at most 3 rounds).
- ``heartbeat`` and ``settle``: 1 ``bulk_write`` of fenced ``update_one``s; +1 read when some
  did not match (to tell lost claims from idempotent repeats); ``settle`` +1 per queue when it
  holds a RETRY without delay (a new FIFO sequence).
- ``recover_stalled``: 1 scan + 1 sequence reservation + 1 ``bulk_write``, +1 read on races.

So a job costs about 2/B (enqueue) + 4/B (claim) + 1/B (settle) round trips for batches of B,
plus its share of heartbeats: 7 for a batch of one.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import uuid
from collections.abc import AsyncGenerator, Sequence
from typing import Any, Final, ParamSpec, TypeVar

from pymongo import AsyncMongoClient, ReturnDocument, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

from relaymq.backends.base import Backend
from relaymq.backends.mongodb import transitions as tx
from relaymq.backends.mongodb.config import parse
from relaymq.backends.mongodb.dependencies import NOT_ENDED, Dependencies
from relaymq.backends.mongodb.errors import refused, translated
from relaymq.backends.mongodb.eventlog import EventLog, Subscription
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
from relaymq.backends.mongodb.records import (
    Document,
    check_new,
    describe,
    new_document,
    problems,
    text,
    texts,
    to_job,
    to_job_lenient,
    to_limits,
)
from relaymq.backends.mongodb.upgrade import OLD_SCHEDULES, carry_schedules
from relaymq.backends.wakeup import Wakeup
from relaymq.errors import (
    BackendError,
    ConfigError,
    CorruptRecordError,
)
from relaymq.job import PENDING, TERMINAL, Claim, Job, JobState, NewJob
from relaymq.policy import KEY_SCAN, Allowance, KeyBudget, KeyStep, allowance, key_step
from relaymq.records.limits import Limits
from relaymq.records.meta import MetaRecord
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
    dependent,
    keyed,
    merge_tallies,
)

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_DATABASE: Final = "relaymq"
DUPLICATE_KEY: Final = 11000
CLAIM_ROUNDS: Final = 3
RECOVER_BATCH: Final = 500
IDS_PER_FIND: Final = 200
"""Ids in one ``$in``: the MongoDB-protocol test server refuses a query tree deeper than 1000."""

PENDING_STATES: Final = frozenset(s.value for s in PENDING)
"""The stored names of the states in which a job still holds its throttle or debounce key."""
NOT_STARTED: Final = [str(JobState.BLOCKED), *tx.CLAIMABLE]
"""What ``drain`` deletes (the jobs blocked on those go with them: nothing to tell)."""
KEY_ROUNDS: Final = 50
LIMITS_LEASE: Final = 10.0
"""Seconds one claim of a queue with limits may take before another may start."""
"""Attempts of one keyed enqueue to move its key before it gives up (heavy contention)."""


class MongoDBBackend(Backend):
    """Jobs, DLQ, leases, registry and events in one MongoDB database (``mongodb://``)."""

    capabilities = Capabilities(
        durable=True,
        cross_process=True,
        server_clock=True,
        blocking_wait=False,  # polled: the test server has no change streams
        cluster_safe=False,
        transactions=False,  # every transition is one document; no multi-document transactions
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
            url, database=database, write_concern=write_concern, journal=journal,
            server_selection_timeout=server_selection_timeout, client_options=client_options,
        )  # fmt: skip
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
        self._jobs: AsyncCollection[Document] = db[JOBS]
        self._queues: AsyncCollection[Document] = db[QUEUES]
        self._tallies: AsyncCollection[Document] = db[TALLIES]
        self._meta = MetaCollection(db[META], self._now)
        self._locks: AsyncCollection[Document] = db[LOCKS]
        self._keys: AsyncCollection[Document] = db[JOB_KEYS]
        self._deps = Dependencies(self._jobs, self._now, self._tallies)
        self._events = EventLog(db, **self._events_options)  # type: ignore[arg-type]

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    # -- internal ---------------------------------------------------------------------------

    async def _sequences(self, queue: str, count: int) -> tuple[int, Any]:
        """Reserve ``count`` FIFO sequences of ``queue``: (first, backend now as a date)."""
        doc = await self._queues.find_one_and_update(
            {"_id": queue}, tx.next_sequence(count, self._now), upsert=True,
            projection={"seq": 1, "now": 1}, return_document=ReturnDocument.AFTER,
        )  # fmt: skip
        if doc is None:
            raise BackendError(f"could not reserve FIFO sequences for queue {queue!r}")
        return int(doc["seq"]) - count + 1, tx.as_date(doc["now"])

    async def _gates(self, queues: Sequence[str]) -> tuple[set[str], set[str]]:
        """Of ``queues``, the paused ones and the ones with limits (one read)."""
        cursor = self._queues.find({"_id": {"$in": list(queues)}}, {"paused": 1, "limits": 1})
        paused: set[str] = set()
        with_limits: set[str] = set()
        async for doc in cursor:
            if doc.get("paused") is True:
                paused.add(doc["_id"])
            if doc.get("limits"):
                with_limits.add(doc["_id"])
        return paused, with_limits

    async def _current(self, claims: Sequence[Claim], fields: Sequence[str]) -> dict[Any, Document]:
        """The current documents of ``claims``' jobs (one read), keyed by (queue, id)."""
        by_queue: dict[str, list[str]] = {}
        for c in claims:
            by_queue.setdefault(c.queue, []).append(c.job_id)
        query = {"$or": [{"queue": q, "id": {"$in": ids}} for q, ids in by_queue.items()]}
        projection = dict.fromkeys(["queue", "id", "state", "token", *fields], 1)
        return {(d["queue"], d["id"]): d async for d in self._jobs.find(query, projection)}

    # -- producer ---------------------------------------------------------------------------

    @translated
    async def enqueue(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        for job in jobs:
            check_new(job)
        if keyed(jobs) or dependent(jobs):
            keyed_answers = [await self._enqueue_keyed(j) for j in jobs]
            self._wakeup.notify()
            return keyed_answers
        answers: list[Enqueued] = [Enqueued(j.id) for j in jobs]
        fresh: dict[tuple[str, str], int] = {}  # (queue, id) -> index into jobs
        for i, job in enumerate(jobs):
            if (job.queue, job.id) in fresh:
                answers[i] = Enqueued(job.id, duplicate=True)
            else:
                fresh[(job.queue, job.id)] = i
        if not fresh:
            return answers
        per_queue: dict[str, list[int]] = {}
        for (queue, _), i in fresh.items():
            per_queue.setdefault(queue, []).append(i)
        docs: list[Document] = []
        order: list[int] = []
        for queue, indexes in per_queue.items():
            first, now = await self._sequences(queue, len(indexes))
            for offset, i in enumerate(indexes):
                docs.append(new_document(jobs[i], first + offset, now))
                order.append(i)
        try:
            await self._jobs.insert_many(docs, ordered=False)
        except BulkWriteError as e:
            errors = e.details.get("writeErrors", [])
            others = [err for err in errors if err.get("code") != DUPLICATE_KEY]
            if others:
                raise BackendError(f"MongoDB rejected jobs: {others[0].get('errmsg')}") from e
            for err in errors:
                i = order[err["index"]]
                answers[i] = Enqueued(jobs[i].id, duplicate=True)
        self._wakeup.notify()
        return answers

    async def _enqueue_keyed(self, job: NewJob) -> Enqueued:
        """One job with a key rule. Without multi-document transactions the steps are ordered
        so that a crash between two never loses a job: the key moves by compare-and-set (a
        version), then the job is stored, then a debounced holder is deleted (a crash before
        that leaves both to run). A crash between the first two steps leaves a throttle key
        held by a job that was never stored, until its window ends."""
        rule = job.rule
        if rule is None and job.depends_on:
            return await self._enqueue_dependent(job)
        if rule is None:
            [answer] = await self.enqueue([job])
            return answer
        key_id = f"{job.queue}|{rule.key}"  # a queue name has no "|"
        for _ in range(KEY_ROUNDS):
            if await self._jobs.find_one({"queue": job.queue, "id": job.id}, {"_id": 1}):
                return Enqueued(job.id, duplicate=True)
            seq, now = await self._sequences(job.queue, 1)
            held = await self._keys.find_one({"_id": key_id})
            holder = None if held is None else held.get("holder")
            state = None
            if held is not None and holder is not None:
                found = await self._jobs.find_one({"queue": job.queue, "id": holder},
                                                  {"state": 1})  # fmt: skip
                state = None if found is None else found.get("state")
            in_window = (
                held is not None and holder is not None and (tx.as_date(held["until"]) > now)
            )
            step = key_step(rule.mode, state, in_window)
            if step is KeyStep.DUPLICATE:
                assert holder is not None
                return Enqueued(holder, duplicate=True)
            until = now + dt.timedelta(seconds=rule.window)
            if not await self._move_key(key_id, job, held, until):
                continue  # another enqueue moved the key first: decide again
            doc = new_document(job, seq, now)
            pending = await self._deps.prepare(job, doc) if job.depends_on else []
            try:
                await self._jobs.insert_one(doc)
            except DuplicateKeyError:
                return Enqueued(job.id, duplicate=True)
            await self._deps.register(job.queue, job.id, pending)
            replaced = None
            if step is KeyStep.REPLACE:
                gone = await self._jobs.find_one_and_delete(
                    {"queue": job.queue, "id": holder, "state": {"$in": ["waiting", "delayed"]}},
                    projection={"dependents": 1},
                )  # fmt: skip
                replaced = holder if gone is not None else None
                if gone is not None and holder is not None and gone.get("dependents"):
                    await self._deps.ended(job.queue, [(holder, "removed", gone["dependents"])])
            return Enqueued(job.id, replaced=replaced)
        raise BackendError(f"key {rule.key!r} of queue {job.queue!r} changed hands "
                           f"{KEY_ROUNDS} times while job {job.id!r} was enqueued")  # fmt: skip

    async def _move_key(self, key_id: str, job: NewJob, held: Document | None, until: Any) -> bool:
        """Give the key to ``job`` unless it changed since it was read as ``held``."""
        fields = {"queue": job.queue, "holder": job.id, "until": until}
        if held is None:
            try:
                await self._keys.insert_one({"_id": key_id, **fields, "v": 1})
            except DuplicateKeyError:
                return False
            return True
        moved = await self._keys.update_one({"_id": key_id, "v": held.get("v")},
                                            {"$set": fields, "$inc": {"v": 1}})  # fmt: skip
        return moved.modified_count == 1

    async def _enqueue_dependent(self, job: NewJob) -> Enqueued:
        """One job with dependencies (``dependencies.py``): stored blocked, failed or waiting
        as its dependencies stand, then registered with each pending one."""
        seq, now = await self._sequences(job.queue, 1)
        doc = new_document(job, seq, now)
        pending = await self._deps.prepare(job, doc)
        try:
            await self._jobs.insert_one(doc)
        except DuplicateKeyError:
            return Enqueued(job.id, duplicate=True)
        await self._deps.register(job.queue, job.id, pending)
        return Enqueued(job.id)

    # -- worker -----------------------------------------------------------------------------

    @translated
    async def claim(self, queues: Sequence[str], worker_id: str, limit: int) -> ClaimBatch:
        if limit <= 0 or not queues:
            return ClaimBatch([], self._now.local())
        queues = texts(queues, "queue")
        paused, with_limits = await self._gates(queues)
        open_queues = [q for q in dict.fromkeys(queues) if q not in paused]
        claimed = await self._take([q for q in open_queues if q not in with_limits],
                                   worker_id, limit)  # fmt: skip
        limited: dict[str, float | None] = {}
        for queue in (q for q in open_queues if q in with_limits):
            want = limit - len(claimed)
            if want <= 0:
                break
            jobs, a, keys_held = await self._claim_limited(queue, worker_id, want)
            claimed += jobs
            if a is not None and len(jobs) == a.take < want:
                limited[queue] = a.retry_in
            if keys_held is not None:
                limited[queue] = keys_held
        now = claimed[0].claimed_at if claimed and claimed[0].claimed_at else self._now.local()
        return ClaimBatch(claimed, now, limited)

    async def _take(self, open_queues: Sequence[str], worker_id: str, limit: int) -> list[Job]:
        """Claim up to ``limit`` jobs of ``open_queues`` (unpaused), in the order given."""
        claimed: list[Job] = []
        for _ in range(CLAIM_ROUNDS):
            wanted = limit - len(claimed)
            ids: list[Any] = []
            for queue in open_queues:
                if len(ids) >= wanted:
                    break
                cursor = self._jobs.find(tx.claimable(queue, self._now), {"_id": 1})
                cursor = cursor.sort(tx.CLAIM_ORDER).limit(wanted - len(ids))
                ids += [doc["_id"] async for doc in cursor]
            if not ids:
                break
            got, all_won = await self._claim_ids(ids, worker_id)
            claimed += got
            if all_won:
                break  # no lost races: either the limit is reached or the queues are empty
        return claimed

    async def _claim_ids(self, ids: list[Any], worker_id: str) -> tuple[list[Job], bool]:
        """Claim the candidates ``ids`` (document ids) still claimable: the jobs taken, in
        candidate order, and whether every one was."""
        claim_id = uuid.uuid4().hex
        result = await self._jobs.update_many(
            tx.claim_again(ids, self._now), tx.claim_update(worker_id, claim_id, self._now)
        )
        got = await self._read_claimed(claim_id, ids) if result.modified_count else []
        return got, result.modified_count == len(ids)

    async def _take_within(
        self, queue: str, worker_id: str, want: int, budget: KeyBudget
    ) -> list[Job]:
        """Up to ``want`` jobs of ``queue`` in claim order, past those whose limit key has used
        its window (``KEY_SCAN`` looked at, at most)."""
        spent = budget.spent()
        if spent:
            budget.held_back = True  # their jobs are left out of the candidates
        query = tx.claimable(queue, self._now) | {"limit_key": {"$nin": spent}}
        cursor = self._jobs.find(query, {"limit_key": 1}).sort(tx.CLAIM_ORDER).limit(KEY_SCAN)
        ids: list[Any] = []
        async for doc in cursor:
            if len(ids) == want:
                break
            if budget.take(doc.get("limit_key")):
                ids.append(doc["_id"])
        return (await self._claim_ids(ids, worker_id))[0] if ids else []

    async def _claim_limited(
        self, queue: str, worker_id: str, want: int
    ) -> tuple[list[Job], Allowance | None, float | None]:
        """Claim up to ``want`` jobs of ``queue`` within its limits: the jobs, the allowance
        (None: the limits are gone; the claim was the ordinary one), and, when the keys' rate
        held jobs back, the seconds until the key window ends (else None).

        Without multi-document transactions, the claims of a limited queue take turns under a
        lease (``LIMITS_LEASE``): while it is held, another claim of the queue takes nothing.
        A claimer that outlives its lease (paused for that long mid-claim) could exceed the
        cap by its own batch; docs/guarantees.md says so."""
        name, owner = f"limits:{queue}", uuid.uuid4().hex
        if not await self._limits_lease(name, owner):
            return [], Allowance(0, 0, 0, None), None  # another claim of this queue is on
        try:
            doc = await self._queues.find_one_and_update(
                {"_id": queue}, [{"$set": {"now": self._now.expr()}}],
                projection={"limits": 1, "win": 1, "used": 1, "key_window": 1, "key_used": 1,
                            "now": 1},
                return_document=ReturnDocument.AFTER,
            )  # fmt: skip
            limits = to_limits(doc)
            if limits is None or doc is None:
                return await self._take([queue], worker_id, want), None, None
            active = await self._jobs.count_documents({"queue": queue, "state": tx.ACTIVE})
            now = tx.as_date(doc["now"]).timestamp()
            a = allowance(limits, active, int(doc.get("win", 0)), int(doc.get("used", 0)), now,
                          want)  # fmt: skip
            budget = None
            if limits.key_rate is not None:
                budget = KeyBudget(limits, int(doc.get("key_window", 0)),
                                   dict(doc.get("key_used") or []), now)  # fmt: skip
                jobs = await self._take_within(queue, worker_id, a.take, budget)
            else:
                jobs = await self._take([queue], worker_id, a.take) if a.take > 0 else []
            counted: dict[str, Any] = {"win": a.window, "used": a.used + len(jobs)}
            if budget is not None:
                # [key, starts] pairs: a key may hold '.' or '$', which field names may not
                counted |= {"key_window": budget.window,
                            "key_used": [[k, n] for k, n in budget.used.items()]}  # fmt: skip
            await self._queues.update_one({"_id": queue}, {"$set": counted})
            held = None
            if budget is not None and budget.held_back and len(jobs) < a.take:
                held = budget.retry_in(now)
            return jobs, a, held
        finally:
            await self._locks.delete_one({"_id": name, "owner": owner})

    async def _limits_lease(self, name: str, owner: str) -> bool:
        """Take the lease ``name`` of the ``locks`` collection for ``LIMITS_LEASE`` seconds,
        in one write: a step of a limited claim, so not the meta store's two-step ``lease``."""
        try:
            await self._locks.update_one(
                tx.lock_filter(name, owner, self._now),
                tx.lock_update(owner, LIMITS_LEASE, self._now),
                upsert=True,
            )
        except DuplicateKeyError:  # held by another owner and not lapsed: the upsert collided
            return False
        return True

    async def _read_claimed(self, claim_id: str, order: list[Any]) -> list[Job]:
        """The jobs one claim took, in candidate order; unreadable ones are failed, not lost."""
        docs = {doc["_id"]: doc async for doc in self._jobs.find({"claim_id": claim_id})}
        jobs: list[Job] = []
        for doc_id in order:
            doc = docs.get(doc_id)
            if doc is None:
                continue
            try:
                jobs.append(to_job(doc))
            except CorruptRecordError as e:
                await self._jobs.update_one(
                    {"_id": doc_id, "claim_id": claim_id}, tx.fail_unreadable(str(e), self._now)
                )
        return jobs

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
        return [self._applied(s, current.get((s.claim.queue, s.claim.job_id)), write_id)
                for s in settles]  # fmt: skip

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
        cursor = self._jobs.find(tx.stalled(queue, threshold, self._now))
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

    # -- admin and observation --------------------------------------------------------------

    @translated
    async def get_jobs(self, queue: str, ids: Sequence[str]) -> list[Job | None]:
        text(queue, "queue")
        ids = texts(ids, "job_id")
        if not ids:
            return []
        found: dict[str, Job] = {}
        for at in range(0, len(ids), IDS_PER_FIND):  # a bounded $in: servers cap query size
            chunk = list(ids[at : at + IDS_PER_FIND])
            cursor = self._jobs.find({"queue": queue, "id": {"$in": chunk}})
            found.update({doc["id"]: to_job(doc) async for doc in cursor})
        return [found.get(i) for i in ids]

    @translated
    async def list_jobs(
        self, queue: str, state: JobState, offset: int = 0, limit: int = 100
    ) -> list[Job]:
        order = {
            JobState.WAITING: tx.CLAIM_ORDER,
            JobState.DELAYED: [("ready_at", 1), ("seq", 1)],
            JobState.ACTIVE: [("claimed_at", 1), ("seq", 1)],
        }.get(state, [("finished_at", 1), ("seq", 1)])
        cursor = self._jobs.find({"queue": text(queue, "queue"), "state": str(state)}).sort(order)
        return [to_job_lenient(doc, state) async for doc in cursor.skip(offset).limit(limit)]

    @translated
    async def counts(self, queue: str) -> dict[JobState, int]:
        text(queue, "queue")
        # One count per state on the (queue, state, ...) index: an index-only count of that
        # state's keys, never a read of documents. Sent concurrently: one round trip of latency.
        # The last counts the states nobody knows (damage): those jobs are quarantined first.
        numbers = await self._counts(queue)
        if numbers[-1]:
            await self._quarantine_strays(queue)
            numbers = await self._counts(queue)
        return dict(zip(JobState, numbers[:-1], strict=True))

    async def _counts(self, queue: str) -> list[int]:
        return await asyncio.gather(
            *(self._jobs.count_documents({"queue": queue, "state": str(s)}) for s in JobState),
            self._jobs.count_documents(tx.strays(queue)),
        )

    async def _quarantine_strays(self, queue: str) -> list[str]:
        """Fail the jobs of ``queue`` in a state nobody knows into the DLQ with the reason
        (``relaymq.backends.corrupt``: no line, count or listing shows them); their ids."""
        ids: list[str] = []
        async for doc in self._jobs.find(tx.strays(queue)).limit(RECOVER_BATCH):
            done = await self._jobs.update_one(
                {"_id": doc["_id"], "state": doc.get("state")},  # unless it changed meanwhile
                tx.fail_unreadable(describe(doc, problems(doc)), self._now),
            )
            if done.modified_count:
                ids.append(str(doc.get("id", doc["_id"])))
        await self._deps.ended_among(queue, ids)
        return ids

    @translated
    async def cancel_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        text(queue, "queue")
        ids = texts(ids, "job_id")
        done = await self._stamped(queue, ids, {"state": {"$in": tx.LIVE}},
                                   lambda _: tx.cancel_update(self._now))  # fmt: skip
        await self._deps.ended_among(queue, [i for i, ok in zip(ids, done, strict=True) if ok])
        return done

    @translated
    async def retry_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        text(queue, "queue")
        ids = texts(ids, "job_id")
        if not ids:
            return []
        first, _ = await self._sequences(queue, len(ids))
        done = await self._stamped(
            queue, ids, {"state": {"$in": tx.RETRYABLE}},
            lambda n: tx.manual_retry_update(first + n, self._now),
        )  # fmt: skip
        if any(done):
            self._wakeup.notify()
        return done

    async def _stamped(
        self, queue: str, ids: Sequence[str], condition: Document, update: Any
    ) -> list[bool]:
        """One ``bulk_write`` of conditional updates (``update(n)`` for the n-th id), each
        stamping a fresh write id; per id, whether its update applied. When some did not
        match, one read of the stamp tells which did."""
        if not ids:
            return []
        write_id = uuid.uuid4().hex
        stamp = {"$set": {"write_id": tx.literal(write_id)}}
        ops = [
            UpdateOne({"queue": queue, "id": job_id, **condition}, [*update(n), stamp])
            for n, job_id in enumerate(ids)
        ]
        result = await self._jobs.bulk_write(ops, ordered=False)
        if result.modified_count == len(ids):
            return [True] * len(ids)
        query = {"queue": queue, "id": {"$in": list(ids)}, "write_id": write_id}
        applied = {doc["id"] async for doc in self._jobs.find(query, {"id": 1})}
        return [i in applied for i in ids]

    @translated
    async def remove_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        text(queue, "queue")
        ids = texts(ids, "job_id")
        if not ids:
            return []
        query = {"queue": queue, "id": {"$in": list(ids)}}
        found = [doc async for doc in self._jobs.find(query, {"id": 1, "state": 1,
                                                             "dependents": 1})]  # fmt: skip
        present = {doc["id"]: doc["_id"] for doc in found}
        # Deleted by _id: a job removed meanwhile by another process is answered True here
        # too (it is gone either way); a job enqueued meanwhile under one of the ids is kept.
        await self._jobs.delete_many({"_id": {"$in": list(present.values())}})
        await self._deps.ended(queue, [
            (doc["id"], "removed", doc["dependents"]) for doc in found
            if doc.get("dependents") and doc.get("state") in NOT_ENDED
        ])  # fmt: skip
        return [i in present for i in ids]

    @translated
    async def pause(self, queue: str) -> None:
        text(queue, "queue")
        await self._queues.update_one({"_id": queue}, {"$set": {"paused": True}}, upsert=True)

    @translated
    async def resume(self, queue: str) -> None:
        text(queue, "queue")
        await self._queues.update_one({"_id": queue}, {"$set": {"paused": False}})
        self._wakeup.notify()

    @translated
    async def is_paused(self, queue: str) -> bool:
        text(queue, "queue")
        return await self._queues.find_one({"_id": queue, "paused": True}, {"_id": 1}) is not None

    @translated
    async def drain(self, queue: str) -> int:
        text(queue, "queue")
        result = await self._jobs.delete_many({"queue": queue, "state": {"$in": NOT_STARTED}})
        return result.deleted_count

    @translated
    async def clean(self, queue: str, state: JobState, older_than: float) -> int:
        text(queue, "queue")
        if state not in TERMINAL:
            return 0
        query = {"queue": queue, "state": str(state)}
        query |= self._now.compare("finished_at", "$lt", -older_than)
        return (await self._jobs.delete_many(query)).deleted_count

    @translated
    async def obliterate(self, queue: str) -> None:
        text(queue, "queue")
        await self._jobs.delete_many({"queue": queue})
        await self._queues.delete_one({"_id": queue})
        await self._tallies.delete_many({"queue": queue})
        await self._keys.delete_many({"queue": queue})

    @translated
    async def prune_keys(self, queue: str, older_than: float) -> int:
        text(queue, "queue")
        query = {"queue": queue} | self._now.compare("until", "$lt", -older_than)
        forgotten = 0
        async for key in self._keys.find(query, {"holder": 1, "v": 1}):
            holder = await self._jobs.find_one({"queue": queue, "id": key.get("holder")},
                                               {"state": 1})  # fmt: skip
            if holder is not None and holder.get("state") in PENDING_STATES:
                continue
            # Only as read: a key an enqueue took meanwhile has another version.
            gone = await self._keys.delete_one({"_id": key["_id"], "v": key.get("v")})
            forgotten += gone.deleted_count
        return forgotten

    @translated
    async def set_limits(self, queue: str, limits: Limits | None) -> None:
        text(queue, "queue")
        if limits is None or limits.empty:
            await self._queues.update_one({"_id": queue}, {"$unset": {"limits": ""}})
        else:
            stored = {"max_active": limits.max_active, "rate": limits.rate,
                      "per": float(limits.per), "key_rate": limits.key_rate,
                      "key_per": float(limits.key_per)}  # fmt: skip
            await self._queues.update_one({"_id": queue}, {"$set": {"limits": stored}},
                                          upsert=True)  # fmt: skip

    @translated
    async def list_limits(self) -> dict[str, Limits]:
        found: dict[str, Limits] = {}
        async for doc in self._queues.find({"limits": {"$type": "object"}}, {"limits": 1}):
            limits = to_limits(doc)
            if limits is not None:
                found[doc["_id"]] = limits
        return dict(sorted(found.items()))

    @translated
    async def list_queues(self) -> list[str]:
        names = set(await self._jobs.distinct("queue"))
        names |= {doc["_id"] async for doc in self._queues.find({"paused": True}, {"_id": 1})}
        return sorted(n for n in names if isinstance(n, str))

    # -- history ----------------------------------------------------------------------------

    @translated
    async def add_tallies(self, tallies: Sequence[Tally]) -> None:
        ops = [
            UpdateOne(
                {"_id": f"{t.queue}|{t.minute}"},
                {"$inc": {"completed": t.completed, "retried": t.retried, "failed": t.failed},
                 "$setOnInsert": {"queue": t.queue, "minute": t.minute}},
                upsert=True,
            )
            for t in merge_tallies(tallies)
        ]  # fmt: skip
        if ops:
            await self._tallies.bulk_write(ops, ordered=False)

    @translated
    async def tallies(self, queue: str, since: int) -> list[Tally]:
        text(queue, "queue")
        out = []
        async for d in self._tallies.find({"queue": queue, "minute": {"$gte": since}}).sort(
            "minute"
        ):
            with contextlib.suppress(KeyError, TypeError, ValueError):  # a damaged one: skipped
                out.append(Tally(queue, int(d["minute"]), int(d.get("completed", 0)),
                                 int(d.get("retried", 0)), int(d.get("failed", 0))))  # fmt: skip
        return out

    @translated
    async def prune_tallies(self, before: int) -> None:
        await self._tallies.delete_many({"minute": {"$lt": before}})

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
