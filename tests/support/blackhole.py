"""A TCP server on 127.0.0.1 that accepts connections and never says a word: what a client
meets behind a wrong port forwarding or a black-holing firewall."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


@asynccontextmanager
async def black_hole() -> AsyncIterator[int]:
    """Yields the port; every connection is kept open and never answered."""
    held: list[asyncio.StreamWriter] = []

    async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # read nothing, write nothing

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for writer in held:
            writer.close()
        await server.wait_closed()
