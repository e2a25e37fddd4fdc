"""A worker process's memory does not grow with the jobs it runs (issue 15: RSS growth <= 5 %
after warm-up). ``benchmarks/memory.py`` measures 200,000 jobs; this runs a fifth of that."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.memory import growth_after, measure

JOBS = 40_000


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_worker_process_rss_stays_flat_over_many_jobs(tmp_path: Path) -> None:
    readings = await measure(f"sqlite:///{tmp_path}/mem.db", JOBS, backlog=5_000)
    assert readings[-1][0] == JOBS
    base, end, growth = growth_after(readings, JOBS * 0.25)
    assert growth <= 5, f"RSS grew {growth:.1f} %: {base} KiB -> {end} KiB ({readings})"
