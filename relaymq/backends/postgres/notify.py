"""The NOTIFY format: the channels of a schema, and the payloads ``publish`` sends and the
dispatcher reads.

Wake-ups go out on ``wake_channel(schema)`` with the queue's name as payload, sent by the job
table's triggers and by ``resume`` (the SQL function ``relaymq_wake_channel`` computes the same
name). Each event is one notification payload on ``event_channel(schema)``:

- ``t<n>:<text>``   an event that is valid UTF-8 without NUL, as it is;
- ``b<n>:<base64>`` any other bytes;
- ``r<n>:<id>``     an event too large for NOTIFY (8000 bytes), stored in the events table
  under ``id`` and fetched by the subscriber.

``n`` numbers this process's notifications, so equal events published in one transaction are
not folded into one by the server.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Sequence

NOTIFY_LIMIT = 7900
"""Payloads must stay under the server's 8000 bytes; larger events travel through a table."""
STORED_EVENTS_KEEP = 3600.0
"""Seconds an event too large for NOTIFY stays in the events table (subscribers read it at once)."""


def wake_channel(schema: str) -> str:
    """The wake-up channel of ``schema``, cut to an identifier's 63 bytes."""
    return f"relaymq_wake.{schema}"[:63]


def event_channel(schema: str) -> str:
    """The event channel of ``schema``, cut to an identifier's 63 bytes."""
    return f"relaymq_events.{schema}"[:63]


class Notes:
    """Payloads for this process's notifications."""

    def __init__(self) -> None:
        self._n = itertools.count()

    def number(self) -> int:
        """The next notification's number (an enqueue statement's own notification)."""
        return next(self._n)

    @staticmethod
    def too_large(event: bytes) -> bool:
        return len(event) >= NOTIFY_LIMIT

    def inline(self, events: Sequence[bytes]) -> list[str]:
        out: list[str] = []
        for e in events:
            n = next(self._n)
            try:
                text = e.decode("utf-8")
            except UnicodeDecodeError:
                text = "\x00"
            if "\x00" in text:
                out.append(f"b{n}:{base64.b64encode(e).decode('ascii')}")
            else:
                out.append(f"t{n}:{text}")
        return out

    def stored(self, event_id: int) -> str:
        return f"r{next(self._n)}:{event_id}"


def decode(payload: str) -> tuple[bytes | None, int | None]:
    """``(body, None)`` for an inline event, ``(None, id)`` for a stored one, and
    ``(None, None)`` for a payload that is not ours."""
    kind, _, data = payload.partition(":")
    if kind.startswith("t"):
        return data.encode("utf-8"), None
    if kind.startswith("b"):
        return base64.b64decode(data), None
    try:
        return None, int(data)
    except ValueError:
        return None, None
