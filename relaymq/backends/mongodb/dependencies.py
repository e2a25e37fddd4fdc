"""Jobs that wait for other jobs, on MongoDB, which has no multi-document transactions.

A blocked job lists the dependencies it still waits for (``waiting_on``); a dependency lists
the jobs blocked on it (``dependents``). When a dependency ends, each dependent pulls it from
``waiting_on`` with a conditional update, so an end is never counted twice; the update that
empties the list is followed by the one that makes the job delayed, due at once, with a FIFO
sequence taken at its release: it became ready then, so among the jobs ready at the same moment
it comes after those already in line (the jobs a retry put back by the same settle). Under the
FAIL policy, a dependency that did not complete fails the dependent instead, in one
conditional update, and the dependent's own dependents learn it in turn.

What one step leaves undone when a process dies between two (a dependency ended but its
dependents were not told; a list emptied but the job not released), or when a dependent is
enqueued just as its dependency ends in a process that did not know of blocked jobs yet, is
mended by ``repair``: the elected maintenance runs it with each stalled-recovery pass. So a
blocked job is released at the latest one pass after its last dependency ended.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final

from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection

from relaymq.backends.mongodb.records import Document, to_seconds
from relaymq.backends.mongodb.transitions import Now, literal
from relaymq.job import DependencyPolicy, JobState, NewJob
from relaymq.policy import DependentStep, dependencies_at_enqueue, dependency_ended

BLOCKED: Final = str(JobState.BLOCKED)
NOT_ENDED: Final = [BLOCKED, str(JobState.WAITING), str(JobState.DELAYED), str(JobState.ACTIVE)]
ENDED: Final = frozenset(
    str(s) for s in (JobState.COMPLETED, JobState.FAILED, JobState.EXPIRED, JobState.CANCELLED)
)
REFRESH: Final = 1.0
"""Seconds a handle trusts what it last read of whether a queue has blocked jobs."""
REPAIR_BATCH: Final = 500
WITH_DEPENDENTS: Final = {"dependents": {"$type": "array", "$ne": []}}

Sequences = Callable[[str, int], Awaitable[tuple[int, Any]]]
"""Reserves FIFO sequences of a queue: (queue, count) -> (first, now)."""

End = tuple[str, str, Sequence[str]]
"""A dependency that ended: its id, its state ('removed': deleted before it ended), and the
jobs blocked on it."""


class Dependencies:
    def __init__(
        self,
        jobs: AsyncCollection[Document],
        now: Now,
        sequences: Sequences,
        tallies: AsyncCollection[Document] | None = None,
    ) -> None:
        self._jobs = jobs
        self._sequences = sequences
        self._tallies = tallies
        """The history (``add_tallies``' collection): a job failed by its dependency counts in
        it here, as no worker writes that outcome."""
        self._now = now
        self._blocked: dict[str, tuple[float, bool]] = {}

    async def any_blocked(self, queue: str) -> bool:
        """Whether ``queue`` has blocked jobs, as read at most ``REFRESH`` seconds ago. A settle
        asks it before looking for dependents to tell: queues without any pay nothing more."""
        seen = self._blocked.get(queue)
        if seen is not None and time.monotonic() - seen[0] < REFRESH:
            return seen[1]
        found = await self._jobs.find_one({"queue": queue, "state": BLOCKED}, {"_id": 1})
        self._blocked[queue] = (time.monotonic(), found is not None)
        return found is not None

    # -- enqueue ------------------------------------------------------------------------------

    async def prepare(self, job: NewJob, doc: Document) -> list[str]:
        """Make ``doc`` (the new job's document, not yet stored) what
        ``relaymq.policy.dependencies_at_enqueue`` says: blocked, failed, or left waiting.
        Returns the dependencies to register the job with once it is stored (``register``)."""
        ids = list(dict.fromkeys(job.depends_on))
        states = await self._states(job.queue, ids)
        start = dependencies_at_enqueue(ids, states, job.on_dependency_failure)
        doc["depends_on"] = list(job.depends_on)
        doc["dep_policy"] = job.on_dependency_failure.value
        if start.step is DependentStep.FAILED:
            doc.update(state=str(JobState.FAILED), finished_at=doc["created_at"], error=start.error)
        elif start.step is DependentStep.BLOCKED:
            doc.update(state=BLOCKED, waiting_on=list(start.waits_for))
            self._blocked[job.queue] = (time.monotonic(), True)
        return list(start.waits_for)

    async def register(self, queue: str, job_id: str, pending: Iterable[str]) -> None:
        """Add the stored job to the ``dependents`` of each pending dependency; one that ended
        meanwhile (the conditional update finds it no longer pending) is counted here."""
        for dep in pending:
            added = await self._jobs.update_one(
                {"queue": queue, "id": dep, "state": {"$in": NOT_ENDED}},
                {"$addToSet": {"dependents": job_id}},
            )
            if added.matched_count == 0:
                found = await self._jobs.find_one({"queue": queue, "id": dep}, {"state": 1})
                state = found.get("state", "") if found is not None else "removed"
                await self.ended(queue, [(dep, state, [job_id])])

    # -- ends ---------------------------------------------------------------------------------

    async def ended_among(self, queue: str, ids: Sequence[str]) -> None:
        """Tell the dependents of those of ``ids`` that have ended (after a settle, a cancel,
        a recovery that failed jobs)."""
        if not ids:
            return
        query = {
            "queue": queue,
            "id": {"$in": list(ids)},
            "state": {"$in": list(ENDED)},
            **WITH_DEPENDENTS,
        }
        fields = {"id": 1, "state": 1, "dependents": 1}
        found = [
            (d["id"], d["state"], d["dependents"]) async for d in self._jobs.find(query, fields)
        ]
        await self.ended(queue, found)

    async def ended(self, queue: str, ends: Iterable[End]) -> None:
        work = list(ends)
        while work:
            dep, state, waiters = work.pop()
            for waiter in waiters:
                failed = await self._count(queue, waiter, dep, state)
                if failed is not None:
                    work.append((waiter, str(JobState.FAILED), failed))
            if state != "removed":
                await self._jobs.update_one(
                    {"queue": queue, "id": dep}, {"$unset": {"dependents": ""}}
                )

    async def _count(self, queue: str, waiter: str, dep: str, state: str) -> list[str] | None:
        """``waiter`` counts ``dep``'s end as ``relaymq.policy.dependency_ended`` says; the
        dependents of ``waiter`` when that failed it. Each write is conditional on ``waiter``
        still waiting for ``dep``, so an end is counted once."""
        here = {"queue": queue, "id": waiter, "state": BLOCKED, "waiting_on": dep}
        found = await self._jobs.find_one(here, {"dep_policy": 1, "waiting_on": 1})
        if found is None:
            return None
        end = dependency_ended(
            dep,
            None if state == "removed" else state,
            _policy(found.get("dep_policy")),
            len(found.get("waiting_on") or []),
        )
        if end.step is DependentStep.FAILED:
            fail = {
                "state": str(JobState.FAILED),
                "waiting_on": [],
                "error": literal(end.error),
                "finished_at": self._now.expr(),
            }
            failed = await self._jobs.find_one_and_update(
                here,
                [{"$set": fail}],
                projection={"dependents": 1, "finished_at": 1},
                return_document=ReturnDocument.AFTER,
            )
            if failed is None:
                return None
            await self._tally_failure(queue, failed.get("finished_at"))
            return list(failed.get("dependents") or [])
        # BLOCKED or DUE: the pull counts the end; the list it leaves says whether it was the
        # last (another end may have been counted since the read: DUE then, not BLOCKED).
        left = await self._jobs.find_one_and_update(
            here,
            {"$pull": {"waiting_on": dep}},
            projection={"waiting_on": 1},
            return_document=ReturnDocument.AFTER,
        )
        if left is not None and not left.get("waiting_on"):
            await self._release(queue, waiter)
        return None

    async def _tally_failure(self, queue: str, at: Any) -> None:
        """Count a job failed by its dependency at ``at`` in the history's failed: a write of
        its own, as every step here (a crash right before it loses one count of a chart)."""
        if self._tallies is None:
            return
        seconds = to_seconds(at) if isinstance(at, dt.datetime) else self._now.local()
        minute = int(seconds // 60)
        await self._tallies.update_one(
            {"_id": f"{queue}|{minute}"},
            {
                "$inc": {"completed": 0, "retried": 0, "failed": 1},
                "$setOnInsert": {"queue": queue, "minute": minute},
            },
            upsert=True,
        )

    async def _states(self, queue: str, ids: list[str]) -> dict[str, Any]:
        """The stored state of each of ``ids`` that exists."""
        found = self._jobs.find({"queue": queue, "id": {"$in": ids}}, {"id": 1, "state": 1})
        return {d["id"]: d.get("state") async for d in found}

    async def _release(self, queue: str, job_id: str) -> None:
        """Due at once, behind the jobs already in line (a sequence a crash leaves unused is
        only a gap)."""
        seq, _ = await self._sequences(queue, 1)
        released = {"state": str(JobState.DELAYED), "ready_at": self._now.expr(), "seq": seq}
        await self._jobs.update_one(
            {"queue": queue, "id": job_id, "state": BLOCKED, "waiting_on": []},
            [{"$set": released}],
        )

    # -- repair -------------------------------------------------------------------------------

    async def repair(self, queue: str) -> int:
        """Finish what crashed processes left undone for ``queue``'s blocked jobs (see the
        module's docstring); how many dependency ends it counted or jobs it released."""
        page = (
            await self._jobs.find({"queue": queue, "state": BLOCKED}, {"id": 1, "waiting_on": 1})
            .limit(REPAIR_BATCH)
            .to_list()
        )
        mended = 0
        waited: set[str] = set()
        for doc in page:
            if not doc.get("waiting_on"):
                await self._release(queue, doc["id"])
                mended += 1
            waited.update(doc.get("waiting_on") or [])
        if not waited:
            return mended
        states = await self._states(queue, list(waited))
        for doc in page:
            for dep in doc.get("waiting_on") or []:
                state = states.get(dep, "removed")
                if state not in NOT_ENDED:
                    await self.ended(queue, [(dep, state, [doc["id"]])])
                    mended += 1
        return mended


def _policy(value: Any) -> DependencyPolicy:
    """A stored dependency policy (absent or unknown: the default, FAIL)."""
    known = {p.value for p in DependencyPolicy}
    return DependencyPolicy(value) if value in known else DependencyPolicy.FAIL
