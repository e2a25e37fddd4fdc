"""What the parts of ``RedisBackend`` share: its key layout, its transport and its clock
(the base of ``RedisHistory`` and ``RedisMeta``, which ``RedisBackend`` is made of)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from relaymq.backends.redis.keys import Keys
from relaymq.backends.redis.records import num
from relaymq.backends.redis.transport import Transport
from relaymq.records.store import Clock

ENQUEUE_CHUNK = 1000
"""Jobs per enqueue script call: bounds how long one call holds the server."""
CLAIM_CHUNK = 1000
"""Most jobs one claim script call takes (a larger limit takes several calls)."""
SETTLE_CHUNK = 1000
"""Most transitions or heartbeats in one script call."""
PROMOTE_MAX = 1000
"""Delayed jobs promoted per queue per claim; the rest are promoted by the next claims."""
SCAN_CHUNK = 500
"""Jobs examined per recovery or purge script call (the caller loops while chunks are full)."""
PRUNE_CHUNK = 500
"""Keys examined per ``prune_keys.lua`` call."""
PRUNE_CALLS = 20
"""Most ``prune_keys.lua`` calls of one pruning (the next pass goes on from the start)."""


class RedisParts:
    _keys: Keys
    _clock: Clock | None
    _t: Transport
    _run: Callable[[Sequence[tuple[Any, ...]], str], Awaitable[list[Any]]]
    _script: Callable[[str, Sequence[str], Sequence[Any]], Awaitable[Any]]
    _evalsha: Callable[[str, Sequence[str], Sequence[Any]], tuple[Any, ...]]

    def _now(self) -> str:
        """The ``now`` argument of every script: the test clock's reading, or '' for TIME."""
        return num(self._clock()) if self._clock is not None else ""
