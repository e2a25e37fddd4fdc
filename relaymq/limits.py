"""Queue limits: how many jobs of a queue may be active at once, how many may start per
period, and how many of each limit key (a customer, say) may start per period, counted over
every worker together.

Limits are stored in the backend (``Backend.set_limits``) and enforced by its claim, in the
same atomic step that takes the jobs, so no number of workers can exceed them. The rate is
counted in fixed windows of ``per`` seconds on the backend's clock (window ``k`` is
``[k * per, (k + 1) * per)``): at most ``rate`` jobs start in each; the same holds per key
for ``key_rate`` in windows of ``key_per`` seconds. The arithmetic a claim does with them is
``relaymq.policy.allowance`` and ``relaymq.policy.KeyBudget``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from relaymq.errors import ConfigError
from relaymq.options import validate_queue_name

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
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not 1 <= value <= MAX_COUNT):  # fmt: skip
                raise ConfigError(
                    f"limits: {name} must be a whole number >= 1 and at most {MAX_COUNT}, "
                    f"not {value!r}"
                )
        for name in ("per", "key_per"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value)
                    and 0 < value <= MAX_PERIOD):  # fmt: skip
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


def parse_rate(text: str) -> tuple[int, float]:
    """``"100/60"`` or ``"100/60s"``, ``"10/m"``, ``"5/s"``, ``"1000/h"``: (rate, per seconds)."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    count, sep, period = text.strip().partition("/")
    try:
        if not sep:
            raise ValueError
        rate = int(count)
        period = period.strip().lower()
        if period in units:
            per = units[period]
        elif period[-1:] in units:
            per = float(period[:-1]) * units[period[-1]]
        else:
            per = float(period)
    except ValueError:
        raise ConfigError(
            f"rate {text!r}: expected N/PERIOD, e.g. 100/60 (seconds), 10/m, 5/s or 1000/h"
        ) from None
    Limits(rate=rate, per=per)  # the same checks as everywhere else
    return rate, per


DEFINED: dict[str, Limits] = {}
"""Limits defined in code (``limit``), by queue; each worker stores those of its queues when
it starts, so the code's limits hold from the next deploy on."""


def limit(queue: str, *, max_active: int | None = None, rate: int | str | None = None,
          per: float = 1.0, key_rate: int | str | None = None,
          key_per: float = 1.0) -> Limits:  # fmt: skip
    """Define ``queue``'s limits in code: at most ``max_active`` of its jobs active at once,
    at most ``rate`` starts per ``per`` seconds (or ``rate="100/m"``), and at most
    ``key_rate`` starts per ``key_per`` seconds for each limit key, over every worker.

    Workers of the queue store them when they start; ``Queue.set_limits`` (or ``relaymq queue
    limits``) changes them at run time, until the next worker start stores these again.
    """
    validate_queue_name(queue)
    limits = make_limits(max_active, rate, per, key_rate, key_per)
    DEFINED[queue] = limits
    return limits


def make_limits(max_active: int | None, rate: int | str | None, per: float,
                key_rate: int | str | None, key_per: float) -> Limits:  # fmt: skip
    """``Limits`` from the arguments of ``limit`` and ``Queue.set_limits`` (rates may be
    written ``"100/m"``)."""
    if isinstance(rate, str):
        rate, per = parse_rate(rate)
    if isinstance(key_rate, str):
        key_rate, key_per = parse_rate(key_rate)
    return Limits(max_active=max_active, rate=rate, per=per, key_rate=key_rate, key_per=key_per)
