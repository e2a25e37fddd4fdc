"""``queue_type=quorum`` on the shared node: one quorum queue per priority band (RabbitMQ 3.x
quorum queues have no priorities), claimed highest band first, the broker's order within a
band. (The three-node cluster is test_rabbitmq_cluster.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from relaymq.backends.memory import InMemoryBackend
from relaymq.backends.rabbitmq.config import parse
from relaymq.errors import ConfigError
from tests.rabbitmq import support
from tests.support.jobs import new_job, queue_name
from tests.topologies.servers import missing


async def test_priorities_are_kept_by_band(tmp_path: Path) -> None:
    reason = support.broker_unavailable()
    if reason is not None:
        missing(reason)
    url = support.url(tmp_path, "memory://", f"{support.AMQP_URL}?queue_type=quorum")
    backend = support.TestRabbitMQBackend(url, store=InMemoryBackend("memory://"))
    await backend.connect()
    try:
        q = queue_name("bands")
        # bands of 0..10 in three: 0-3, 4-7, 8-10
        await backend.enqueue([new_job(q, f"p{p}", priority=p) for p in (9, 0, 5, 10, 3, 4)])
        assert backend.broker_queues == sorted(
            f"{backend.options.prefix}{q}.p{b}" for b in range(3)
        )
        order = []
        while batch := (await backend.claim([q], "w", 1)).jobs:
            order += [j.id for j in batch]
        assert order == ["p0", "p3", "p5", "p4", "p9", "p10"]  # by band, the broker's FIFO within
    finally:
        await backend.close()


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ("queue_type=quorom", "queue_type must be classic or quorum"),
        ("priority_bands=2", "priority_bands is for queue_type=quorum"),
        ("queue_type=quorum&priority_bands=12", "priority_bands must be between 1"),
        ("queue_typ=quorum", "unknown RabbitMQ URL option queue_typ"),
    ],
)
def test_quorum_options_are_checked(options: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse(f"amqp://guest:guest@h1:5672,h2:5673/?{options}")
