"""The history's tallies on MongoDB: a document per queue and minute in ``tallies``."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from pymongo import UpdateOne

from relaymq.backends.mongodb.errors import translated
from relaymq.backends.mongodb.parts import MongoParts
from relaymq.backends.mongodb.records import text
from relaymq.records.store import Tally, merge_tallies


class MongoHistory(MongoParts):
    @translated
    async def add_tallies(self, tallies: Sequence[Tally]) -> None:
        ops = []
        for t in merge_tallies(tallies):
            counts = {"completed": t.completed, "retried": t.retried, "failed": t.failed}
            counts |= {f"t.{i}": n for i, n in enumerate(t.run_times) if n}
            counts |= {f"p.{i}": n for i, n in enumerate(t.pickups) if n}
            ops.append(
                UpdateOne(  # a task's minute is a document of its own; "" keeps the old _id
                    {"_id": f"{t.queue}|{t.minute}" + (f"|{t.task}" if t.task else "")},
                    {
                        "$inc": counts,
                        "$setOnInsert": {"queue": t.queue, "minute": t.minute, "task": t.task},
                    },
                    upsert=True,
                )
            )
        if ops:
            await self._tallies.bulk_write(ops, ordered=False)

    @translated
    async def tallies(self, queue: str, since: int) -> list[Tally]:
        text(queue, "queue")
        out = []
        cursor = self._tallies.find({"queue": queue, "minute": {"$gte": since}})
        async for d in cursor:
            with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):
                minute = int(d["minute"])  # a damaged document is skipped
                tally = Tally(
                    queue,
                    minute,
                    int(d.get("completed", 0)),
                    int(d.get("retried", 0)),
                    int(d.get("failed", 0)),
                    str(d.get("task") or ""),
                    _histogram(d.get("t")),
                    _histogram(d.get("p")),
                )
                out.append(tally)
        return sorted(out, key=lambda t: (t.minute, t.task))

    @translated
    async def prune_tallies(self, before: int) -> None:
        await self._tallies.delete_many({"minute": {"$lt": before}})


def _histogram(stored: Any) -> tuple[int, ...]:
    """A stored histogram (a document of bucket index -> count) as counts per bucket."""
    if not stored:
        return ()
    counts = {int(i): int(n) for i, n in dict(stored).items()}
    return tuple(counts.get(i, 0) for i in range(max(counts) + 1))
