"""The history's tallies on Redis: a hash per queue and day (``keys.py``); the global
``tallied`` set lists the days kept, so reading and pruning never scan keys.

A field is ``<minute>:<kind>`` (the queue's own counts) or ``<minute>:<kind>:<task>``: kind
``c``, ``r`` and ``f`` count completed, retried and failed; ``t<i>`` and ``p<i>`` the run times
and pickup latencies in bucket i of ``TIME_BUCKETS``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from relaymq.backends.redis.parts import RedisParts
from relaymq.records.store import TIME_BUCKETS, Tally, add_tally, merge_tallies


class RedisHistory(RedisParts):
    async def add_tallies(self, tallies: Sequence[Tally]) -> None:
        k = self._keys
        commands: list[tuple[Any, ...]] = []
        days: set[tuple[str, int]] = set()
        for t in merge_tallies(tallies):
            key, day = k.tallies(t.queue, t.minute // 1440), t.minute // 1440
            task = f":{t.task}" if t.task else ""
            counts = [("c", t.completed), ("r", t.retried), ("f", t.failed)]
            counts += [(f"t{i}", n) for i, n in enumerate(t.run_times)]
            counts += [(f"p{i}", n) for i, n in enumerate(t.pickups)]
            for kind, n in counts:
                if n:
                    commands.append(("HINCRBY", key, f"{t.minute}:{kind}{task}", n))
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
        found: dict[tuple[int, str], Tally] = {}
        for fields in hashes:
            for field, value in fields.items():
                minute, _, rest = field.decode().partition(":")
                kind, _, task = rest.partition(":")
                if not minute.lstrip("-").isdigit() or int(minute) < since:
                    continue
                one = _one(queue, int(minute), task, kind, int(value))
                if one is not None:
                    old = found.get((one.minute, task))
                    found[(one.minute, task)] = one if old is None else add_tally(old, one)
        return [found[k] for k in sorted(found)]

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


def _one(queue: str, minute: int, task: str, kind: str, n: int) -> Tally | None:
    """The tally one field counts (``kind`` as in the module's docstring); None for a field
    that is not one."""
    if kind in ("c", "r", "f"):
        c, r, f = (n if kind == k else 0 for k in "crf")
        return Tally(queue, minute, c, r, f, task)
    if kind[:1] in ("t", "p") and kind[1:].isdigit() and int(kind[1:]) <= len(TIME_BUCKETS):
        histogram = tuple(n if i == int(kind[1:]) else 0 for i in range(int(kind[1:]) + 1))
        if kind[0] == "t":
            return Tally(queue, minute, task=task, run_times=histogram)
        return Tally(queue, minute, task=task, pickups=histogram)
    return None
