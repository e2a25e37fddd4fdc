"""A server that accepts connections but never answers: connect fails within its deadline with
an error that names the server, on every backend with a network server."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import quote

import pytest

from relaymq.backends import connect
from relaymq.errors import BackendUnavailableError
from tests.support.blackhole import black_hole
from tests.support.jobs import get_job

URLS = {
    "redis": "redis://127.0.0.1:{port}/0?timeout=1",
    "postgres": "postgresql://postgres@127.0.0.1:{port}/db?timeout=1",
    "rabbitmq": "amqp://guest:guest@127.0.0.1:{port}/?timeout=1&store="
    + quote("memory://", safe=""),
    "mongodb": "mongodb://127.0.0.1:{port}/db?serverSelectionTimeoutMS=1000&connectTimeoutMS=1000",
}


@pytest.mark.parametrize("kind", sorted(URLS))
async def test_connect_gives_up_and_names_the_server(kind: str) -> None:
    async with black_hole() as port:
        started = time.monotonic()
        with pytest.raises(BackendUnavailableError) as e:
            async with asyncio.timeout(20):  # the backend's own deadline must come first
                backend = await connect(URLS[kind].format(port=port))
                await get_job(backend, "q", "j")  # MongoDB connects lazily: the first call
        assert time.monotonic() - started < 15
        assert f"127.0.0.1:{port}" in str(e.value), str(e.value)
