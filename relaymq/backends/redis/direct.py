"""The backend's own command path for a plain (non-cluster) Redis: pipelined, on few sockets.

redis-py's ``execute_command`` costs tens of microseconds of Python per call (pool checkout,
retry wrapper, observability hooks, Python RESP packing); a worker makes two calls per batch of
jobs, so that was a large share of its CPU. ``Link.run`` sends a list of commands packed in C
(hiredis) in one write on a connection it keeps, and reads the replies in order. It keeps the
guarantees of the client it replaces:

- a failed write or read (the server restarted, the socket broke) closes the connection, and
  the whole list is sent once more on a fresh connection, as redis-py's ``Retry(..., 1)`` did;
  the second failure is raised (and translated by the caller);
- an error reply (``NOSCRIPT``, ``WRONGTYPE``, a script error) is returned in its place, as
  an exception instance, after the following replies were read: the connection stays in step;
- a cancelled call closes its connection (redis-py does that inside the read), so a reply that
  is still on its way is never read as the answer to the next command.

Cluster clients keep redis-py's path: they route each key to its node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis import exceptions as rex

_pack_one: Any
try:
    from hiredis import pack_command as _pack_one
except ImportError:  # pragma: no cover - hiredis is in the redis extra
    _pack_one = None

RETRY_PAUSE = 0.05
"""Seconds before the one retry on a fresh connection (a restarting server needs a moment)."""
BROKEN = (rex.ConnectionError, rex.TimeoutError, OSError)


class Link:
    """Pipelined command lists over connections taken once from ``client``'s pool."""

    def __init__(self, client: Any) -> None:
        self._pool = client.connection_pool
        self._spare: list[Any] = []

    def pack(self, conn: Any, commands: Sequence[tuple[Any, ...]]) -> Any:
        if _pack_one is not None:
            return b"".join([_pack_one(c) for c in commands])
        return conn.pack_commands(commands)

    async def run(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """The replies to ``commands`` in order; error replies as exception instances."""
        conn = self._spare.pop() if self._spare else await self._pool.get_connection()
        try:
            packed = self.pack(conn, commands)
            try:
                replies = await _exchange(conn, packed, len(commands))
            except BROKEN:
                await conn.disconnect(nowait=True)
                await asyncio.sleep(RETRY_PAUSE)
                replies = await _exchange(conn, packed, len(commands))  # reconnects first
        except BaseException:
            await conn.disconnect(nowait=True)
            raise
        finally:
            self._spare.append(conn)  # a closed one reconnects on its next write
        return replies


async def _exchange(conn: Any, packed: Any, n: int) -> list[Any]:
    if not conn.is_connected:
        # connect() itself, not the reconnect inside send_packed_command: a Sentinel
        # connection asks the sentinels where the primary is in connect() only
        await conn.connect()
    await conn.send_packed_command(packed, check_health=False)
    replies: list[Any] = []
    for _ in range(n):
        try:
            replies.append(await conn.read_response())
        except rex.ResponseError as e:
            replies.append(e)
    return replies
