"""The overview's small charts: a queue's stored per-minute outcomes, bucketed and drawn as
inline SVG on the server (no script, no chart library)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from relaymq.backends.base import Tally


@dataclass(frozen=True, slots=True)
class Window:
    """Outcomes over a span of time: per-bucket counts for a chart, and the totals."""

    label: str
    completed: list[int]
    failures: list[int]
    """Attempts that failed (retried, or failed for good), per bucket."""

    @property
    def total_completed(self) -> int:
        return sum(self.completed)

    @property
    def failure_rate(self) -> float | None:
        """Failed attempts over all ended attempts; None when nothing ended."""
        ended = self.total_completed + sum(self.failures)
        return None if ended == 0 else sum(self.failures) / ended


def window(tallies: Sequence[Tally], label: str, now_minute: int, minutes: int,
           buckets: int) -> Window:  # fmt: skip
    """The last ``minutes`` minutes up to ``now_minute`` in ``buckets`` equal buckets."""
    size = max(1, minutes // buckets)
    first = now_minute - size * buckets + 1
    completed, failures = [0] * buckets, [0] * buckets
    for t in tallies:
        if t.minute < first or t.minute > now_minute:
            continue
        i = (t.minute - first) // size
        completed[i] += t.completed
        failures[i] += t.retried + t.failed
    return Window(label, completed, failures)


def sparkline(w: Window, width: int = 160, height: int = 32) -> str:
    """Completed per bucket as bars, failures over them in red; a title says the totals."""
    n = len(w.completed)
    top = max([*w.completed, *w.failures, 1])
    step = width / n
    bars: list[str] = []
    for i, (ok, bad) in enumerate(zip(w.completed, w.failures, strict=True)):
        x = i * step
        for value, cls in ((ok, "ok"), (bad, "bad")):
            if value:
                h = max(1.0, value / top * (height - 2))
                bars.append(f'<rect class="{cls}" x="{x:.1f}" y="{height - h:.1f}" '
                            f'width="{max(step - 0.5, 0.5):.1f}" height="{h:.1f}"/>')  # fmt: skip
    rate = w.failure_rate
    title = f"{w.label}: {w.total_completed} completed" + (
        "" if rate is None else f", {rate:.1%} of attempts failed"
    )
    return (f'<svg class="spark" role="img" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}"><title>{escape(title)}</title>'
            f'{"".join(bars)}</svg>')  # fmt: skip
