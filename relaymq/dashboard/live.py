"""Live pages over Server-Sent Events: one backend subscription per dashboard, fanned out.

However many browsers watch, the dashboard holds one event subscription and reads a queue's
counts at most once per ``interval`` while its jobs change (and not at all while nothing
happens): pages are pushed what changed, they never poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field

import orjson

from relaymq.events import JOB_PROGRESS, Event
from relaymq.instrumented import Instrumented

log = logging.getLogger("relaymq.dashboard")

KEEPALIVE = 15.0
"""Seconds between two comments on an idle stream (proxies close silent connections)."""
RESUBSCRIBE_AFTER = 1.0
"""Seconds before subscribing again when the backend's subscription ended or failed."""
CLIENT_BUFFER = 1000
"""Messages buffered for one slow browser before it is dropped (it reconnects by itself)."""


@dataclass(eq=False)
class Client:
    """One browser's stream: the job it follows (its job page), or the queue whose jobs'
    progress it shows (its queue page), if any."""

    job: tuple[str, str] | None = None
    queue: str | None = None
    inbox: asyncio.Queue[bytes | None] = field(default_factory=lambda: asyncio.Queue(CLIENT_BUFFER))

    def send(self, message: bytes) -> None:
        try:
            self.inbox.put_nowait(message)
        except asyncio.QueueFull:  # too slow: end its stream; EventSource reconnects
            self.end()

    def end(self) -> None:
        with contextlib.suppress(asyncio.QueueEmpty):
            while True:
                self.inbox.get_nowait()
        self.inbox.put_nowait(None)


def sse(name: str, data: object) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class Hub:
    """Reads the backend's events and tells each client what concerns it: ``counts`` (a
    queue's counts and paused flag, after its jobs changed) and ``job`` (an event of the job a
    client follows)."""

    def __init__(self, ops: Instrumented, interval: float = 0.5) -> None:
        self.ops = ops
        self.interval = interval
        self.clients: set[Client] = set()
        self.counts_read = 0
        """How many times a queue's counts were read for the live pages."""
        self._dirty: set[str] = set()
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.ready = asyncio.Event()
        """Set once the subscription is live (events from then on reach the clients)."""

    def _start(self) -> None:
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._read(), name="relaymq-dashboard-events"),
                asyncio.create_task(self._publish_counts(), name="relaymq-dashboard-counts"),
            ]

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks = []
        for c in self.clients:
            c.end()

    async def stream(
        self, job: tuple[str, str] | None = None, queue: str | None = None
    ) -> AsyncIterator[bytes]:
        """A client's stream, until it goes away: every queue's counts, and the events of
        ``job`` (or the progress of ``queue``'s jobs)."""
        self._start()
        client = Client(job, queue)
        self.clients.add(client)
        try:
            yield b"retry: 2000\n\n"
            while True:
                try:
                    message = await asyncio.wait_for(client.inbox.get(), KEEPALIVE)
                except TimeoutError:
                    yield b": keepalive\n\n"
                    continue
                if message is None:
                    return
                yield message
        finally:
            self.clients.discard(client)

    async def _read(self) -> None:
        while True:
            try:
                subscription = await self.ops.subscribe()
                self.ready.set()
                try:
                    async for event in subscription:
                        self._dispatch(event)
                finally:
                    await subscription.aclose()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("dashboard: the event subscription failed (%s); subscribing again", e)
            self.ready.clear()
            await asyncio.sleep(RESUBSCRIBE_AFTER)  # a pause between attempts, not a wait

    def _dispatch(self, event: Event) -> None:
        if event.name.startswith(("job:", "queue:")):
            self._dirty.add(event.queue)
            self._changed.set()
        if event.job_id is None:
            return
        key = (event.queue, event.job_id)
        progress = event.name == JOB_PROGRESS
        message: bytes | None = None
        for c in self.clients:
            if c.job == key or (progress and c.queue == event.queue):
                message = message or sse("job", asdict(event))
                c.send(message)

    async def _publish_counts(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            dirty, self._dirty = self._dirty, set()
            if self.clients:
                for queue in sorted(dirty):
                    try:
                        counts = await self.ops.counts(queue)
                        paused = await self.ops.is_paused(queue)
                    except Exception as e:
                        log.warning("dashboard: could not read %s's counts (%s)", queue, e)
                        continue
                    self.counts_read += 1
                    message = sse(
                        "counts",
                        {
                            "queue": queue,
                            "paused": paused,
                            "counts": {s.value: n for s, n in counts.items()},
                        },
                    )
                    for c in self.clients:
                        c.send(message)
            await asyncio.sleep(self.interval)  # coalesce: at most one reading per interval
