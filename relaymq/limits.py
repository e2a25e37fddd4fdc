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


def make_limits(
    max_active: int | None,
    rate: int | str | None,
    per: float,
    key_rate: int | str | None,
    key_per: float,
) -> Limits:
    """``Limits`` from the arguments of ``App.limit`` and ``Queue.set_limits`` (rates may be
    written ``"100/m"``)."""
    if isinstance(rate, str):
        rate, per = parse_rate(rate)
    if isinstance(key_rate, str):
        key_rate, key_per = parse_rate(key_rate)
    return Limits(max_active=max_active, rate=rate, per=per, key_rate=key_rate, key_per=key_per)
