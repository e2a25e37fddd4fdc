"""What the parts of ``MongoDBBackend`` share: its collections, its clock and wake-up, and the
reads and writes several of them make (the base of ``MongoEnqueue``, ``MongoClaim``,
``MongoAdmin`` and ``MongoHistory``, which ``MongoDBBackend`` is made of)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection

from relaymq.backends.mongodb import transitions as tx
from relaymq.backends.mongodb.dependencies import Dependencies
from relaymq.backends.mongodb.records import Document, describe, problems
from relaymq.backends.wakeup import Wakeup
from relaymq.errors import BackendError

RECOVER_BATCH: Final = 500
"""Most jobs of a queue one recovery, or one quarantine of unknown states, looks at."""


class MongoParts:
    where: str
    _now: tx.Now
    _wakeup: Wakeup
    _jobs: AsyncCollection[Document]
    _queues: AsyncCollection[Document]
    _tallies: AsyncCollection[Document]
    _locks: AsyncCollection[Document]
    _keys: AsyncCollection[Document]
    _deps: Dependencies

    async def _sequences(self, queue: str, count: int, sequenced: bool = False) -> tuple[int, Any]:
        """Reserve ``count`` FIFO sequences of ``queue``: (first, backend now as a date).
        ``sequenced``: a job of a sequence is among them, so the queue is marked as one whose
        claims take turns (``sequences: true``, never unset)."""
        doc = await self._queues.find_one_and_update(
            {"_id": queue},
            tx.next_sequence(count, self._now, sequenced),
            upsert=True,
            projection={"seq": 1, "now": 1},
            return_document=ReturnDocument.AFTER,
        )
        if doc is None:
            raise BackendError(f"could not reserve FIFO sequences for queue {queue!r}")
        return int(doc["seq"]) - count + 1, tx.as_date(doc["now"])

    async def _gates(self, queues: Sequence[str]) -> tuple[set[str], set[str]]:
        """Of ``queues``, the paused ones and the ones whose claims take turns: with limits,
        or with jobs of sequences (one read)."""
        cursor = self._queues.find(
            {"_id": {"$in": list(queues)}}, {"paused": 1, "limits": 1, "sequences": 1}
        )
        paused: set[str] = set()
        with_limits: set[str] = set()
        async for doc in cursor:
            if doc.get("paused") is True:
                paused.add(doc["_id"])
            if doc.get("limits") or doc.get("sequences") is True:
                with_limits.add(doc["_id"])
        return paused, with_limits

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
