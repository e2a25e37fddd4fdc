"""Network faults on the test hosts, each undone in a ``finally`` (a failed or cancelled soak
leaves no link cut), each recorded with its wall-clock start and end:

- ``blip``: one worker host cut off for 0.4 stalled thresholds (shorter than the threshold:
  nothing should be recovered);
- ``cut``: one worker host cut off for longer than the threshold (1.6 of them, or the
  profile's ``cut`` seconds) while its handlers run, then healed;
- ``lossy``: 20 % of the packets dropped and about 200 ms (with jitter) added to each round
  trip, on the link of the host that talks through the delay proxy, for ``lossy`` seconds;
- ``server``: the server cut off from every worker host (its firewall drops their packets)
  for as long as a ``cut``;
- ``flap``: one worker host's link down and up in turn, half a threshold each, ``flaps``
  times.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

from tests.hosts.servers import Network

KINDS = ("blip", "cut", "lossy", "server", "flap")
LOSS = 20
"""Percent of packets the ``lossy`` fault drops."""


@dataclass(frozen=True)
class Partition:
    kind: str
    hosts: tuple[int, ...]
    """The worker hosts cut off (or slowed)."""
    start: float
    end: float
    """Wall clock: when the fault began and when it was fully undone."""


@dataclass(frozen=True)
class Lengths:
    cut: float
    lossy: float
    flaps: int
    flap: float
    """Seconds down, then up, per flap."""

    @classmethod
    def of(cls, stalled: float, cut: float = 0.0, lossy: float = 60.0, flaps: int = 2) -> Lengths:
        return cls(cut or 1.6 * stalled, lossy, flaps, stalled / 2)


async def partition(
    kind: str, network: Network, rng: random.Random, stalled: float, lengths: Lengths
) -> Partition:
    hosts = network.hosts
    one = rng.randint(1, hosts.workers)
    start = time.time()
    if kind in ("blip", "cut"):
        cut = (one,)
        hosts.cut(cut)
        try:
            await asyncio.sleep(0.4 * stalled if kind == "blip" else lengths.cut)
        finally:
            hosts.heal(cut)
        return Partition(kind, cut, start, time.time())
    if kind == "lossy":
        slow = network.proxied
        hosts.lossy(slow, LOSS)
        network.slow(True)
        try:
            await asyncio.sleep(lengths.lossy)
        finally:
            network.slow(False)
            hosts.lossy(slow, 0)
        return Partition(kind, (slow,), start, time.time())
    if kind == "server":
        hosts.isolate_server(True)
        try:
            await asyncio.sleep(lengths.cut)
        finally:
            hosts.isolate_server(False)
        return Partition(kind, tuple(range(1, hosts.workers + 1)), start, time.time())
    if kind == "flap":
        for _ in range(lengths.flaps):
            hosts.cut([one])
            try:
                await asyncio.sleep(lengths.flap)
            finally:
                hosts.heal([one])
            await asyncio.sleep(lengths.flap)
        return Partition(kind, (one,), start, time.time())
    raise ValueError(f"unknown partition kind {kind!r}: one of {', '.join(KINDS)}")
