"""The meta store seam: small records about the system, not job transitions.

Schedules, the worker registry and the leases that elect maintenance and the scheduler are
written once, above this seam (``relaymq.schedules.store``, ``relaymq.registry``), on five
operations every backend implements: get, put, compare-and-set, list by prefix and delete of a
small record under a string key. A record may carry a time to live; whether it has lapsed is
decided on the backend's clock (the server's, or the test clock given to the backend), so
processes with skewed clocks agree. A lapsed record is absent to every operation.

Each write gives the record a new ``version``; ``meta_swap`` writes only while the stored
version is the one the caller read, so read-modify-write above the seam is safe between
processes. ``lease`` is built on the two, once, here.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from relaymq.records.meta import MetaRecord

LEASE_PREFIX = "lease:"
"""Where ``lease`` keeps its records: ``lease:<name>``, the owner as the value."""


class MetaStore(abc.ABC):
    """Small records with versions and an optional time to live, shared by every process of
    one backend. Keys are non-empty strings of at most 512 characters; values are opaque bytes
    (small: a few kilobytes). Methods follow this order in every backend."""

    @abc.abstractmethod
    async def meta_get(self, key: str) -> MetaRecord | None:
        """The record stored under ``key``, or None when there is none or it has lapsed."""

    @abc.abstractmethod
    async def meta_put(self, key: str, value: bytes, ttl: float | None = None) -> None:
        """Store ``value`` under ``key`` whatever is there, with a new version; it lapses
        ``ttl`` seconds from the backend's now (None: never)."""

    @abc.abstractmethod
    async def meta_swap(
        self, key: str, expected: int | None, value: bytes, ttl: float | None = None
    ) -> bool:
        """Compare and set, atomically: store ``value`` (as ``meta_put`` does) only while the
        record's version is ``expected``; with ``expected`` None, only while there is no
        record (or it has lapsed). True when this call wrote it. Of concurrent swaps from one
        version, exactly one wins. A ``ttl`` <= 0 leaves the record lapsed at once."""

    @abc.abstractmethod
    async def meta_list(self, prefix: str) -> list[MetaRecord]:
        """Every record whose key starts with ``prefix`` and has not lapsed, by key. A backend
        may forget lapsed records of ``prefix`` here."""

    @abc.abstractmethod
    async def meta_delete(self, key: str) -> bool:
        """Delete the record under ``key``; False when there was none (or it had lapsed)."""

    async def lease(self, name: str, owner: str, ttl: float) -> bool:
        """Take or renew the lease ``name`` for ``owner`` for ``ttl`` seconds: True when
        ``owner`` holds it afterwards. A ``ttl`` <= 0 gives it up when ``owner`` holds it
        (and answers False). Shared by every process of the backend; two owners never both
        hold one lease on the backend's clock."""
        key, me = LEASE_PREFIX + name, owner.encode()
        held = await self.meta_get(key)
        if held is not None and held.value != me:
            return False
        if ttl <= 0:
            if held is not None:
                await self.meta_swap(key, held.version, me, 0)
            return False
        return await self.meta_swap(key, None if held is None else held.version, me, ttl)


def by_key(records: Sequence[MetaRecord]) -> list[MetaRecord]:
    """``records`` sorted by key (what ``meta_list`` returns)."""
    return sorted(records, key=lambda r: r.key)
