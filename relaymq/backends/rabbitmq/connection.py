"""The broker connection of a handle: aio-pika's robust connection over a list of brokers.

aio-pika reconnects a lost connection to the one URL it was given. Over the nodes of a
cluster, each connection attempt goes instead to the broker after the one it last tried, in
the order of the URL: a node that dies hands its clients to the next node at their first
attempt, and a list of nodes that are all down is tried round and round.

After a network cut, a connection is replaced within about the URL's ``timeout`` of the heal,
as the other backends' are: data it sent that stays unacknowledged that long closes it
(``drop_when_silent``), where aiormq's own check (heartbeats missed for three times
their interval) would keep it for longer, and TCP's retransmissions, backing off, would only
get through as long again as the cut lasted after the heal. Its heartbeat, unless the URL sets
one, is that ``timeout`` too (at least ``MIN_HEARTBEAT``): an idle connection then sends
something into any cut longer than half of it, so it is dropped then as well, and the broker
gives the deliveries the connection held to others about as soon.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import aio_pika
import aiormq.connection
from yarl import URL

from relaymq.backends.sockets import drop_when_silent

MIN_HEARTBEAT = 5
"""Seconds: a shorter heartbeat would have the broker drop a connection whose client is only
busy for a moment."""

_Factory: Any = getattr(aiormq.connection, "TransportFactory", None)
"""aiormq's seam for making the socket (7.x); without it, connections keep aiormq's own."""


class FailoverConnection(aio_pika.RobustConnection):
    """A ``RobustConnection`` whose every connection attempt reads ``url`` once: reading it
    moves to the next broker of the list."""

    def __init__(
        self, urls: Sequence[str], first: int = 0, silent_for: float = 0.0, **kwargs: Any
    ) -> None:
        self._urls = [_with_heartbeat(URL(u), silent_for) for u in urls]
        self._at = first
        self._rotating = False
        super().__init__(self._urls[first], **kwargs)
        self._rotating = True
        if silent_for > 0 and _Factory is not None:
            self.kwargs["transport_factory"] = _silent_for(silent_for)

    @property
    def url(self) -> URL:
        if not self._rotating:
            return self._urls[self._at]
        current = self._urls[self._at]
        self._at = (self._at + 1) % len(self._urls)
        return current

    @url.setter
    def url(self, value: URL) -> None:  # aio-pika sets it in __init__ (and on a new secret)
        self._urls[self._at] = URL(value)

    def __str__(self) -> str:
        shown = self._urls[self._at]
        return str(shown.with_password("******") if shown.password else shown)


async def connect(urls: Sequence[str], timeout: float) -> FailoverConnection:
    """The first broker of ``urls`` that accepts a connection, in order; the last error when
    none does. ``timeout``: seconds a connection attempt may take, and data sent may stay
    unacknowledged before the connection is dropped."""
    error: BaseException | None = None
    for first in range(len(urls)):
        connection = FailoverConnection(urls, first, timeout, reconnect_interval=1.0)
        try:
            await connection.connect(timeout=timeout)
            return connection
        except Exception as e:  # this broker is down (or refuses): the next one
            error = e
            await connection.close()
    assert error is not None
    raise error


def _with_heartbeat(url: URL, silent_for: float) -> URL:
    """``url`` with a heartbeat of ``silent_for`` seconds (at least ``MIN_HEARTBEAT``), unless
    it sets its own (aiormq reads it from the URL)."""
    if silent_for <= 0 or "heartbeat" in url.query:
        return url
    return url.update_query(heartbeat=max(MIN_HEARTBEAT, round(silent_for)))


def _silent_for(seconds: float) -> Any:
    """A transport factory of aiormq that makes aiormq's TCP or TLS connection (by the URL's
    scheme) dropped once data it sent stays unacknowledged for ``seconds``."""

    class SilentFor(_Factory):  # type: ignore[misc]
        async def create(
            self, url: URL, **kwargs: Any
        ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            tls = url.scheme == "amqps"
            made = (
                aiormq.connection.TLSTransportFactory
                if tls
                else aiormq.connection.TCPTransportFactory
            )
            reader, writer = await made().create(url, **kwargs)
            drop_when_silent(writer.transport, seconds)
            return reader, writer

    return SilentFor()
