"""Fan-out of event messages to the subscribers inside one process.

A backend that receives events once per process (its own publishes, a LISTEN connection) hands
each message here; every live subscription gets its own copy, in arrival order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterable


class Fanout:
    def __init__(self) -> None:
        self._inboxes: set[asyncio.Queue[bytes]] = set()

    def deliver(self, messages: Iterable[bytes]) -> None:
        """Give every current subscriber each message."""
        for message in messages:
            for inbox in self._inboxes:
                inbox.put_nowait(message)

    def subscribe(self) -> AsyncGenerator[bytes, None]:
        """A subscription, live from this call on; closing the generator ends it."""
        inbox: asyncio.Queue[bytes] = asyncio.Queue()
        self._inboxes.add(inbox)

        async def messages() -> AsyncGenerator[bytes, None]:
            try:
                while True:
                    yield await inbox.get()
            finally:
                self._inboxes.discard(inbox)

        return messages()
