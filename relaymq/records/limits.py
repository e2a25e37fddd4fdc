"""The limits of one queue, as stored (``JobStore.set_limits``) and enforced by the claim.
``relaymq.limits`` declares them; ``relaymq.policy`` holds the arithmetic."""

from __future__ import annotations

import math
from dataclasses import dataclass

from relaymq.errors import ConfigError

MAX_COUNT = 1_000_000_000
"""The largest ``max_active``, ``rate`` and ``key_rate``: within every backend's integers."""
MAX_PERIOD = 365 * 86400.0
"""The longest ``per`` and ``key_per``, in seconds."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits of one queue; a field left None does not limit."""

    max_active: int | None = None
    """At most this many jobs of the queue are active (claimed, not yet settled) at once.
    A stalled job counts until recovery returns it."""
    rate: int | None = None
    """At most this many jobs of the queue start (are claimed) per window of ``per`` s."""
    per: float = 1.0
    """The length of a rate window, in seconds."""
    key_rate: int | None = None
    """At most this many jobs of each limit key (``with_options(limit_key=...)``, e.g. one
    customer) start per window of ``key_per`` seconds. Jobs without a key are not counted."""
    key_per: float = 1.0

    def __post_init__(self) -> None:
        for name in ("max_active", "rate", "key_rate"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT
            ):
                raise ConfigError(
                    f"limits: {name} must be a whole number >= 1 and at most {MAX_COUNT}, "
                    f"not {value!r}"
                )
        for name in ("per", "key_per"):
            value = getattr(self, name)
            if not (
                isinstance(value, int | float) and math.isfinite(value) and 0 < value <= MAX_PERIOD
            ):
                raise ConfigError(
                    f"limits: {name} must be a number of seconds > 0 and at most {MAX_PERIOD:g} "
                    f"(a year), not {value!r}"
                )

    @property
    def empty(self) -> bool:
        """Limits nothing (storing it removes the queue's limits)."""
        return self.max_active is None and self.rate is None and self.key_rate is None

    def describe(self) -> str:
        parts = []
        if self.max_active is not None:
            parts.append(f"at most {self.max_active} active")
        if self.rate is not None:
            parts.append(f"{self.rate} per {self.per:g}s")
        if self.key_rate is not None:
            parts.append(f"{self.key_rate} per {self.key_per:g}s per key")
        return ", ".join(parts) or "no limits"
