"""A three-node RabbitMQ cluster (private nodes on this machine) with quorum queues: workers and
a producer on a URL that lists the three nodes, with the metadata store on the shared Redis;
the node every client connected to first is killed mid-run. Clients reconnect to the next
node, the quorum queues elect new leaders, and no accepted job is lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import case_redis
from tests.topologies.run import rabbitmq
from tests.topologies.servers import missing

pytestmark = pytest.mark.slow


async def test_workers_go_on_through_the_other_nodes(tmp_path: Path) -> None:
    reason = case_redis.CASE.unavailable()
    if reason is not None:
        missing(reason)
    run = await rabbitmq(tmp_path)
    print(run.row())
    assert run.problems() == []
    assert run.lost == 0, run.report.lost
