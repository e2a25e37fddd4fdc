"""The stall threshold of a soak on a slow server follows the server's measured latency: before
the soak, as many clients as it has workers renew a worker's worth of claims each, for a few
seconds, and the threshold is ``FACTOR`` times the 99th percentile of those heartbeats (never
under the target's own). A threshold under the heartbeat's latency makes claims look stalled
while their workers are alive: duplicates the soak would then have to explain by latency."""

from __future__ import annotations

import asyncio
import time
import uuid

from relaymq.backends import connect
from relaymq.job import Job
from relaymq.records.store import Beat
from tests.support.jobs import new_job

CLIENTS = 3
CLAIMS = 8
"""A soak worker's concurrency: the claims one heartbeat renews."""
SECONDS = 3.0
FACTOR = 4.0


async def heartbeat_p99(url: str) -> float:
    """Seconds: the 99th percentile of heartbeats of ``CLAIMS`` claims, ``CLIENTS`` at once."""
    backend = await connect(url)
    queue = f"calibrate-{uuid.uuid4().hex[:8]}"
    took: list[float] = []
    try:
        await backend.enqueue([new_job(queue) for _ in range(CLIENTS * CLAIMS)])
        held = [(await backend.claim([queue], f"c{i}", CLAIMS)).jobs for i in range(CLIENTS)]

        async def renew(jobs: list[Job]) -> None:
            until = time.monotonic() + SECONDS
            while time.monotonic() < until:
                began = time.monotonic()
                await backend.heartbeat([Beat(j.claim) for j in jobs])
                took.append(time.monotonic() - began)

        await asyncio.gather(*(renew(jobs) for jobs in held))
        await backend.obliterate(queue)
    finally:
        await backend.close()
    ordered = sorted(took)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0


async def threshold(url: str, floor: float) -> tuple[float, float]:
    """The stall threshold for a soak on ``url`` (at least ``floor``), and the p99 heartbeat."""
    p99 = await heartbeat_p99(url)
    return max(floor, round(FACTOR * p99, 1)), p99


__all__ = ["FACTOR", "heartbeat_p99", "threshold"]
