"""The dashboard's charts and figures: a queue's stored per-minute tallies (``Queue.history``),
bucketed, summed and drawn as inline SVG on the server (no script, no chart library, nothing
from another site).

A chart shows completed jobs per bucket as green bars and jobs that failed for good stacked on
them in red, with a labelled value axis, time labels under it, and each bucket's values in its
tooltip (an SVG ``<title>``: hover a bar)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from relaymq.dashboard.views import seconds
from relaymq.records.store import TIME_BUCKETS, Tally, add_counts, percentile


@dataclass(frozen=True, slots=True)
class Window:
    """Outcomes over a span of time: per-bucket counts for a chart, and the totals."""

    label: str
    first: int
    """The first minute of the first bucket."""
    size: int
    """Minutes per bucket."""
    completed: list[int]
    """Jobs that completed, per bucket."""
    failed: list[int]
    """Jobs that ended failed for good (dead-lettered), per bucket."""
    retried: list[int]
    """Attempts that failed and ran again, per bucket: attempts, not jobs."""
    run_times: tuple[int, ...] = ()
    """Run times of the whole window per bucket of ``TIME_BUCKETS``."""
    pickups: tuple[int, ...] = ()
    """Pickup latencies of the whole window per bucket of ``TIME_BUCKETS``."""

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

    @property
    def per_minute(self) -> float:
        """Jobs completed per minute, on average over the window."""
        return self.total_completed / (self.size * len(self.completed))

    def run_time(self, q: float) -> str:
        """The ``q`` quantile of the handlers' run times, in words ('' when none ran)."""
        return _quantile(self.run_times, q)

    def pickup(self, q: float) -> str:
        """The ``q`` quantile of the pickup latencies, in words ('' when none was taken)."""
        return _quantile(self.pickups, q)

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


def _quantile(counts: Sequence[int], q: float) -> str:
    value = percentile(counts, q)
    if value is None:
        return ""
    if value >= TIME_BUCKETS[-1]:  # the open bucket: only its lower bound is known
        return f"over {seconds(TIME_BUCKETS[-1])}"
    return seconds(value)


def window(
    tallies: Sequence[Tally],
    label: str,
    now_minute: int,
    minutes: int,
    buckets: int,
    task: str | None = None,
) -> Window:
    """The last ``minutes`` minutes up to ``now_minute`` in ``buckets`` equal buckets: of every
    task, or of ``task`` only."""
    size = max(1, minutes // buckets)
    first = now_minute - size * buckets + 1
    completed, failed, retried = [0] * buckets, [0] * buckets, [0] * buckets
    run_times: tuple[int, ...] = ()
    pickups: tuple[int, ...] = ()
    for t in tallies:
        if t.minute < first or t.minute > now_minute or (task is not None and t.task != task):
            continue
        i = (t.minute - first) // size
        completed[i] += t.completed
        failed[i] += t.failed
        retried[i] += t.retried
        run_times = add_counts(run_times, t.run_times)
        pickups = add_counts(pickups, t.pickups)
    return Window(label, first, size, completed, failed, retried, run_times, pickups)


def tasks_of(tallies: Sequence[Tally]) -> list[str]:
    """The tasks that have tallies among ``tallies``, sorted."""
    return sorted({t.task for t in tallies if t.task})


def _nice(top: int) -> int:
    """The smallest 1, 2 or 5 times a power of ten at or above ``top`` (an axis's top)."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if m * step >= top:
                return m * step
        step *= 10


def _clock(minute: int) -> str:
    return time.strftime("%H:%M", time.localtime(minute * 60))


def small_chart(w: Window) -> str:
    """``chart`` for a table cell (the overview's)."""
    return chart(w, 260, 96, 3, "chart small")


def chart(
    w: Window, width: int = 720, height: int = 200, ticks: int = 6, css: str = "chart"
) -> str:
    """``w`` as a bar chart: completed jobs (green) with the failed ones on top (red) per
    bucket, a value axis with its top and middle labelled, ``ticks`` time labels; hovering a
    bucket shows its span and values."""
    left, right, top_pad, bottom = 40, 8, 10, 22
    plot_w, plot_h = width - left - right, height - top_pad - bottom
    n = len(w.completed)
    top = _nice(max([c + f for c, f in zip(w.completed, w.failed, strict=True)] + [1]))
    step = plot_w / n
    parts = [
        f'<svg class="{css}" role="img" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" preserveAspectRatio="xMinYMin meet">',
        f"<title>{escape(w.label)}: {escape(w.summary())}</title>",
    ]
    for value in (top, top // 2) if top > 1 else (top,):  # grid lines with their values
        y = top_pad + plot_h - value / top * plot_h
        parts.append(
            f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{value}</text>'
        )
    base = top_pad + plot_h
    parts.append(f'<line class="axis" x1="{left}" x2="{width - right}" y1="{base}" y2="{base}"/>')
    parts.append(f'<text x="{left - 4}" y="{base + 4}" text-anchor="end">0</text>')
    for i, (ok, bad, again) in enumerate(zip(w.completed, w.failed, w.retried, strict=True)):
        x = left + i * step
        start = w.first + i * w.size
        span = f"{_clock(start)} to {_clock(start + w.size)}"
        tip = f"{span}: {ok} completed, {bad} failed"
        if again:
            tip += f", {again} attempts retried"
        bars = []
        h_ok, h_bad = ok / top * plot_h, bad / top * plot_h
        bar_w = max(step - 1, 0.8)
        if ok:
            bars.append(
                f'<rect class="ok" x="{x:.1f}" y="{base - h_ok:.1f}" width="{bar_w:.1f}" '
                f'height="{max(h_ok, 1):.1f}"/>'
            )
        if bad:
            bars.append(
                f'<rect class="bad" x="{x:.1f}" y="{base - h_ok - max(h_bad, 1):.1f}" '
                f'width="{bar_w:.1f}" height="{max(h_bad, 1):.1f}"/>'
            )
        parts.append(
            f'<g class="slot" data-ok="{ok}" data-bad="{bad}"><title>{escape(tip)}</title>'
            f'<rect class="hit" x="{x:.1f}" y="{top_pad}" width="{step:.1f}" '
            f'height="{plot_h}"/>{"".join(bars)}</g>'
        )
    every = max(1, n // ticks)
    for i in range(0, n + 1, every):  # time labels at bucket edges
        x = left + i * step
        anchor = "start" if i == 0 else "end" if i >= n else "middle"
        parts.append(
            f'<text x="{x:.1f}" y="{height - 6}" text-anchor="{anchor}">'
            f"{_clock(w.first + i * w.size)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
