"""The short soak profile on every backend that has worker processes to kill: a few hundred
jobs, kills, a freeze and a server restart; nothing lost, stuck, written stale, or run twice
without a crash that explains it. ``make soak`` runs the long profile (tests/soak/run.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.soak.harness import SHORT, soak
from tests.soak.targets import NAMES, OPENERS, unavailable


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", NAMES)
async def test_the_short_soak_loses_nothing(name: str, tmp_path: Path) -> None:
    reason = unavailable(name)
    if reason and os.environ.get("CI"):
        pytest.fail(f"cannot soak {name} in CI: {reason}", pytrace=False)
    if reason:
        pytest.skip(reason)
    async with OPENERS[name](tmp_path) as target:
        report = await soak(target, SHORT, tmp_path)
    print(report.summary())
    assert report.ok, (
        report.summary()
        + "\n"
        + "\n".join(report.unexplained[:5] + report.lost[:5] + report.stuck[:5] + report.stale[:5])
    )
    assert report.completed_once + report.explained == report.jobs
    assert report.kills == SHORT.kills and report.freezes == SHORT.freezes
