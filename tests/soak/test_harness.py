"""The soak harness keeps its worker count, and says so when it cannot: a worker that exits on
its own is reported (pid, exit code, the end of its stderr) and replaced, and a soak left with
no live worker fails within a few stalled thresholds with that report, not at its deadline."""

from __future__ import annotations

import time
from pathlib import Path

from tests.soak.harness import NO_WORKER_THRESHOLDS, Profile, Target, Workers, soak

BROKEN = "tests.soak.no_such_worker_module"
"""A worker that cannot start: ``python -m`` of a module that does not exist."""


async def test_a_worker_that_exits_on_its_own_is_reported_and_replaced(tmp_path: Path) -> None:
    target = Target("sqlite", f"sqlite:///{tmp_path / 'soak.db'}", worker_module=BROKEN)
    workers = Workers(target, "q", tmp_path / "ledger", tmp_path / "workers")
    first = await workers.start()
    try:
        await workers.wait_live(0)
        await first.wait()
        while len(workers.procs) < 2:  # the replacement is started once the exit is seen
            workers.started.clear()
            await workers.started.wait()
    finally:
        await workers.stop()
    gone = workers.exits[0]
    assert (gone.pid, gone.code) == (first.pid, 1)
    assert "No module named" in gone.stderr and gone.path.exists()
    assert f"worker pid {first.pid} exited with code 1" in gone.describe()


async def test_a_soak_with_no_worker_left_fails_at_once_with_the_report(tmp_path: Path) -> None:
    target = Target(
        "sqlite", f"sqlite:///{tmp_path / 'soak.db'}", stalled_threshold=0.5, worker_module=BROKEN
    )
    profile = Profile(jobs=20, workers=1, kills=1, freezes=0, restarts=0, deadline=120)
    began = time.monotonic()
    report = await soak(target, profile, tmp_path, seed=1)
    took = time.monotonic() - began
    assert not report.ok and report.aborted.startswith("no live worker")
    assert "No module named" in report.aborted
    assert report.worker_exits and "worker exits" in report.summary()
    assert took < profile.deadline / 2, f"took {took:.0f}s"
    assert len(report.stuck) == profile.jobs  # nothing ran: every job counted as stuck
    assert NO_WORKER_THRESHOLDS * target.stalled_threshold < took
