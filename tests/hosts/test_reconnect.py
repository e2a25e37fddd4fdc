"""A backend whose connection hangs in a network cut (no reset reaches it: TCP retransmits
with a backoff that doubles, so a reply can stay away for as long again as the cut lasted)
answers again within about its URL's ``timeout`` of the heal: the connection is dropped and a
fresh one made, as a worker needs to be back at work soon after a link heals. The call is made
from this process, whose own link to the server host is cut."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable
from pathlib import Path

import pytest

from relaymq.backends import connect
from relaymq.backends.base import Backend
from relaymq.errors import BackendError
from relaymq.job import JobState
from tests.hosts import net
from tests.hosts.servers import NAMES, on_hosts
from tests.soak.targets import unavailable

TIMEOUT = 1.0
"""The URLs' ``timeout``: how long a silent connection is kept."""
CUT = 7.0
"""Long enough that a retransmission sent into the cut comes about 5 s after the heal."""
BOUND = 3 * TIMEOUT


def _with_timeout(name: str, url: str) -> str:
    joined = "&" if "?" in url else "?"
    if name == "rabbitmq_redis":  # the metadata store answers the call below
        return url.replace("%3Fprefix%3Dsoak", f"%3Fprefix%3Dsoak%26timeout%3D{TIMEOUT:g}")
    if name == "mongodb":
        return f"{url}{joined}timeoutMS={TIMEOUT * 1000:g}"
    return f"{url}{joined}timeout={TIMEOUT:g}"


async def _answer(
    backend: Backend, first: asyncio.Task[dict[JobState, int]]
) -> dict[JobState, int]:
    """The first call's answer, or, once it failed, that of the next (as a worker tries
    again)."""
    call: Awaitable[dict[JobState, int]] = first
    while True:
        try:
            return await call
        except BackendError:
            call = backend.counts("q")


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("name", NAMES)
async def test_a_backend_answers_again_soon_after_a_long_cut_heals(
    name: str, tmp_path: Path
) -> None:
    reason = net.unavailable() or unavailable(name)
    if reason and os.environ.get("CI"):
        pytest.fail(f"cannot partition {name} in CI: {reason}", pytrace=False)
    if reason:
        pytest.skip(reason)
    async with on_hosts(name, tmp_path, workers=1) as target:
        assert target.network is not None
        backend = await connect(_with_timeout(name, target.url))
        try:
            await backend.counts("q")  # connected: the pool holds a live connection
            target.network.hosts.isolate_server(True, from_self=True)
            try:
                asked = asyncio.create_task(backend.counts("q"))  # its data goes into the cut
                await asyncio.sleep(CUT)  # the fault: the cut lasts this long
            finally:
                target.network.hosts.isolate_server(False, from_self=True)
            healed = time.monotonic()
            async with asyncio.timeout(30):  # the backend answering at all
                answered = await _answer(backend, asked)
            took = time.monotonic() - healed
        finally:
            await backend.close()
    assert answered.get(JobState.WAITING, 0) == 0
    assert took <= BOUND, f"{name} answered {took:.1f}s after the heal (bound {BOUND}s)"
