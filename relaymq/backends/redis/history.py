"""The history's tallies on Redis: a hash per queue and day (``keys.py``); the global
``tallied`` set lists the days kept, so reading and pruning never scan keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from relaymq.backends.redis.parts import RedisParts
from relaymq.records.store import Tally, merge_tallies


class RedisHistory(RedisParts):
    async def add_tallies(self, tallies: Sequence[Tally]) -> None:
        k = self._keys
        commands: list[tuple[Any, ...]] = []
        days: set[tuple[str, int]] = set()
        for t in merge_tallies(tallies):
            key, day = k.tallies(t.queue, t.minute // 1440), t.minute // 1440
            for suffix, n in (("c", t.completed), ("r", t.retried), ("f", t.failed)):
                if n:
                    commands.append(("HINCRBY", key, f"{t.minute}:{suffix}", n))
            days.add((t.queue, day))
        if commands:
            commands.append(("SADD", k.tallied, *(f"{d}|{q}" for q, d in sorted(days))))
            await self._run(commands, "add_tallies")

    async def tallies(self, queue: str, since: int) -> list[Tally]:
        await self._adopt_days([queue])
        days = sorted(d for d, q, _ in await self._tallied() if q == queue and d >= since // 1440)
        if not days:
            return []
        hashes = await self._run(
            [("HGETALL", self._keys.tallies(queue, d)) for d in days], "tallies"
        )
        minutes: dict[int, list[int]] = {}
        for fields in hashes:
            for field, value in fields.items():
                minute, _, kind = field.decode().partition(":")
                if kind in ("c", "r", "f") and minute.lstrip("-").isdigit():
                    minutes.setdefault(int(minute), [0, 0, 0])["crf".index(kind)] = int(value)
        return [Tally(queue, m, *minutes[m]) for m in sorted(minutes) if m >= since]

    async def prune_tallies(self, before: int) -> None:
        [queues] = await self._run([("SMEMBERS", self._keys.queues)], "prune_tallies")
        await self._adopt_days(sorted(q.decode() for q in queues))
        gone = [
            (d, q, member) for d, q, member in await self._tallied() if (d + 1) * 1440 <= before
        ]
        if gone:
            k = self._keys
            await self._run(
                [
                    *(("DEL", k.tallies(q, d)) for d, q, _ in gone),
                    ("SREM", k.tallied, *(m for _, _, m in gone)),
                ],
                "prune_tallies",
            )

    async def _adopt_days(self, queues: Sequence[str]) -> None:
        """The days a dependency cascade counted in (each queue's ``cascade_days``: a per-queue
        script cannot reach the global slot) join the global ``tallied`` index, which reads and
        pruning go by; added there before they leave the queue's own set."""
        k = self._keys
        if not queues:
            return
        found = await self._run([("SMEMBERS", k.cascade_days(q)) for q in queues], "tallied")
        moves: list[tuple[Any, ...]] = []
        for queue, days in zip(queues, found, strict=True):
            if days:
                moves.append(("SADD", k.tallied, *(f"{d.decode()}|{queue}" for d in days)))
                moves.append(("SREM", k.cascade_days(queue), *days))
        if moves:
            await self._run(moves, "tallied")

    async def _tallied(self) -> list[tuple[int, str, bytes]]:
        """Every history day kept: (day, queue, its member of the ``tallied`` set)."""
        [members] = await self._run([("SMEMBERS", self._keys.tallied)], "tallied")
        out = []
        for m in members:
            day, _, queue = m.decode().partition("|")
            if queue and day.lstrip("-").isdigit():
                out.append((int(day), queue, m))
        return out
