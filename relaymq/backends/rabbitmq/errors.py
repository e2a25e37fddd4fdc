"""aio-pika/aiormq errors translated into ``relaymq.errors`` at the backend's boundary."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import aiormq

from relaymq.errors import BackendError, BackendUnavailableError, ConfigError

T = TypeVar("T")

UNAVAILABLE: tuple[type[BaseException], ...] = (
    aiormq.exceptions.AMQPConnectionError,
    aiormq.exceptions.ChannelInvalidStateError,
    ConnectionError,
    OSError,
    TimeoutError,
)
"""Errors that mean the broker is not reachable right now."""


async def guarded(operation: Awaitable[T], within: float) -> T:
    """Await a broker operation for at most ``within`` seconds (a broker that holds the
    connection but stopped answering must not hang the caller), translating driver errors (the
    cause is kept)."""
    try:
        async with asyncio.timeout(within):
            return await operation
    except (ConfigError, BackendError):
        raise
    except TimeoutError as e:
        raise BackendUnavailableError(f"RabbitMQ did not answer within {within:g}s") from e
    except UNAVAILABLE as e:
        raise BackendUnavailableError(f"RabbitMQ unavailable: {e!r}") from e
    except aiormq.exceptions.AMQPError as e:
        raise BackendError(f"RabbitMQ error: {e!r}") from e
