"""The notifier seam: wake-ups and events between processes, apart from the job store.

Oban keeps its Notifier apart from its Engine because the two vary independently: one store
may wake workers by polling, by a server's blocking pop or by NOTIFY, and carry events over
the same channel or another. Every backend is a notifier too (``Backend`` inherits this class);
the event bodies it carries are opaque ``bytes`` that ``relaymq.events`` alone encodes and
decodes.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncGenerator, Sequence


class Notifier(abc.ABC):
    """Wake waiting workers; deliver events to every subscriber, in every process."""

    @abc.abstractmethod
    async def wait(self, queues: Sequence[str], timeout: float) -> None:
        """Return when work may have arrived in ``queues``, or after ``timeout`` seconds.

        Returns at once when a job of an unpaused queue is already waiting, so a wake-up sent
        between an empty claim and this call is never lost. May return early without work.
        Idle waits make at most about one request a second per queue.
        """

    @abc.abstractmethod
    async def publish(self, events: Sequence[bytes]) -> None:
        """Deliver encoded events to every current subscriber, in every process."""

    @abc.abstractmethod
    async def subscribe(self) -> AsyncGenerator[bytes, None]:
        """Start a subscription; iterate it for encoded events published from then on.

        The subscription is live when this returns, so no event published afterwards is
        missed; order is kept per publisher. Closing the iterator (``aclose``) ends it.
        """
