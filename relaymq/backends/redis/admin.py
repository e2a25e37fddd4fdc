"""``RedisBackend``'s admin: batches by ids, pause, purges (drain, clean, obliterate), key
pruning and limits, each one script or one pipeline."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from relaymq.backends.redis.history import RedisHistory
from relaymq.backends.redis.keys import STATE_SUFFIXES, WAKE_MAX
from relaymq.backends.redis.parts import PRUNE_CALLS, PRUNE_CHUNK, SCAN_CHUNK, SETTLE_CHUNK
from relaymq.backends.redis.records import num
from relaymq.job import TERMINAL, JobState
from relaymq.records.limits import Limits


class RedisAdmin(RedisHistory):
    async def cancel_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        answers = await self._batch("cancel_jobs", queue, [self._now()], ids)
        return [a == b"cancelled" for a in answers]

    async def retry_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        return [a == 1 for a in await self._batch("retry_jobs", queue, [self._now()], ids)]

    async def remove_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        return [a == 1 for a in await self._batch("remove_jobs", queue, [self._now()], ids)]

    async def _batch(
        self, script: str, queue: str, head: list[Any], ids: Sequence[str]
    ) -> list[Any]:
        """One admin script over ``ids`` (chunks of ``SETTLE_CHUNK`` in one pipeline): its
        answer per id."""
        if not ids:
            return []
        base = self._keys.base(queue)
        chunks = [list(ids[at : at + SETTLE_CHUNK]) for at in range(0, len(ids), SETTLE_CHUNK)]
        replies = await self._run(
            [self._evalsha(script, [base], [*head, *chunk]) for chunk in chunks], script
        )
        return [answer for reply in replies for answer in reply]

    async def pause(self, queue: str) -> None:
        await self._run(
            [("SET", self._keys.paused(queue), "1"), ("SADD", self._keys.queues, queue)], "pause"
        )

    async def resume(self, queue: str) -> None:
        wake = self._keys.wake(queue)
        await self._run(
            [
                ("DEL", self._keys.paused(queue)),
                ("LPUSH", wake, *["1"] * WAKE_MAX),
                ("LTRIM", wake, 0, WAKE_MAX - 1),
            ],
            "resume",
        )

    async def is_paused(self, queue: str) -> bool:
        [n] = await self._run([("EXISTS", self._keys.paused(queue))], "is_paused")
        return bool(n)

    async def _purge(self, queue: str, state: str, older_than: float | None = None) -> int:
        base = self._keys.base(queue)
        age = "" if older_than is None else num(older_than)
        total = 0
        while True:
            n = int(await self._script("purge", [base], [state, age, self._now(), SCAN_CHUNK]))
            total += n
            if n < SCAN_CHUNK:
                return total

    async def drain(self, queue: str) -> int:
        return sum([await self._purge(queue, s) for s in ("blocked", "waiting", "delayed")])

    async def clean(self, queue: str, state: JobState, older_than: float) -> int:
        if state not in TERMINAL:
            return 0
        return await self._purge(queue, state.value, older_than)

    async def obliterate(self, queue: str) -> None:
        for state in STATE_SUFFIXES:
            await self._purge(queue, state)
        k = self._keys
        await self._adopt_days([queue])
        days = [(d, member) for d, q, member in await self._tallied() if q == queue]
        await self._run(
            [
                (
                    "DEL",
                    k.meta(queue),
                    k.paused(queue),
                    k.wake(queue),
                    *k.job_keys(queue),
                    k.limits(queue),
                    *k.sequences(queue),
                    k.cascade_days(queue),
                    *(k.tallies(queue, d) for d, _ in days),
                ),
                ("SREM", k.queues, queue),
                *(("SREM", k.tallied, member) for _, member in days),
            ],
            "obliterate",
        )

    async def prune_keys(self, queue: str, older_than: float) -> int:
        forgotten, skip = 0, 0
        for _ in range(PRUNE_CALLS):  # keys still held stay in front: look past them
            args = [self._now(), older_than, skip, PRUNE_CHUNK]
            gone, examined = await self._script("prune_keys", [self._keys.base(queue)], args)
            forgotten += int(gone)
            skip += int(examined) - int(gone)
            if int(examined) < PRUNE_CHUNK:
                break
        return forgotten

    async def set_limits(self, queue: str, limits: Limits | None) -> None:
        key = self._keys.limits(queue)
        if limits is None or limits.empty:
            await self._run([("DEL", key)], "set_limits")
            return
        fields = {
            "max_active": limits.max_active,
            "rate": limits.rate,
            "per": num(limits.per),
            "key_rate": limits.key_rate,
            "key_per": num(limits.key_per),
            "key_max_active": limits.key_max_active,
            "fair": 1 if limits.fair else None,
            "weights": json.dumps(limits.weights) if limits.fair else None,
        }
        # fair_skip: the jobs passed over for their key's turn are looked at again (weights
        # may have changed; claim.lua)
        unset = [f for f, v in fields.items() if v is None] + ["fair_skip"]
        await self._run(
            [
                ("SADD", self._keys.queues, queue),  # list_limits finds it there
                ("HSET", key, *(x for f, v in fields.items() if v is not None for x in (f, v))),
                ("HDEL", key, *unset),
            ],
            "set_limits",
        )

    async def list_limits(self) -> dict[str, Limits]:
        [members] = await self._run([("SMEMBERS", self._keys.queues)], "list_limits")
        names = sorted(m.decode() for m in members)
        if not names:
            return {}
        found = await self._run(
            [
                (
                    "HMGET",
                    self._keys.limits(q),
                    "max_active",
                    "rate",
                    "per",
                    "key_rate",
                    "key_per",
                    "key_max_active",
                    "fair",
                    "weights",
                )
                for q in names
            ],
            "list_limits",
        )
        return {
            q: Limits(
                max_active=_opt_int(m),
                rate=_opt_int(r),
                per=float(p),
                key_rate=_opt_int(kr),
                key_per=float(kp or b"1"),
                key_max_active=_opt_int(km),
                fair=f is not None,
                weights=tuple((k, n) for k, n in json.loads(w or b"[]")),
            )
            for q, (m, r, p, kr, kp, km, f, w) in zip(names, found, strict=True)
            if p is not None
        }

    async def list_queues(self) -> list[str]:
        [members] = await self._run([("SMEMBERS", self._keys.queues)], "list_queues")
        names = sorted(m.decode() for m in members)
        if not names:
            return []
        k = self._keys
        probes = [("EXISTS", *(k.state(q, s) for s in STATE_SUFFIXES), k.paused(q)) for q in names]
        found = await self._run(probes, "list_queues")
        return [q for q, n in zip(names, found, strict=True) if n]


def _opt_int(raw: bytes | None) -> int | None:
    return None if raw is None else int(raw)
