"""The limits of one queue, as stored (``JobStore.set_limits``) and enforced by the claim.
``relaymq.limits`` declares them; ``relaymq.policy`` holds the arithmetic."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from relaymq.errors import ConfigError

MAX_COUNT = 1_000_000_000
"""The largest ``max_active``, ``rate``, ``key_rate`` and ``key_max_active``: within every
backend's integers."""
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
    key_max_active: int | None = None
    """At most this many jobs of each limit key are active at once, over every worker: the
    claim passes over a key at its cap (its jobs keep their place) to the jobs behind. A
    stalled job counts until recovery returns it. Jobs without a key are not counted."""
    fair: bool = False
    """Claims rotate over the limit keys with waiting jobs: in each round a key starts at most
    its weight (1 unless ``weights`` says more) before any key starts again; within a key,
    claim order (priority, then FIFO) holds. Jobs without a key are not counted."""
    weights: tuple[tuple[str, int], ...] = ()
    """With ``fair``: (key, weight) pairs, sorted by key: that key starts up to its weight
    in each round (``make_limits`` takes a mapping)."""

    def __post_init__(self) -> None:
        for name in ("max_active", "rate", "key_rate", "key_max_active"):
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

        if not isinstance(self.fair, bool):
            raise ConfigError(f"limits: fair must be True or False, not {self.fair!r}")
        if self.weights and not self.fair:
            raise ConfigError("limits: weights rotate keys fairly: give them with fair=True")
        for pair in self.weights:
            key, weight = pair if isinstance(pair, tuple) and len(pair) == 2 else (None, None)
            if not isinstance(key, str) or not key:
                raise ConfigError(f"limits: a weight's key must be a non-empty string: {pair!r}")
            if isinstance(weight, bool) or not isinstance(weight, int):
                raise ConfigError(
                    f"limits: weight of {key!r} must be a whole number, not {weight!r}"
                )
            if not 1 <= weight <= MAX_COUNT:
                raise ConfigError(
                    f"limits: weight of {key!r} must be >= 1 and at most {MAX_COUNT}, not {weight}"
                )
        if list(self.weights) != sorted(dict(self.weights).items()):
            raise ConfigError("limits: weights must be (key, weight) pairs, one per key, sorted")

    @staticmethod
    def weights_of(weights: Mapping[str, int] | None) -> tuple[tuple[str, int], ...]:
        """``weights`` as stored in ``Limits.weights``."""
        if weights is None:
            return ()
        if not isinstance(weights, Mapping):
            raise ConfigError(f"limits: weights must be a mapping of key to weight: {weights!r}")
        return tuple(sorted(weights.items(), key=lambda kv: str(kv[0])))

    @property
    def empty(self) -> bool:
        """Limits nothing (storing it removes the queue's limits)."""
        return (
            self.max_active is None
            and self.rate is None
            and self.key_rate is None
            and self.key_max_active is None
            and not self.fair
        )

    @property
    def keyed(self) -> bool:
        """Limits jobs per limit key (``key_rate``, ``key_max_active`` or ``fair``): a claim
        looks at each job's key (``relaymq.policy.KeyBudget``)."""
        return self.key_rate is not None or self.key_max_active is not None or self.fair

    def describe(self) -> str:
        parts = []
        if self.max_active is not None:
            parts.append(f"at most {self.max_active} active")
        if self.rate is not None:
            parts.append(f"{self.rate} per {self.per:g}s")
        if self.key_rate is not None:
            parts.append(f"{self.key_rate} per {self.key_per:g}s per key")
        if self.key_max_active is not None:
            parts.append(f"at most {self.key_max_active} active per key")
        if self.fair:
            weighted = ", ".join(f"{k}={w}" for k, w in self.weights)
            parts.append(f"fair across keys{f' (weights {weighted})' if weighted else ''}")
        return ", ".join(parts) or "no limits"
