"""Queue limits: how many jobs of a queue may be active at once, how many may start per
period, and how many of each limit key (a customer, say) may start per period and be active
at once, counted over every worker together.

Limits are stored in the backend (``Backend.set_limits``) and enforced by its claim, in the
same atomic step that takes the jobs, so no number of workers can exceed them. The rate is
counted in fixed windows of ``per`` seconds on the backend's clock (window ``k`` is
``[k * per, (k + 1) * per)``): at most ``rate`` jobs start in each; the same holds per key
for ``key_rate`` in windows of ``key_per`` seconds. ``key_max_active`` caps the active jobs
of each key: the claim passes over a key at its cap (its jobs keep their place) to the jobs
behind. The arithmetic a claim does with them is ``relaymq.policy.allowance`` and
``relaymq.policy.KeyBudget``.
"""

from __future__ import annotations

from collections.abc import Mapping

from relaymq.errors import ConfigError
from relaymq.records.limits import MAX_COUNT, Limits


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


def check_local_max_active(value: object) -> None:
    """``App.limit(local_max_active=...)``: a whole number >= 1 (a cap per worker process)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise ConfigError(
            f"limits: local_max_active must be a whole number >= 1 and at most {MAX_COUNT}, "
            f"not {value!r}"
        )


def make_limits(
    max_active: int | None,
    rate: int | str | None,
    per: float,
    key_rate: int | str | None,
    key_per: float,
    key_max_active: int | None = None,
    fair: bool = False,
    weights: Mapping[str, int] | None = None,
) -> Limits:
    """``Limits`` from the arguments of ``App.limit`` and ``Queue.set_limits`` (rates may be
    written ``"100/m"``)."""
    if isinstance(rate, str):
        rate, per = parse_rate(rate)
    if isinstance(key_rate, str):
        key_rate, key_per = parse_rate(key_rate)
    return Limits(
        max_active=max_active,
        rate=rate,
        per=per,
        key_rate=key_rate,
        key_per=key_per,
        key_max_active=key_max_active,
        fair=fair,
        weights=Limits.weights_of(weights),
    )
