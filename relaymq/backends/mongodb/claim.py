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
from relaymq.backends.mongodb.records import JOB_FIELDS, texts, to_job, to_limits
from relaymq.backends.mongodb.sequences import SequenceGate
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
            if keys_held is not False:
                limited[queue] = keys_held
        now = claimed[0].claimed_at if claimed and claimed[0].claimed_at else self._now.local()
        return ClaimBatch(claimed, now, limited)

    async def _take(
        self,
        open_queues: Sequence[str],
        worker_id: str,
        limit: int,
        decided: float | None = None,
    ) -> list[Job]:
        """Claim up to ``limit`` jobs of ``open_queues`` (unpaused), in the order given
        (``decided``: ``tx.claim_update``'s)."""
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
            got, all_won = await self._claim_ids(ids, worker_id, decided)
            claimed += got
            if all_won:
                break  # no lost races: either the limit is reached or the queues are empty
        return claimed

    async def _claim_ids(
        self, ids: list[Any], worker_id: str, decided: float | None = None
    ) -> tuple[list[Job], bool]:
        """Claim the candidates ``ids`` (document ids) still claimable: the jobs taken, in
        candidate order, and whether every one was."""
        claim_id = uuid.uuid4().hex
        result = await self._jobs.update_many(
            tx.claim_again(ids, self._now),
            tx.claim_update(worker_id, claim_id, self._now, decided),
        )
        got = await self._read_claimed(claim_id, ids) if result.modified_count else []
        return got, result.modified_count == len(ids)

    async def _take_within(
        self,
        queue: str,
        worker_id: str,
        want: int,
        budget: KeyBudget | None,
        gate: SequenceGate | None,
        decided: float | None,
    ) -> list[Job]:
        """Up to ``want`` jobs of ``queue`` in claim order, past those whose limit key has used
        its window or is at its cap, and those that are not their sequence's head (``gate``)
        (``KEY_SCAN`` looked at, at most). A job held by both is held by its key, as in the
        reference."""
        if budget is not None:
            spent = budget.spent()
            if spent and await self._jobs.find_one(
                tx.claimable(queue, self._now) | {"limit_key": {"$in": spent}}, {"_id": 1}
            ):
                budget.held_back = True  # a job of theirs waits, left out of the candidates
        ids: list[Any] = []
        while True:
            query = tx.claimable(queue, self._now)
            if budget is not None:
                query |= {"limit_key": {"$nin": budget.excluded()}}
            cursor = self._jobs.find(query, {"limit_key": 1, "sequence": 1})
            async for doc in cursor.sort(tx.CLAIM_ORDER).limit(KEY_SCAN):
                if len(ids) == want:
                    break
                if doc["_id"] in ids:
                    continue
                key = doc.get("limit_key")
                if budget is not None and budget.refuses(key):
                    continue
                if gate is not None and not await gate.allows(doc):
                    continue
                if budget is None or budget.take(key):
                    ids.append(doc["_id"])
                    if gate is not None:
                        gate.took(doc)
            if len(ids) == want or budget is None or not budget.next_round():
                break  # else: every key with waiting jobs had its turn; look again, a new round
        return (await self._claim_ids(ids, worker_id, decided))[0] if ids else []

    async def _sequence_waiting(self, queue: str) -> bool:
        """Whether a claimable job of a sequence is left (after a claim that came back short:
        one it passed over, not its sequence's head)."""
        query = tx.claimable(queue, self._now) | {"sequence": {"$type": "string"}}
        return await self._jobs.find_one(query, {"_id": 1}) is not None

    async def _claim_limited(
        self, queue: str, worker_id: str, want: int
    ) -> tuple[list[Job], Allowance | None, float | bool | None]:
        """Claim up to ``want`` jobs of ``queue`` within its limits: the jobs, the allowance
        (None: the queue has no limits), and False, or when its keys held jobs back, the
        seconds until the key window ends (None: when active jobs of those keys end, and when
        jobs of sequences held the rest back).

        Without multi-document transactions, the claims of a queue with limits or sequences
        take turns under a lease (``LIMITS_LEASE``): while it is held, another claim of the
        queue takes nothing. A claimer that outlives its lease (paused for that long
        mid-claim) could exceed the cap by its own batch, or start a job of a sequence that
        another claim decided meanwhile; docs/guarantees.md says which."""
        name, owner = f"limits:{queue}", uuid.uuid4().hex
        if not await self._limits_lease(name, owner):
            return [], Allowance(0, 0, 0, None), False  # another claim of this queue is on
        try:
            doc = await self._queues.find_one_and_update(
                {"_id": queue},
                [{"$set": {"now": self._now.expr()}}],
                projection=dict.fromkeys(
                    "limits win used key_window key_used fair_served sequences now".split(), 1
                ),
                return_document=ReturnDocument.AFTER,
            )
            limits = to_limits(doc)
            gate = None
            if doc is not None and doc.get("sequences") is True:
                gate = SequenceGate(self._jobs, queue)
            if (limits is None or doc is None) and gate is None:
                return await self._take([queue], worker_id, want), None, False
            if limits is None or doc is None:  # no allowance: claimed at the server's now
                jobs = await self._take_within(queue, worker_id, want, None, gate, None)
                held_back = await self._sequence_held(queue, gate, len(jobs) < want)
                return jobs, None, None if held_back else False
            active = await self._jobs.count_documents({"queue": queue, "state": tx.ACTIVE})
            now = tx.as_date(doc["now"]).timestamp()
            a = allowance(
                limits, active, int(doc.get("win", 0)), int(doc.get("used", 0)), now, want
            )
            budget = None
            if limits.keyed:
                budget = KeyBudget(
                    limits,
                    int(doc.get("key_window", 0)),
                    dict(doc.get("key_used") or []),
                    now,
                    await self._active_by_key(queue) if limits.key_max_active else {},
                    dict(doc.get("fair_served") or []),
                )
                jobs = await self._take_within(queue, worker_id, a.take, budget, gate, now)
            elif gate is not None and a.take > 0:
                jobs = await self._take_within(queue, worker_id, a.take, None, gate, now)
            else:  # claimed as of ``now``, so each start falls in the window it counts in
                jobs = await self._take([queue], worker_id, a.take, now) if a.take > 0 else []
            counted: dict[str, Any] = {"win": a.window, "used": a.used + len(jobs)}
            if budget is not None:
                # [key, starts] pairs: a key may hold '.' or '$', which field names may not
                counted |= {
                    "key_window": budget.window,
                    "key_used": [[k, n] for k, n in budget.used.items()],
                    "fair_served": [[k, n] for k, n in budget.served.items()],
                }
            await self._queues.update_one({"_id": queue}, {"$set": counted})
            held: float | bool | None = False
            if budget is not None and budget.held_back and len(jobs) < a.take:
                held = budget.retry_in(now)
            elif await self._sequence_held(queue, gate, len(jobs) < a.take):
                held = None
            return jobs, a, held
        finally:
            await self._locks.delete_one({"_id": name, "owner": owner})

    async def _sequence_held(self, queue: str, gate: SequenceGate | None, short: bool) -> bool:
        """Whether jobs of sequences held back a claim that came back ``short``."""
        return gate is not None and short and await self._sequence_waiting(queue)

    async def _active_by_key(self, queue: str) -> dict[str, int]:
        """Limit key -> the active jobs of ``queue`` with that key (stalled ones too)."""
        query = {"queue": queue, "state": tx.ACTIVE, "limit_key": {"$type": "string"}}
        counts: dict[str, int] = {}
        async for doc in self._jobs.find(query, {"limit_key": 1}):
            counts[doc["limit_key"]] = counts.get(doc["limit_key"], 0) + 1
        return counts

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
        docs = {
            doc["_id"]: doc async for doc in self._jobs.find({"claim_id": claim_id}, JOB_FIELDS)
        }
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
