"""Queue limits: how many jobs of a queue may be active at once, how many may start per
period, and how many of each limit key (a customer, say) may start per period, counted over
every worker together.

Limits are stored in the backend (``Backend.set_limits``) and enforced by its claim, in the
same atomic step that takes the jobs, so no number of workers can exceed them. The rate is
counted in fixed windows of ``per`` seconds on the backend's clock (window ``k`` is
``[k * per, (k + 1) * per)``): at most ``rate`` jobs start in each; the same holds per key
for ``key_rate`` in windows of ``key_per`` seconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from relaymq.errors import ConfigError
from relaymq.records.limits import Limits


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


def make_limits(max_active: int | None, rate: int | str | None, per: float,
                key_rate: int | str | None, key_per: float) -> Limits:  # fmt: skip
    """``Limits`` from the arguments of ``App.limit`` and ``Queue.set_limits`` (rates may be
    written ``"100/m"``)."""
    if isinstance(rate, str):
        rate, per = parse_rate(rate)
    if isinstance(key_rate, str):
        key_rate, key_per = parse_rate(key_rate)
    return Limits(max_active=max_active, rate=rate, per=per, key_rate=key_rate, key_per=key_per)


@dataclass(frozen=True, slots=True)
class Allowance:
    """What one claim of a limited queue may take (``allowance``)."""

    take: int
    """How many jobs the claim may start now."""
    window: int
    """The current rate window (its index) ..."""
    used: int
    """... and the jobs started in it before this claim."""
    retry_in: float | None
    """When the limit stopped the claim: seconds until the rate window ends, or None when it
    waits for active jobs to end. Meaningless when nothing was held back."""


def allowance(limits: Limits, active: int, window: int, used: int, now: float,
              want: int) -> Allowance:  # fmt: skip
    """How many of ``want`` jobs a claim at ``now`` may start, given the queue's ``active``
    jobs and its stored rate window (``window`` index, ``used`` starts in it)."""
    take = want
    retry_in: float | None = None
    current = math.floor(now / limits.per)
    if window != current:
        window, used = current, 0
    if limits.max_active is not None:
        take = min(take, max(0, limits.max_active - active))
    if limits.rate is not None and limits.rate - used < take:
        take = max(0, limits.rate - used)
        retry_in = max(0.0, (current + 1) * limits.per - now)
    return Allowance(take, window, used, retry_in)


KEY_SCAN = 1000
"""A claim of a queue with ``key_rate`` looks at most this many waiting jobs, in order, past
those whose key has used its window: beyond that, jobs of other keys wait for the next claim
(in the next key window at the latest, when the keys in front start again)."""


class KeyBudget:
    """What each limit key may still start in a claim (``Limits.key_rate``): the starts
    counted in the current key window (``key_window`` index, ``used``: key -> starts), plus
    the claim's own. ``window`` and ``used`` are what to store back afterwards."""

    def __init__(self, limits: Limits, key_window: int, used: Mapping[str, int],
                 now: float) -> None:  # fmt: skip
        self.rate = limits.key_rate
        self.per = limits.key_per
        self.window = math.floor(now / limits.key_per)
        self.used: dict[str, int] = dict(used) if key_window == self.window else {}
        self.held_back = False
        """Whether a job was refused (its key had used its window)."""

    def take(self, key: str | None) -> bool:
        """Whether a job of ``key`` may start now; if so, it is counted."""
        if key is None or self.rate is None:
            return True
        n = self.used.get(key, 0)
        if n >= self.rate:
            self.held_back = True
            return False
        self.used[key] = n + 1
        return True

    def retry_in(self, now: float) -> float:
        """Seconds until the key window ends (when the keys that used it start again)."""
        return max(0.0, (self.window + 1) * self.per - now)

    def spent(self) -> list[str]:
        """The keys that may start nothing more in this window."""
        return [k for k, n in self.used.items() if self.rate is not None and n >= self.rate]
