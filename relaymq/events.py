"""Event names, the Event record and its wire form. Subscriptions go through the backend."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from relaymq.backends.base import Backend

JOB_WAITING: Final = "job:waiting"
JOB_DELAYED: Final = "job:delayed"
JOB_ACTIVE: Final = "job:active"
JOB_PROGRESS: Final = "job:progress"
JOB_COMPLETED: Final = "job:completed"
JOB_RETRYING: Final = "job:retrying"
JOB_FAILED: Final = "job:failed"
JOB_EXPIRED: Final = "job:expired"
JOB_CANCELLED: Final = "job:cancelled"
JOB_STALLED: Final = "job:stalled"
JOB_REMOVED: Final = "job:removed"
JOB_DEDUPLICATED: Final = "job:deduplicated"
JOB_CLAIM_LOST: Final = "job:claim_lost"
QUEUE_PAUSED: Final = "queue:paused"
QUEUE_RESUMED: Final = "queue:resumed"
WORKER_ONLINE: Final = "worker:online"
WORKER_OFFLINE: Final = "worker:offline"

EVENT_NAMES: Final = frozenset(
    {
        JOB_WAITING, JOB_DELAYED, JOB_ACTIVE, JOB_PROGRESS, JOB_COMPLETED, JOB_RETRYING,
        JOB_FAILED, JOB_EXPIRED, JOB_CANCELLED, JOB_STALLED, JOB_REMOVED, JOB_DEDUPLICATED,
        JOB_CLAIM_LOST, QUEUE_PAUSED, QUEUE_RESUMED, WORKER_ONLINE, WORKER_OFFLINE,
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened to a job, a queue or a worker. ``at`` is seconds since epoch."""

    name: str
    queue: str
    at: float
    job_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def encode(self) -> bytes:
        return orjson.dumps(
            {"name": self.name, "queue": self.queue, "at": self.at, "job_id": self.job_id,
             "data": self.data}
        )  # fmt: skip

    @classmethod
    def decode(cls, raw: bytes) -> Event:
        d = orjson.loads(raw)
        return cls(d["name"], d["queue"], d["at"], d.get("job_id"), d.get("data") or {})


async def publish(backend: Backend, events: Sequence[Event]) -> None:
    """Encode and publish ``events`` in one backend call."""
    if events:
        await backend.publish([e.encode() for e in events])


async def subscribe(backend: Backend) -> AsyncGenerator[Event, None]:
    """Decoded events from ``backend``, every process; undecodable ones are skipped."""
    raw_events = await backend.subscribe()

    async def decoded() -> AsyncGenerator[Event, None]:
        try:
            async for raw in raw_events:
                try:
                    yield Event.decode(raw)
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    continue
        finally:
            await raw_events.aclose()

    return decoded()
