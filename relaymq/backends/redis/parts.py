"""What the parts of ``RedisBackend`` share: its key layout, its transport and its clock
(the base of ``RedisHistory`` and ``RedisMeta``, which ``RedisBackend`` is made of)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from relaymq.backends.redis.keys import Keys
from relaymq.backends.redis.records import num
from relaymq.backends.redis.transport import Transport
from relaymq.records.store import Clock


class RedisParts:
    _keys: Keys
    _clock: Clock | None
    _t: Transport
    _run: Callable[[Sequence[tuple[Any, ...]], str], Awaitable[list[Any]]]
    _script: Callable[[str, Sequence[str], Sequence[Any]], Awaitable[Any]]

    def _now(self) -> str:
        """The ``now`` argument of every script: the test clock's reading, or '' for TIME."""
        return num(self._clock()) if self._clock is not None else ""
