"""Everything the broker sees: queue names, the one declaration, priorities, message bodies.

Each relaymq queue is one durable classic broker queue named ``<prefix><queue>``, declared with
``x-max-priority`` (and ``x-expires`` when configured). Messages are persistent and carry only
``<priority> <token> <job id>``: the job itself lives in the metadata store.

With ``queue_type=quorum`` (replicated queues, which have no priorities before RabbitMQ 4)
each relaymq queue is one quorum queue per priority band, ``<prefix><queue>.p<band>``: band 0
holds the most urgent priorities. Priorities 0..max_priority are cut into ``priority_bands``
equal bands (the rest share the last); a claim takes from the highest band first (each band is
consumed on a channel, and window, of its own), and within a band the broker's FIFO order,
then the exact priority among what a worker holds.

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


def broker_name(prefix: str, queue: str, band: int | None = None) -> str:
    """The broker queue of ``queue`` (of one of its bands, for quorum queues)."""
    return f"{prefix}{queue}" if band is None else f"{prefix}{queue}.p{band}"


def queue_arguments(
    max_priority: int, expires_ms: int | None, queue_type: str = "classic"
) -> dict[str, Any]:
    arguments: dict[str, Any] = (
        {"x-queue-type": "quorum"} if queue_type == "quorum" else {"x-max-priority": max_priority}
    )
    if expires_ms is not None:
        arguments["x-expires"] = expires_ms
    return arguments


def band(priority: int, bands: int, max_priority: int) -> int:
    """The band (0: the most urgent) of a relaymq priority."""
    return min(max(priority, 0), max_priority) * bands // (max_priority + 1)


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
