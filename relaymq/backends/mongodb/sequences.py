"""``MongoDBBackend``'s sequences (``relaymq.policy.sequence_head``): which job of a sequence a
claim may take, read from the ``sequence`` index; the claims of a queue with sequences take
turns under its lease (``claim.py``), as the claims of a queue with limits do, so two
claims never decide a sequence at once."""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

from relaymq.backends.mongodb import transitions as tx
from relaymq.backends.mongodb.records import Document
from relaymq.job import SequenceFailure
from relaymq.policy import DEAD, SEQUENCE_HOLDS

BY_PLACE = [("sequence_pos", 1)]


def holding(queue: str, sequence: str) -> Document:
    """The jobs of ``sequence`` that hold their place (``relaymq.policy.holds_sequence``)."""
    return {
        "queue": queue,
        "sequence": sequence,
        "$or": [
            {"state": {"$in": sorted(str(s) for s in SEQUENCE_HOLDS)}},
            {
                "state": {"$in": sorted(str(s) for s in DEAD)},
                "seq_failure": {"$ne": SequenceFailure.CONTINUE.value},
            },
        ],
    }


async def head_document(
    jobs: AsyncCollection[Document], queue: str, sequence: str, projection: Any = None
) -> Document | None:
    """The earliest job of ``sequence`` (enqueue order) that holds its place, or None."""
    return await jobs.find_one(holding(queue, sequence), projection, sort=BY_PLACE)


class SequenceGate:
    """One claim's decisions on the sequences of one queue: each sequence is read once (its
    head, and whether a job of it is active), and once the claim takes a job of a sequence
    it takes no other of it."""

    def __init__(self, jobs: AsyncCollection[Document], queue: str) -> None:
        self._jobs = jobs
        self._queue = queue
        self._free: dict[str, Any] = {}
        """A sequence -> the ``_id`` of the one job of it the claim may take, or None."""
        self.held_back = False
        """Whether a job was passed over: not its sequence's head, or one of it is active."""

    async def allows(self, doc: Document) -> bool:
        """Whether the claimable job ``doc`` may start as far as its sequence goes."""
        sequence = doc.get("sequence")
        if not isinstance(sequence, str):
            return True
        if sequence not in self._free:
            self._free[sequence] = await self._head(sequence)
        if self._free[sequence] == doc["_id"]:
            return True
        self.held_back = True
        return False

    def took(self, doc: Document) -> None:
        """The claim takes ``doc``: no other job of its sequence may start in it."""
        if isinstance(doc.get("sequence"), str):
            self._free[doc["sequence"]] = None

    async def _head(self, sequence: str) -> Any:
        """The ``_id`` of the sequence's head when none of it is active, else None (the head
        found is claimable: a candidate of this claim is only ever compared with it)."""
        query = {"queue": self._queue, "sequence": sequence, "state": tx.ACTIVE}
        if await self._jobs.find_one(query, {"_id": 1}):
            return None
        head = await head_document(self._jobs, self._queue, sequence, {"_id": 1})
        return None if head is None else head["_id"]
