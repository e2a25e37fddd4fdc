"""The meta store on Redis: a hash per record and an index of their keys, in the meta slot
(``keys.py``), one script per operation (``scripts/meta_*.lua``)."""

from __future__ import annotations

import math

from relaymq.backends.redis.parts import RedisParts
from relaymq.backends.redis.records import meta_record, num
from relaymq.records.meta import MetaRecord


class RedisMeta(RedisParts):
    def _lapse(self, ttl: float | None) -> tuple[str, str]:
        """The ``ttl`` and clean-up expiry (ms) arguments of a meta write. Under a test clock
        the hash outlives its lapse by a day: the server's own clock does not follow it."""
        if ttl is None:
            return "", ""
        keep = max(ttl, 86_400.0) if self._clock is not None else ttl
        return num(ttl), str(max(math.ceil(keep * 1000) + 1000, 1000))

    async def meta_get(self, key: str) -> MetaRecord | None:
        reply = await self._script("meta_get", [self._keys.meta_record(key)], [self._now()])
        return None if reply is None else meta_record(key, *reply)

    async def meta_put(self, key: str, value: bytes, ttl: float | None = None) -> None:
        k = self._keys
        await self._script(
            "meta_put",
            [k.meta_index, k.meta_record(key)],
            [self._now(), key, value, *self._lapse(ttl)],
        )

    async def meta_swap(
        self, key: str, expected: int | None, value: bytes, ttl: float | None = None
    ) -> bool:
        k = self._keys
        args = [self._now(), key, "" if expected is None else expected, value, *self._lapse(ttl)]
        return bool(await self._script("meta_swap", [k.meta_index, k.meta_record(key)], args))

    async def meta_list(self, prefix: str) -> list[MetaRecord]:
        k = self._keys
        reply = await self._script(
            "meta_list", [k.meta_index, k.meta_prefix], [self._now(), prefix]
        )
        return [
            meta_record(reply[i].decode(), *reply[i + 1 : i + 4]) for i in range(0, len(reply), 4)
        ]

    async def meta_delete(self, key: str) -> bool:
        k = self._keys
        return bool(
            await self._script(
                "meta_delete", [k.meta_index, k.meta_record(key)], [self._now(), key]
            )
        )
