"""Wake-ups inside one process: what a backend's own writes use to wake its idle ``wait``.

A waiter takes a ``ticket`` *before* it checks for work, then waits on that ticket; a
``notify`` made between the check and the wait is therefore never lost.
"""

from __future__ import annotations

import asyncio
import contextlib


class Wakeup:
    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        """Wake every waiter holding a current ticket."""
        self._event.set()
        self._event = asyncio.Event()

    def ticket(self) -> asyncio.Event:
        """Take before checking for work; pass to ``wait``."""
        return self._event

    async def wait(self, timeout: float, ticket: asyncio.Event | None = None) -> bool:
        """Wait until notified (True) or ``timeout`` seconds pass (False)."""
        event = ticket if ticket is not None else self._event
        if event.is_set():
            return True
        if timeout <= 0:
            return False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can eat a cancel
                await event.wait()
        return event.is_set()
