"""The short partition profile on every backend that workers share over a network: workers on
three test hosts, one cut off for longer than the stalled threshold while its handlers run and
one for less, one link lossy and slow, the server cut off from every worker, a link flapping;
then nothing lost, stuck or written stale, every duplicate explained, every healed worker back
at work on its own within the reconnect bound, and every taken-over run learnt by its worker.
``make soak`` runs the long profile (tests/soak/run.py --partitions)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.hosts import net
from tests.hosts.servers import NAMES, on_hosts
from tests.soak.harness import soak
from tests.soak.plan import PARTITIONS_SHORT
from tests.soak.targets import unavailable


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("name", NAMES)
async def test_the_short_partition_profile_loses_nothing(name: str, tmp_path: Path) -> None:
    reason = net.unavailable() or unavailable(name)
    if reason and os.environ.get("CI"):
        pytest.fail(f"cannot partition {name} in CI: {reason}", pytrace=False)
    if reason:
        pytest.skip(reason)
    async with on_hosts(name, tmp_path) as target:
        report = await soak(target, PARTITIONS_SHORT, tmp_path)
    print(report.summary())
    assert report.ok, report.summary() + "\n" + "\n".join(report.problems())
    assert report.completed_once + report.explained == report.jobs
    assert sum(report.partitions.values()) == len(PARTITIONS_SHORT.partitions)
