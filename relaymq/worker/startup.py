"""A worker's start against a backend that is not up yet: wait for it, within a bound.

A worker often starts before its backend answers (docker compose, Kubernetes, a rolling
database restart). ``patiently`` tries a call again while the backend is unreachable (refused
connections, a server that answers "starting up" or "in recovery": ``BackendUnavailableError``)
with capped exponential backoff and jitter, one log line per attempt, until ``timeout`` passes;
then the last error goes up (the CLI exits 3). A server that answers with an error of its own
(``BackendError``: a database locked for a moment, a primary being elected) is waited out the
same way. What cannot succeed on a second try goes up at once: a ``ConfigError`` (a
configuration the backend refuses), a record it cannot read or refuses to store, and every
error that is not the backend's.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import urlsplit

from relaymq.errors import (
    BackendError,
    CorruptRecordError,
    RecordRefusedError,
)

T = TypeVar("T")

log = logging.getLogger("relaymq.worker")

FIRST_PAUSE = 0.5
"""Seconds before the second attempt; each later pause doubles, up to ``MAX_PAUSE``."""

MAX_PAUSE = 8.0

_NAMES = {
    "postgresql": "PostgreSQL",
    "postgres": "PostgreSQL",
    "redis": "Redis",
    "rediss": "Redis",
    "redis+cluster": "Redis Cluster",
    "rediss+cluster": "Redis Cluster",
    "redis+sentinel": "Redis Sentinel",
    "rediss+sentinel": "Redis Sentinel",
    "mongodb": "MongoDB",
    "amqp": "RabbitMQ",
    "amqps": "RabbitMQ",
    "sqlite": "SQLite",
}


def describe(url: str) -> str:
    """How log lines name the server at ``url``: its kind and ``host:port`` (never the
    credentials or the query)."""
    parts = urlsplit(url)
    name = _NAMES.get(parts.scheme.lower(), parts.scheme or "the backend")
    listed = parts.netloc.rpartition("@")[2]
    if not listed or parts.scheme.lower() in ("sqlite", "memory"):
        return name
    return f"{name} at {listed}"  # host:port, or several for a failover URL


def reason(e: BaseException) -> str:
    """The short reason of an unreachable backend: the driver's own words when there are some
    (``the database system is starting up``), else relaymq's message."""
    cause = e.__cause__
    while cause is not None and cause.__cause__ is not None and not str(cause).strip():
        cause = cause.__cause__
    text = str(cause).strip() if cause is not None else ""
    return text or str(e)


def pause(attempt: int, rng: random.Random | None = None) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1, 2, ...): doubling from
    ``FIRST_PAUSE``, capped at ``MAX_PAUSE``, times a random factor in [0.5, 1] so that
    workers started together do not knock together."""
    base: float = min(MAX_PAUSE, FIRST_PAUSE * 2.0 ** (attempt - 1))
    jitter: float = (rng or random).uniform(0.5, 1.0)
    return base * jitter


FOR_GOOD = (CorruptRecordError, RecordRefusedError)
"""Backend errors that the same call meets again: never waited out."""


async def patiently(
    call: Callable[[], Awaitable[T]],
    what: str,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """``call()``, tried again while it raises a ``BackendError`` that may pass (the server
    unreachable, or answering with an error of its own) until ``timeout`` seconds have passed
    (0: once). ``what`` names the server in the log lines."""
    deadline = clock() + timeout
    attempt = 0
    while True:
        attempt += 1
        try:
            return await call()
        except FOR_GOOD:
            raise
        except BackendError as e:
            left = deadline - clock()
            if left <= 0:
                if timeout > 0:
                    raise type(e)(
                        f"{e} (gave up after waiting {timeout:g}s: --connect-timeout, "
                        "RELAYMQ_CONNECT_TIMEOUT)"
                    ) from e
                raise
            wait = min(pause(attempt), left)
            log.warning("waiting for %s (%s); next try in %.1fs", what, reason(e), wait)
        await sleep(wait)  # the backoff between two attempts to reach the server
