"""Socket options the backends' TCP connections share.

``drop_when_silent``: after a network cut, a connection whose request or reply was lost would
otherwise wait for TCP's retransmissions, which back off to as long again as the cut lasted (up
to two minutes each), long after the network healed. With ``TCP_USER_TIMEOUT`` (Linux), data
it sent that stays unacknowledged that long closes it instead, and the backend makes a fresh
one.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

_TCP = (socket.AF_INET, socket.AF_INET6)
_USER_TIMEOUT: int | None = getattr(socket, "TCP_USER_TIMEOUT", None)
"""Linux's; elsewhere such a connection waits for TCP or the backend's own timeouts."""


def drop_when_silent(transport: Any, seconds: float) -> None:
    """Close the TCP connection of ``transport`` (an asyncio transport) once data it sent has
    stayed unacknowledged for ``seconds`` (0: never); nothing for a Unix socket, or where the
    option does not exist."""
    sock = transport.get_extra_info("socket")
    if _USER_TIMEOUT and seconds > 0 and sock is not None and sock.family in _TCP:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, _USER_TIMEOUT, max(1, round(seconds * 1000)))
