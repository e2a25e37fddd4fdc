"""The Django row of the transactional-enqueue benchmark runs, on this run's database engine,
and every job it timed was stored (the script checks it and exits non-zero otherwise)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests_django.conftest import ENGINE

ROOT = Path(__file__).resolve().parents[1]


def test_the_benchmark_prints_its_row() -> None:
    argv = [sys.executable, "-m", "benchmarks.transactions_django", "--engine", ENGINE]
    done = subprocess.run(
        [*argv, "--jobs", "5", "--runs", "1"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    [row] = done.stdout.splitlines()
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "Django `transaction.atomic()`"
    assert len(cells) == 6 and all(" / " in c for c in cells[2:]), row
