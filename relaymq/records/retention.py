"""The retention of one queue: how long its finished jobs are kept, as stored in the meta store
and applied by the elected maintenance. ``relaymq.retention`` holds the rule that applies it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from relaymq.errors import ConfigError
from relaymq.job import JobState

DAY = 86400.0
MAX_WINDOW = 100 * 365 * DAY
"""The longest window, in seconds (0 keeps forever)."""
MAX_FINISHED = 1_000_000_000
"""The largest ``max_finished``."""


@dataclass(frozen=True, slots=True)
class Retention:
    """How long the finished jobs of one queue are kept, in seconds since they finished; 0
    keeps them forever. The defaults are the policy of every queue that stores none."""

    completed: float = DAY
    """Completed jobs."""
    cancelled: float = DAY
    """Cancelled jobs."""
    failed: float = 7 * DAY
    """Dead-lettered jobs (failed and expired: the DLQ)."""
    max_finished: int | None = None
    """At most about this many jobs per finished state are kept, the newest (None: no count)."""

    def __post_init__(self) -> None:
        for name in ("completed", "cancelled", "failed"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or not 0 <= value <= MAX_WINDOW
            ):
                raise ConfigError(
                    f"retention: {name} must be seconds >= 0 (0 keeps forever) and at most "
                    f"{MAX_WINDOW:.0f}, not {value!r}"
                )
            object.__setattr__(self, name, float(value))
        n = self.max_finished
        if n is not None and (
            isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_FINISHED
        ):
            raise ConfigError(
                f"retention: max_finished must be a whole number >= 1 and at most "
                f"{MAX_FINISHED}, or None, not {n!r}"
            )

    def window(self, state: JobState) -> float:
        """Seconds a job finished in ``state`` is kept (0: forever)."""
        if state is JobState.COMPLETED:
            return self.completed
        if state is JobState.CANCELLED:
            return self.cancelled
        if state in (JobState.FAILED, JobState.EXPIRED):
            return self.failed
        raise ConfigError(f"retention applies to finished jobs, not {state.value}")
