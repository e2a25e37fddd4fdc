"""PostgreSQL failover: a primary and its streaming replica (private instances), a URL that
lists both with ``target_session_attrs=read-write``, producers and worker processes running;
the primary is killed mid-run and the replica promoted. Workers reconnect on their own and go
on. With synchronous replication no accepted job is lost; with asynchronous replication the
jobs committed on the primary but not yet sent are (counted: ``python -m tests.topologies.run
postgres-lag`` makes the replica lag to show them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.topologies.run import postgres

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("synchronous", [True, False], ids=["synchronous", "asynchronous"])
async def test_workers_follow_a_promoted_replica(tmp_path: Path, synchronous: bool) -> None:
    run = await postgres(synchronous)(tmp_path)
    print(run.row())
    assert run.problems() == []
    if synchronous:
        assert run.lost == 0, run.report.lost
