"""``MongoDBBackend``'s claim: candidates in claim order, taken by one fenced ``update_many``;
a queue with limits takes turns under a lease and counts its allowance."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Final

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from relaymq.backends.mongodb import transitions as tx
from relaymq.backends.mongodb.errors import translated
from relaymq.backends.mongodb.parts import MongoParts
from relaymq.backends.mongodb.records import texts, to_job, to_limits
from relaymq.errors import CorruptRecordError
from relaymq.job import Job
from relaymq.policy import KEY_SCAN, Allowance, KeyBudget, allowance
from relaymq.records.store import ClaimBatch

CLAIM_ROUNDS: Final = 3
LIMITS_LEASE: Final = 10.0
"""Seconds one claim of a queue with limits may take before another may start."""


class MongoClaim(MongoParts):
    @translated
    async def claim(self, queues: Sequence[str], worker_id: str, limit: int) -> ClaimBatch:
        if limit <= 0 or not queues:
            return ClaimBatch([], self._now.local())
        queues = texts(queues, "queue")
        paused, with_limits = await self._gates(queues)
        open_queues = [q for q in dict.fromkeys(queues) if q not in paused]
        claimed = await self._take(
            [q for q in open_queues if q not in with_limits], worker_id, limit
        )
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
                {"_id": queue},
                [{"$set": {"now": self._now.expr()}}],
                projection=dict.fromkeys("limits win used key_window key_used now".split(), 1),
                return_document=ReturnDocument.AFTER,
            )
            limits = to_limits(doc)
            if limits is None or doc is None:
                return await self._take([queue], worker_id, want), None, None
            active = await self._jobs.count_documents({"queue": queue, "state": tx.ACTIVE})
            now = tx.as_date(doc["now"]).timestamp()
            a = allowance(
                limits, active, int(doc.get("win", 0)), int(doc.get("used", 0)), now, want
            )
            budget = None
            if limits.key_rate is not None:
                budget = KeyBudget(
                    limits, int(doc.get("key_window", 0)), dict(doc.get("key_used") or []), now
                )
                jobs = await self._take_within(queue, worker_id, a.take, budget)
            else:
                jobs = await self._take([queue], worker_id, a.take) if a.take > 0 else []
            counted: dict[str, Any] = {"win": a.window, "used": a.used + len(jobs)}
            if budget is not None:
                # [key, starts] pairs: a key may hold '.' or '$', which field names may not
                counted |= {
                    "key_window": budget.window,
                    "key_used": [[k, n] for k, n in budget.used.items()],
                }
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
