"""Redis Sentinel: a primary, a replica and three sentinels (private processes); workers and a
producer on a ``redis+sentinel://`` URL; the primary is killed mid-run, the sentinels promote
the replica, and the workers follow the new primary on their own. The killed primary then
restarts and the sentinels make it a replica. Replication is asynchronous: with
``wait_replicas=1`` an enqueue returns only once the replica has it (``WAIT``), and no
accepted job is lost; without it the jobs the replica had not received yet are (counted)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from relaymq.backends import connect
from relaymq.backends.redis import RedisBackend
from relaymq.errors import ConfigError
from tests.support.jobs import new_job
from tests.topologies.run import sentinel
from tests.topologies.sentinel import SentinelSet
from tests.topologies.tls import make_certificates

pytestmark = pytest.mark.slow


async def test_a_sentinel_url_reaches_the_primary_the_sentinels_name(tmp_path: Path) -> None:
    servers = SentinelSet(tmp_path)
    await asyncio.to_thread(servers.start)
    try:
        backend = await connect(servers.url("?prefix=topo"))
        try:
            assert isinstance(backend, RedisBackend)
            await backend.enqueue([new_job("q", "via-sentinel")])
            [job] = (await backend.claim(["q"], "w", 1)).jobs
            assert job.id == "via-sentinel"
        finally:
            await backend.close()
    finally:
        servers.stop()


@pytest.mark.parametrize("wait", [True, False], ids=["wait_replicas=1", "no WAIT"])
async def test_workers_follow_the_new_primary(tmp_path: Path, wait: bool) -> None:
    run = await sentinel(wait)(tmp_path)
    print(run.row())
    assert run.problems() == []
    if wait:
        assert run.lost == 0, run.report.lost


async def test_a_tls_sentinel_url_reaches_the_primary_over_tls(tmp_path: Path) -> None:
    """``rediss+sentinel://``: the sentinels and the primary listen on TLS only, so a job
    enqueued and claimed went over TLS both to the sentinels and to the primary."""
    servers = SentinelSet(tmp_path, tls=make_certificates(tmp_path / "tls"))
    await asyncio.to_thread(servers.start)
    try:
        # without the authority's certificate: a configuration error (no use trying again)
        # naming the option, with each sentinel's address and the TLS error
        untrusted = servers.url("?prefix=topo").partition("&ssl_ca_certs=")[0]
        with pytest.raises(ConfigError) as refused:
            await connect(untrusted)
        said = str(refused.value)
        assert "ssl_ca_certs=" in said and "certificate verify failed" in said
        for port in servers.sentinel_ports:
            assert f"sentinel 127.0.0.1:{port} - " in said
        assert len(said) < 1000, said  # no pages of driver settings
        backend = await connect(servers.url("?prefix=topo"))
        try:
            await backend.enqueue([new_job("q", "via-tls-sentinel")])
            [job] = (await backend.claim(["q"], "w", 1)).jobs
            assert job.id == "via-tls-sentinel"
        finally:
            await backend.close()
    finally:
        servers.stop()
