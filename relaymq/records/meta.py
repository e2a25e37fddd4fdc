"""A record of the meta store (``relaymq.backends.meta``): a small value under a string key,
with a version for compare-and-set and an optional expiry on the backend's clock."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MetaRecord:
    """One stored record, as the meta store returns it."""

    key: str
    value: bytes
    version: int
    """Positive; a write makes it larger. A key deleted and created again starts over at 1."""
    expires: float | None = None
    """When it lapses, in seconds since the epoch on the backend's clock; None: never."""
