"""The overview's small charts: a queue's stored per-minute outcomes, bucketed and drawn as
inline SVG on the server (no script, no chart library)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from relaymq.records.store import Tally


@dataclass(frozen=True, slots=True)
class Window:
    """Outcomes over a span of time: per-bucket counts for a chart, and the totals."""

    label: str
    completed: list[int]
    """Jobs that completed, per bucket."""
    failed: list[int]
    """Jobs that ended failed for good (dead-lettered), per bucket."""
    retried: list[int]
    """Attempts that failed and ran again, per bucket: attempts, not jobs."""

    @property
    def total_completed(self) -> int:
        return sum(self.completed)

    @property
    def total_failed(self) -> int:
        return sum(self.failed)

    @property
    def failure_rate(self) -> float | None:
        """Jobs that failed for good over the jobs that ended; None when none ended."""
        ended = self.total_completed + self.total_failed
        return None if ended == 0 else self.total_failed / ended

    def summary(self) -> str:
        """``267 done, 23 failed (7.9% of ended jobs), 44 attempts retried``."""
        text = f"{self.total_completed} done"
        rate = self.failure_rate
        if rate is not None:
            text += f", {self.total_failed} failed ({rate:.1%} of ended jobs)"
        retried = sum(self.retried)
        if retried:
            text += f", {retried} attempt{'s' if retried != 1 else ''} retried"
        return text


def window(
    tallies: Sequence[Tally], label: str, now_minute: int, minutes: int, buckets: int
) -> Window:
    """The last ``minutes`` minutes up to ``now_minute`` in ``buckets`` equal buckets."""
    size = max(1, minutes // buckets)
    first = now_minute - size * buckets + 1
    completed, failed, retried = [0] * buckets, [0] * buckets, [0] * buckets
    for t in tallies:
        if t.minute < first or t.minute > now_minute:
            continue
        i = (t.minute - first) // size
        completed[i] += t.completed
        failed[i] += t.failed
        retried[i] += t.retried
    return Window(label, completed, failed, retried)


def sparkline(w: Window, width: int = 160, height: int = 32) -> str:
    """Completed jobs per bucket as bars, failed jobs over them in red; a title says the
    totals."""
    n = len(w.completed)
    top = max([*w.completed, *w.failed, 1])
    step = width / n
    bars: list[str] = []
    for i, (ok, bad) in enumerate(zip(w.completed, w.failed, strict=True)):
        x = i * step
        for value, cls in ((ok, "ok"), (bad, "bad")):
            if value:
                h = max(1.0, value / top * (height - 2))
                bars.append(
                    f'<rect class="{cls}" x="{x:.1f}" y="{height - h:.1f}" '
                    f'width="{max(step - 0.5, 0.5):.1f}" height="{h:.1f}"/>'
                )
    title = f"{w.label}: {w.summary()}"
    return (
        f'<svg class="spark" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}"><title>{escape(title)}</title>'
        f"{''.join(bars)}</svg>"
    )
