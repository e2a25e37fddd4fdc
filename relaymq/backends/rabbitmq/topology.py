"""Everything the broker sees: queue names, the one declaration, priorities, message bodies.

Each relaymq queue is one durable classic broker queue named ``<prefix><queue>``, declared with
``x-max-priority`` (and ``x-expires`` when configured). Messages are persistent and carry only
``<priority> <token> <job id>``: the job itself lives in the metadata store.

Priorities: relaymq takes lower numbers first (0 is the most urgent); the broker takes higher
numbers first, up to ``x-max-priority``. relaymq priority ``p`` is published as broker priority
``max_priority - min(p, max_priority)``, so priorities 0..max_priority keep their order on the
broker and every priority past max_priority shares the broker's lowest level. Deliveries that a
consumer has buffered are handed out by the exact relaymq priority (then arrival order).
"""

from __future__ import annotations

from typing import Any

import aiormq
from aiormq.abc import AbstractChannel

from relaymq.errors import ConfigError, CorruptRecordError


def broker_name(prefix: str, queue: str) -> str:
    return f"{prefix}{queue}"


def queue_arguments(max_priority: int, expires_ms: int | None) -> dict[str, Any]:
    arguments: dict[str, Any] = {"x-max-priority": max_priority}
    if expires_ms is not None:
        arguments["x-expires"] = expires_ms
    return arguments


async def declare(
    channel: AbstractChannel, name: str, arguments: dict[str, Any]
) -> aiormq.spec.Queue.DeclareOk:
    """Declare the broker queue ``name``: durable, classic, with ``arguments``; the reply says
    how many messages are ready in it.

    An existing queue declared with other arguments makes the broker close the channel with
    PRECONDITION_FAILED; that becomes a ``ConfigError`` telling the user what to do. (The
    channel is lost either way: declare on a channel of its own.)
    """
    try:
        return await channel.queue_declare(name, durable=True, arguments=arguments)
    except aiormq.exceptions.ChannelPreconditionFailed as e:
        raise ConfigError(
            f"the RabbitMQ queue {name!r} already exists with arguments that differ from "
            f"{arguments!r} (the broker said: {e}). Delete and recreate the queue "
            f"(rabbitmqctl delete_queue {name}), or configure the backend to match it "
            "(max_priority=..., queue_expires=... in the URL)."
        ) from e


def broker_priority(priority: int, max_priority: int) -> int:
    return max_priority - min(max(priority, 0), max_priority)


def encode(job_id: str, token: int, priority: int) -> bytes:
    return f"{priority} {token} {job_id}".encode()


def decode(body: bytes) -> tuple[str, int, int]:
    """``(job_id, token, priority)`` of a message body."""
    try:
        priority, token, job_id = body.decode().split(" ", 2)
        return job_id, int(token), int(priority)
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptRecordError(f"not a relaymq delivery: {body[:80]!r}") from e
