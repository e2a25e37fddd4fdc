"""A RabbitMQ backend whose link to the broker is cut while data it sent is in flight (a
publish waiting for its confirm) takes and hands out jobs through the broker again within about
its URL's ``timeout`` of the heal, as the other backends answer again (test_reconnect.py): the
broker connection is dropped and a fresh one made, not left waiting for TCP to retransmit into
a link that healed long ago. Only the broker's port is cut: the metadata store keeps
answering, so what is measured is the broker connection alone."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from relaymq.backends import connect
from relaymq.backends.base import Backend
from relaymq.errors import BackendError
from relaymq.job import NewJob
from tests.hosts import net
from tests.hosts.servers import on_hosts
from tests.hosts.test_reconnect import BOUND, CUT, TIMEOUT, _with_timeout
from tests.soak.targets import unavailable

BROKER_PORT = 5672
"""The private node's port on the server host (tests/soak/targets.py)."""


def _job(job_id: str) -> NewJob:
    return NewJob(queue="q", id=job_id, task="t", payload=b"{}")


async def _enqueued(backend: Backend, job_id: str) -> None:
    """Enqueue ``job_id``, again after each failure, as a producer does."""
    while True:
        try:
            await backend.enqueue([_job(job_id)])
            return
        except BackendError:
            await asyncio.sleep(0.1)  # a retry pause, not a wait for an event


async def _claimed(backend: Backend) -> str:
    """The id of the first job a claim takes, claiming again as a worker does (waiting for
    the broker's next delivery between two claims that took nothing)."""
    while True:
        try:
            batch = await backend.claim(["q"], "w", 1)
            if batch.jobs:
                return batch.jobs[0].id
            await backend.wait(["q"], 0.2)
        except BackendError:
            await asyncio.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_rabbitmq_worker_takes_jobs_again_soon_after_its_broker_link_heals(
    tmp_path: Path,
) -> None:
    name = "rabbitmq_redis"
    reason = net.unavailable() or unavailable(name)
    if reason and os.environ.get("CI"):
        pytest.fail(f"cannot partition {name} in CI: {reason}", pytrace=False)
    if reason:
        pytest.skip(reason)
    async with on_hosts(name, tmp_path, workers=1) as target:
        assert target.network is not None
        hosts = target.network.hosts
        url = f"{_with_timeout(name, target.url)}&timeout={TIMEOUT:g}"
        backend = await connect(url)
        try:
            await _enqueued(backend, "before")
            assert await _claimed(backend) == "before"  # connected, consuming
            hosts.isolate_server(True, from_self=True, ports=[BROKER_PORT])
            cut = time.monotonic()
            try:
                # its publish goes into the cut: the store has the job, the broker not yet
                await asyncio.wait_for(_enqueued(backend, "during"), CUT)
                await asyncio.sleep(cut + CUT - time.monotonic())  # the cut lasts CUT
            finally:
                hosts.isolate_server(False, from_self=True)
            healed = time.monotonic()
            async with asyncio.timeout(30):  # the broker handing out jobs at all
                await _enqueued(backend, "after")
                first = await _claimed(backend)
            took = time.monotonic() - healed
        finally:
            await backend.close()
    print(f"a job was claimed {took:.1f}s after the heal")
    assert first in ("during", "after")
    assert took <= BOUND, f"a job was claimed {took:.1f}s after the heal (bound {BOUND}s)"
