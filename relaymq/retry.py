"""Backoff policies: pure functions from the attempt that failed (1-based) to a delay in seconds."""

from __future__ import annotations

import random
from collections.abc import Callable

Backoff = Callable[[int], float]


def exponential(
    base: float = 1.0, factor: float = 2.0, cap: float = 300.0, jitter: float = 0.2
) -> Backoff:
    """``base * factor**(attempt-1)``, capped, then stretched by up to ``jitter`` (a fraction).

    Jitter only lengthens a delay, so a retry never comes earlier than the configured curve.
    """
    if base < 0 or factor < 1 or cap < 0 or not 0 <= jitter <= 1:
        raise ValueError("need base >= 0, factor >= 1, cap >= 0 and 0 <= jitter <= 1")

    def delay(attempt: int) -> float:
        plain = min(cap, base * factor ** max(0, attempt - 1))
        return min(cap * (1 + jitter), plain * (1 + random.uniform(0, jitter)))

    return delay


def fixed(seconds: float) -> Backoff:
    """The same delay after every failed attempt."""
    if seconds < 0:
        raise ValueError("seconds must be >= 0")
    return lambda attempt: seconds


DEFAULT_BACKOFF: Backoff = exponential()


def next_delay(backoff: Backoff | float, attempt: int) -> float:
    """The delay before the next attempt; a number is a fixed delay."""
    if isinstance(backoff, int | float):
        return max(0.0, float(backoff))
    return max(0.0, float(backoff(attempt)))
