"""The supervised LISTEN connection: one per backend instance, started on first need.

It holds its own connection (not a pool one), LISTENs on the schema's wake-up channel and,
while anyone subscribes, on its event channel. When the connection drops or the server
restarts it reconnects with a short backoff, LISTENs again and tells the backend (which wakes
every waiter, since notifications sent meanwhile were lost). A ping every few seconds finds
half-open connections.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import asyncpg

from relaymq.backends import sqlfile
from relaymq.backends.postgres.config import Options
from relaymq.backends.postgres.errors import DRIVER_ERRORS
from relaymq.backends.postgres.migrations import connect_one
from relaymq.backends.postgres.notify import event_channel, wake_channel

Q = sqlfile.named_queries(__package__, "queries.sql")

PING_INTERVAL = 5.0
PING_TIMEOUT = 5.0
BACKOFF = (0.05, 0.1, 0.2, 0.5)  # then every 0.5 s: back within 10 s of the server


class Listener:
    def __init__(
        self,
        options: Options,
        on_wake: Callable[[str], None],
        on_event: Callable[[str], None],
        on_connect: Callable[[], None],
    ) -> None:
        self._options = options
        self._on_wake = on_wake
        self._on_event = on_event
        self._on_connect = on_connect
        self._con: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()  # one operation at a time on the connection
        self._events = False  # LISTEN on the event channel too
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        self.connections = 0
        """How many times the connection came up (1 at first, +1 per reconnection)."""
        self._came_up = asyncio.Event()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="relaymq-postgres-listen")

    async def ready(self, within: float) -> bool:
        """Wait up to ``within`` seconds for the connection to be listening; whether it is."""
        self.start()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):  # not wait_for: on 3.11 it can eat a cancel
                await self.connected.wait()
        return self.connected.is_set()

    async def came_up(self, times: int) -> None:
        """Return once the connection has come up ``times`` times in all."""
        while self.connections < times:
            await self._came_up.wait()

    async def listen_events(self) -> None:
        """LISTEN on the event channel from now on (raises a driver error when down)."""
        self._events = True
        async with self._lock:
            con = self._con
            if con is None or con.is_closed():
                raise ConnectionError("the LISTEN connection is down")
            await con.add_listener(event_channel(self._options.schema), self._event)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                await self._serve()
                failures = 0
            except DRIVER_ERRORS:
                pass
            finally:
                self.connected.clear()
                con, self._con = self._con, None
                if con is not None and not con.is_closed():
                    con.terminate()
            await asyncio.sleep(BACKOFF[min(failures, len(BACKOFF) - 1)])
            failures += 1

    async def _serve(self) -> None:
        lost = asyncio.Event()
        async with self._lock:
            con = self._con = await connect_one(self._options)
            con.add_termination_listener(lambda _con: lost.set())
            await con.add_listener(wake_channel(self._options.schema), self._wake)
            if self._events:
                await con.add_listener(event_channel(self._options.schema), self._event)
        self.connected.set()
        self.connections += 1
        self._came_up.set()
        self._came_up = asyncio.Event()
        self._on_connect()
        while not lost.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PING_INTERVAL):
                    await lost.wait()
                break
            async with self._lock, asyncio.timeout(PING_TIMEOUT):
                await con.fetchval(Q["ping"])

    def _wake(self, _con: object, _pid: int, _channel: str, payload: str) -> None:
        self._on_wake(payload)

    def _event(self, _con: object, _pid: int, _channel: str, payload: str) -> None:
        self._on_event(payload)
