"""Connect-time checks, URL options, and the cost of an idle worker, on a private server."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import warnings
from pathlib import Path

import pytest
from redis.asyncio import Redis

from relaymq.backends import connect
from relaymq.backends.redis import DurabilityWarning, EvictionPolicyWarning, RedisBackend
from relaymq.backends.redis.config import parse_url
from relaymq.errors import BackendUnavailableError, ConfigError
from relaymq.job import JobState
from tests.redis.server import PrivateRedis
from tests.support.jobs import new_job, queue_name
from tests.support.waiting import poll_until


async def test_evicting_server_is_warned_about(tmp_path: Path) -> None:
    server = PrivateRedis(
        tmp_path / "r", "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"
    )
    server.start()
    try:
        with pytest.warns(EvictionPolicyWarning, match="allkeys-lru"):
            backend = await connect(server.url)
        await backend.close()
    finally:
        server.kill()


async def test_noeviction_server_connects_quietly(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path / "r", "--maxmemory-policy", "noeviction")
    server.start()
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            backend = await connect(server.url)
        await backend.close()
        assert [w.message for w in seen if issubclass(w.category, EvictionPolicyWarning)] == []
    finally:
        server.kill()


async def test_idle_wait_makes_about_one_request_a_second(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path / "r")
    server.start()
    backend = RedisBackend(server.url)
    admin = Redis.from_url(server.url)
    try:
        await backend.connect()
        q = queue_name("idle")
        await backend.wait([q], 0.1)  # scripts loaded, connections open
        await admin.config_resetstat()
        for _ in range(2):
            await backend.wait([q], 1.0)
        stats = await admin.info("commandstats")
        calls = {k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()}
        # Per wait: one check script and one BLPOP from the client; the rest ran inside the
        # script (commandstats counts those too).
        assert (calls.get("evalsha"), calls.get("blpop")) == (2, 2), calls
        inside_the_script = {"time", "exists", "zcard", "zrange", "config|resetstat"}
        assert set(calls) - {"evalsha", "blpop"} <= inside_the_script, calls
        # and an enqueue wakes a blocked wait at once
        waiter = asyncio.create_task(backend.wait([q], 30))

        async def blocked() -> bool:
            return int((await admin.info("clients"))["blocked_clients"]) >= 1

        await poll_until(blocked, "the server to see the wait blocked in BLPOP")
        assert not waiter.done()
        await backend.enqueue([new_job(q)])
        async with asyncio.timeout(2):  # the enqueue waking the blocked wait
            await waiter
    finally:
        await admin.aclose()
        await backend.close()
        server.kill()


def test_url_options() -> None:
    o = parse_url("redis://h:1/2?prefix=p1&health_check_interval=3")
    assert (o.client_url, o.cluster, o.prefix) == (
        "redis://h:1/2?health_check_interval=3",
        False,
        "p1",
    )
    c = parse_url("redis+cluster://u:pw@a:7101,b:7102")
    assert c.cluster and c.client_url == "redis://u:pw@a:7101" and c.prefix == "relaymq"
    assert c.startup_nodes == (("a", 7101), ("b", 7102))
    assert parse_url("redis://h", prefix="kw").prefix == "kw"
    with pytest.raises(ConfigError):
        parse_url("redis+cluster://h:1/3")
    with pytest.raises(ConfigError):
        RedisBackend("redis://h", prefix="a{b}")


async def test_priority_outside_the_exact_score_range_is_rejected(tmp_path: Path) -> None:
    backend = RedisBackend("redis://127.0.0.1:1/0")  # never connected: validation comes first
    with pytest.raises(ConfigError, match="priority"):
        await backend.enqueue([new_job("q", priority=4096)])


def test_lua_and_python_agree_on_the_job_fields() -> None:
    import re
    from importlib.resources import files

    from relaymq.backends.redis.keys import JOB_FIELDS

    lib = (files("relaymq.backends.redis") / "scripts" / "lib.lua").read_text()
    block = lib[lib.index("local FIELDS = {") : lib.index("}", lib.index("local FIELDS = {"))]
    assert re.findall(r"'(\w+)'", block) == JOB_FIELDS


def test_lua_and_python_agree_on_the_job_states() -> None:
    """lib.lua's STATES mirrors relaymq.backends.corrupt.STATES: a state missing there would
    quarantine live jobs, one too many would leave damage in line."""
    import re
    from importlib.resources import files

    from relaymq.backends.corrupt import STATES

    lib = (files("relaymq.backends.redis") / "scripts" / "lib.lua").read_text()
    block = lib[lib.index("local STATES = {") : lib.index("}", lib.index("local STATES = {"))]
    assert set(re.findall(r"(\w+) = true", block)) == STATES


def test_every_script_is_loaded_and_opens_with_its_header() -> None:
    from importlib.resources import files

    from relaymq.backends.redis.scripts import NAMES

    folder = files("relaymq.backends.redis") / "scripts"
    found = {p.name.removesuffix(".lua") for p in folder.iterdir() if p.name.endswith(".lua")}
    assert found - {"lib"} == set(NAMES)
    for name in NAMES:
        lines = (folder / f"{name}.lua").read_text().splitlines()
        header = "\n".join(lines[: next(i for i, s in enumerate(lines) if not s.startswith("--"))])
        assert header.startswith(f"-- {name}.lua: "), name
        for part in ("KEYS", "ARGV", "Returns"):
            assert f"-- {part}" in header, (name, part)


async def test_a_server_that_keeps_nothing_on_disk_is_warned_about_and_not_durable(
    tmp_path: Path,
) -> None:
    server = PrivateRedis(tmp_path / "r", "--appendonly", "no")
    server.start()
    try:
        with pytest.warns(DurabilityWarning, match="appendonly is off"):
            backend = await connect(server.url)
        try:
            assert backend.capabilities.durable is False
            assert RedisBackend.capabilities.durable is True  # other handles are unaffected
        finally:
            await backend.close()
    finally:
        server.kill()


async def test_a_persisting_server_is_durable_and_quiet(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path / "r", "--appendonly", "yes")
    server.start()
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            backend = await connect(server.url)
        try:
            assert backend.capabilities.durable is True
        finally:
            await backend.close()
        assert [w.message for w in seen if issubclass(w.category, DurabilityWarning)] == []
    finally:
        server.kill()


def test_a_redis_database_must_be_a_number() -> None:
    with pytest.raises(ConfigError, match="is a number"):
        parse_url("redis://h:6379/abc")
    assert parse_url("redis://h:6379/3").client_url == "redis://h:6379/3"


async def test_a_server_that_stops_answering_fails_calls_within_the_deadline(
    tmp_path: Path,
) -> None:
    server = PrivateRedis(tmp_path / "r")
    server.start()
    assert server.proc is not None
    backend = await connect(server.url.replace("/0", "/0?timeout=1"))
    q = queue_name("frozen")
    try:
        await backend.enqueue([new_job(q, "a")])
        os.kill(server.proc.pid, signal.SIGSTOP)  # the server holds its sockets and says nothing
        try:
            started = time.monotonic()
            with pytest.raises(BackendUnavailableError, match="did not answer within 1s"):
                async with asyncio.timeout(10):  # the backend's own deadline must come first
                    await backend.counts(q)
            assert time.monotonic() - started < 5
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        assert (await backend.counts(q))[JobState.WAITING] == 1  # and it recovers
    finally:
        await backend.close()
        server.kill()
