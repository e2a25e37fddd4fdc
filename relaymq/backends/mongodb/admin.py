"""``MongoDBBackend``'s admin and observation: jobs by ids, listings and counts, batches by
ids (one ``bulk_write`` each), pause, purges, key pruning and limits."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any, Final

from pymongo import UpdateOne

from relaymq.backends.mongodb import transitions as tx
from relaymq.backends.mongodb.dependencies import NOT_ENDED
from relaymq.backends.mongodb.errors import translated
from relaymq.backends.mongodb.parts import MongoParts
from relaymq.backends.mongodb.records import (
    JOB_FIELDS,
    Document,
    text,
    texts,
    to_job,
    to_job_lenient,
    to_limits,
)
from relaymq.backends.mongodb.sequences import head_document
from relaymq.job import PENDING, TERMINAL, Job, JobState
from relaymq.records.limits import Limits
from relaymq.records.search import JobFilter

IDS_PER_FIND: Final = 200
"""Ids in one ``$in``: the MongoDB-protocol test server refuses a query tree deeper than 1000."""
PENDING_STATES: Final = frozenset(s.value for s in PENDING)
"""The stored names of the states in which a job still holds its throttle or debounce key."""
NOT_STARTED: Final = [str(JobState.BLOCKED), *tx.CLAIMABLE]
"""What ``drain`` deletes (the jobs blocked on those go with them: nothing to tell)."""

CLEAN_BATCH: Final = IDS_PER_FIND
"""Most jobs one delete of ``clean`` removes."""


class MongoAdmin(MongoParts):
    @translated
    async def get_jobs(self, queue: str, ids: Sequence[str]) -> list[Job | None]:
        text(queue, "queue")
        ids = texts(ids, "job_id")
        if not ids:
            return []
        found: dict[str, Job] = {}
        for at in range(0, len(ids), IDS_PER_FIND):  # a bounded $in: servers cap query size
            chunk = list(ids[at : at + IDS_PER_FIND])
            cursor = self._jobs.find({"queue": queue, "id": {"$in": chunk}}, JOB_FIELDS)
            found.update({doc["id"]: to_job(doc) async for doc in cursor})
        return [found.get(i) for i in ids]

    @translated
    async def sequence_head(self, queue: str, sequence: str) -> Job | None:
        """The earliest job of ``sequence`` that holds its place (the ``sequence`` index)."""
        doc = await head_document(
            self._jobs, text(queue, "queue"), text(sequence, "sequence"), JOB_FIELDS
        )
        return None if doc is None else to_job(doc)

    @translated
    async def list_jobs(
        self,
        queue: str,
        state: JobState,
        offset: int = 0,
        limit: int = 100,
        where: JobFilter | None = None,
    ) -> list[Job]:
        order = {
            JobState.WAITING: tx.CLAIM_ORDER,
            JobState.DELAYED: [("ready_at", 1), ("seq", 1)],
            JobState.ACTIVE: [("claimed_at", 1), ("seq", 1)],
        }.get(state, [("finished_at", 1), ("seq", 1)])
        found = {"queue": text(queue, "queue"), "state": str(state)}
        if where is not None:
            found |= tx.matching(where)
        cursor = self._jobs.find(found, JOB_FIELDS).sort(order)
        if where is None or not where.args:
            return [to_job_lenient(doc, state) async for doc in cursor.skip(offset).limit(limit)]
        # The server's cut is wider than the rule (a value in an array, null for a missing
        # key, every number for ~, jobs stored without arguments): the rule decides here.
        jobs: list[Job] = []
        async for doc in cursor:
            job = to_job_lenient(doc, state)
            if not where.matches(job):
                continue
            if offset:
                offset -= 1
                continue
            jobs.append(job)
            if len(jobs) == limit:
                break
        await cursor.close()
        return jobs

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

    @translated
    async def cancel_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        text(queue, "queue")
        ids = texts(ids, "job_id")
        done = await self._stamped(
            queue, ids, {"state": {"$in": tx.LIVE}}, lambda _: tx.cancel_update(self._now)
        )
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
            queue,
            ids,
            {"state": {"$in": tx.RETRYABLE}},
            lambda n: tx.manual_retry_update(first + n, self._now),
        )
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
        found = [
            doc async for doc in self._jobs.find(query, {"id": 1, "state": 1, "dependents": 1})
        ]
        present = {doc["id"]: doc["_id"] for doc in found}
        # Deleted by _id: a job removed meanwhile by another process is answered True here
        # too (it is gone either way); a job enqueued meanwhile under one of the ids is kept.
        await self._jobs.delete_many({"_id": {"$in": list(present.values())}})
        await self._deps.ended(
            queue,
            [
                (doc["id"], "removed", doc["dependents"])
                for doc in found
                if doc.get("dependents") and doc.get("state") in NOT_ENDED
            ],
        )
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
        total = 0
        while True:  # a batch per delete: claims never wait behind a whole purge
            found = self._jobs.find(query, {"_id": 1}).sort("finished_at", 1).limit(CLEAN_BATCH)
            ids = [doc["_id"] async for doc in found]
            if ids:  # still in the state: a job retried meanwhile is not deleted
                gone = {"_id": {"$in": ids}, "state": str(state)}
                total += (await self._jobs.delete_many(gone)).deleted_count
            if len(ids) < CLEAN_BATCH:
                return total

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
            holder = await self._jobs.find_one(
                {"queue": queue, "id": key.get("holder")}, {"state": 1}
            )
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
            stored = {
                "max_active": limits.max_active,
                "rate": limits.rate,
                "per": float(limits.per),
                "key_rate": limits.key_rate,
                "key_per": float(limits.key_per),
                "key_max_active": limits.key_max_active,
                "fair": limits.fair,
                "weights": [[k, n] for k, n in limits.weights],
            }
            await self._queues.update_one({"_id": queue}, {"$set": {"limits": stored}}, upsert=True)

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
