"""``MongoDBBackend``'s enqueue: a batch in one ``insert_many`` per call, and the jobs with a
key rule or dependencies one at a time, in steps ordered so that a crash loses no job."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, Final

from pymongo.errors import BulkWriteError, DuplicateKeyError

from relaymq.backends.mongodb import transitions as tx
from relaymq.backends.mongodb.errors import translated
from relaymq.backends.mongodb.parts import MongoParts
from relaymq.backends.mongodb.records import Document, check_new, new_document
from relaymq.errors import BackendError
from relaymq.job import NewJob
from relaymq.policy import KeyStep, key_step
from relaymq.records.store import Enqueued, dependent, keyed

DUPLICATE_KEY: Final = 11000
KEY_ROUNDS: Final = 50
"""Attempts of one keyed enqueue to move its key before it gives up (heavy contention)."""


class MongoEnqueue(MongoParts):
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
            sequenced = any(jobs[i].sequence is not None for i in indexes)
            first, now = await self._sequences(queue, len(indexes), sequenced)
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
            seq, now = await self._sequences(job.queue, 1, job.sequence is not None)
            held = await self._keys.find_one({"_id": key_id})
            holder = None if held is None else held.get("holder")
            state = None
            if held is not None and holder is not None:
                found = await self._jobs.find_one({"queue": job.queue, "id": holder}, {"state": 1})
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
                )
                replaced = holder if gone is not None else None
                if gone is not None and holder is not None and gone.get("dependents"):
                    await self._deps.ended(job.queue, [(holder, "removed", gone["dependents"])])
            return Enqueued(job.id, replaced=replaced)
        raise BackendError(
            f"key {rule.key!r} of queue {job.queue!r} changed hands "
            f"{KEY_ROUNDS} times while job {job.id!r} was enqueued"
        )

    async def _move_key(self, key_id: str, job: NewJob, held: Document | None, until: Any) -> bool:
        """Give the key to ``job`` unless it changed since it was read as ``held``."""
        fields = {"queue": job.queue, "holder": job.id, "until": until}
        if held is None:
            try:
                await self._keys.insert_one({"_id": key_id, **fields, "v": 1})
            except DuplicateKeyError:
                return False
            return True
        moved = await self._keys.update_one(
            {"_id": key_id, "v": held.get("v")}, {"$set": fields, "$inc": {"v": 1}}
        )
        return moved.modified_count == 1

    async def _enqueue_dependent(self, job: NewJob) -> Enqueued:
        """One job with dependencies (``dependencies.py``): stored blocked, failed or waiting
        as its dependencies stand, then registered with each pending one."""
        seq, now = await self._sequences(job.queue, 1, job.sequence is not None)
        doc = new_document(job, seq, now)
        pending = await self._deps.prepare(job, doc)
        try:
            await self._jobs.insert_one(doc)
        except DuplicateKeyError:
            return Enqueued(job.id, duplicate=True)
        await self._deps.register(job.queue, job.id, pending)
        return Enqueued(job.id)
