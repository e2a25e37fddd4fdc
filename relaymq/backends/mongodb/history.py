"""The history's tallies on MongoDB: a document per queue and minute in ``tallies``."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from pymongo import UpdateOne

from relaymq.backends.mongodb.errors import translated
from relaymq.backends.mongodb.parts import MongoParts
from relaymq.backends.mongodb.records import text
from relaymq.records.store import Tally, merge_tallies


class MongoHistory(MongoParts):
    @translated
    async def add_tallies(self, tallies: Sequence[Tally]) -> None:
        ops = [
            UpdateOne(
                {"_id": f"{t.queue}|{t.minute}"},
                {
                    "$inc": {"completed": t.completed, "retried": t.retried, "failed": t.failed},
                    "$setOnInsert": {"queue": t.queue, "minute": t.minute},
                },
                upsert=True,
            )
            for t in merge_tallies(tallies)
        ]
        if ops:
            await self._tallies.bulk_write(ops, ordered=False)

    @translated
    async def tallies(self, queue: str, since: int) -> list[Tally]:
        text(queue, "queue")
        out = []
        cursor = self._tallies.find({"queue": queue, "minute": {"$gte": since}}).sort("minute")
        async for d in cursor:
            with contextlib.suppress(KeyError, TypeError, ValueError):  # a damaged one: skipped
                minute = int(d["minute"])
                counts = [int(d.get(k, 0)) for k in ("completed", "retried", "failed")]
                out.append(Tally(queue, minute, *counts))
        return out

    @translated
    async def prune_tallies(self, before: int) -> None:
        await self._tallies.delete_many({"minute": {"$lt": before}})
