"""The soak's targets on test hosts: private servers (persistence on, as the soak's own) run
on the server host and listen only on its address; the workers run on the worker hosts, and
those of host 1 (``Network.proxied``) talk to the delay proxy (proxy.py) on the server host's
second address, which forwards each server port to the first. So their own connections cross
their link as any worker's do (a cut or a loss reaches their TCP, not the proxy's); the proxy
only adds the delay. This process reaches the servers over its own link, which no fault
touches.

``on_hosts(name, tmp)`` opens one (``NAMES``); it makes the hosts, starts the servers and the
proxy, and removes all of it on the way out, whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.hosts.net import Hosts
from tests.soak.plan import Target

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("redis", "postgres", "mongodb", "rabbitmq_redis")
"""The backends worker processes share over a network (SQLite is one machine's file)."""


@dataclass
class Network:
    hosts: Hosts
    url: str = ""
    """The target's URL, as this process and the hosts without the proxy use it."""
    ports: list[int] = field(default_factory=list)
    """The server ports the proxy forwards."""
    proxied: int = 1
    """The worker host whose connections go through the delay proxy."""
    proxy: asyncio.subprocess.Process | None = None

    def url_on(self, host: int) -> str:
        """The URL a worker on ``host`` uses (the store's inside a RabbitMQ URL too)."""
        if host != self.proxied:
            return self.url
        near, slow = self.hosts.address, self.hosts.slow_address
        return self.url.replace(f"{near}:", f"{slow}:").replace(f"{near}%3A", f"{slow}%3A")

    async def start_proxy(self) -> None:
        hosts = self.hosts
        argv = [sys.executable, "-m", "tests.hosts.proxy", hosts.slow_address, hosts.address]
        self.proxy = await asyncio.create_subprocess_exec(
            *hosts.inside(None),
            *argv,
            *map(str, self.ports),
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=asyncio.subprocess.PIPE,
        )
        assert self.proxy.stdout is not None
        async with asyncio.timeout(30):  # the proxy is up when it says so
            line = await self.proxy.stdout.readline()
        if not line.startswith(b"READY"):
            raise RuntimeError(f"the delay proxy did not start: {line!r}")

    def slow(self, on: bool) -> None:
        """Turn the proxy's delay on or off."""
        assert self.proxy is not None
        self.proxy.send_signal(signal.SIGUSR1 if on else signal.SIGUSR2)

    async def stop_proxy(self) -> None:
        if self.proxy is not None and self.proxy.returncode is None:
            self.proxy.kill()
            await self.proxy.wait()


@contextlib.asynccontextmanager
async def on_hosts(name: str, tmp: Path, workers: int = 3) -> AsyncIterator[Target]:
    """A target ``name`` (``NAMES``) whose servers run on a server host and workers on
    ``workers`` worker hosts."""
    from tests.soak.targets import OPENERS

    network = Network(Hosts(workers))
    await asyncio.to_thread(network.hosts.open)
    try:
        async with OPENERS[name](tmp, network) as target:
            network.url = target.url
            await network.start_proxy()
            target.network = network
            yield target
    finally:
        await network.stop_proxy()
        await asyncio.to_thread(network.hosts.close)
