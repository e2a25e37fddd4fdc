"""``benchmarks/retention.py`` runs (its figures are in benchmarks/RESULTS.md): a plateau run
and a cleaner comparison at a small scale, on a SQLite file, print what they promise."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.retention import compare, plateau


@pytest.mark.timeout(120)
async def test_the_retention_benchmark_prints_sizes_and_the_cleaners_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/retention.db"
    await plateau(url, 600, 200, retention=1, interval=1, backlog=200)
    await compare(url, 300, runs=1, backlog=100)
    out = capsys.readouterr().out
    marks = re.findall(r"^  (\d+) jobs: sqlite file\+wal [\d.]+ MiB", out, re.M)
    assert marks == ["0", "200", "400", "600"], out
    assert re.search(r"^cleaner sqlite: 300 jobs per run, on [\d,]+ jobs/s, off [\d,]+", out, re.M)
