"""The queues a worker's backend refuses as configured, and the once-a-minute look at them.

A ``ConfigError`` (a broker queue recreated with other arguments, say) cannot succeed by
trying again, so the worker never retries it as is: it asks the backend which of its queues
it refuses (``Backend.check_queue``), stops claiming from those, keeps serving the others and
shows the refusal on its registration (``WorkerInfo.refused``, ``relaymq workers``). Once a
minute it checks every queue again: a queue recreated with other arguments while the worker
runs is refused from then on, each refused one is logged in one line, and the ones accepted
now are taken back. With no queue left the worker stops (the CLI exits 2).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from relaymq.backends.base import Backend
from relaymq.errors import BackendError, ConfigError

log = logging.getLogger("relaymq.worker")

RECHECK_INTERVAL = 60.0
"""Seconds between two checks (and log lines) of a refused queue."""


class Refusals:
    def __init__(
        self,
        backend: Backend,
        queues: Sequence[str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.queues = list(queues)
        self.refused: dict[str, str] = {}
        """Queue -> the backend's refusal, in one line."""
        self.interval = RECHECK_INTERVAL
        """Seconds between two checks of every queue (and log lines of a refused one)."""
        self._clock = clock
        self._checked = clock()

    def serving(self) -> list[str]:
        """The queues claimed from: every queue but the refused ones, in order."""
        if not self.refused:
            return self.queues
        return [q for q in self.queues if q not in self.refused]

    @property
    def all_refused(self) -> bool:
        return len(self.refused) == len(self.queues)

    def record(self) -> tuple[tuple[str, str], ...]:
        """What the worker's registration shows (``WorkerInfo.refused``)."""
        return tuple(sorted(self.refused.items()))

    def error(self) -> ConfigError:
        """The error a worker with no queue left ends with."""
        lines = "; ".join(f"queue {q}: {e}" for q, e in sorted(self.refused.items()))
        return ConfigError(f"the backend refuses every queue of this worker: {lines}")

    async def refuse_from(self, e: ConfigError, candidates: Sequence[str]) -> None:
        """A call over ``candidates`` raised ``e``: refuse each one the backend refuses when
        checked alone; when none is (the refusal is not about one queue), all of them."""
        found: dict[str, str] = {}
        unsure = False
        for queue in candidates:
            if queue in self.refused:
                continue
            try:
                await self.backend.check_queue(queue)
            except ConfigError as refusal:
                found[queue] = _one_line(refusal)
            except BackendError:
                unsure = True  # cannot tell now: the next claim tells again
        if not found and not unsure:
            found = {q: _one_line(e) for q in candidates if q not in self.refused}
        for queue, why in found.items():
            log.error(
                "queue %s is refused by the backend, not claimed from until it is "
                "accepted (checked again every %.0fs): %s",
                queue,
                self.interval,
                why,
                extra={"queue": queue},
            )
        self.refused.update(found)
        self._checked = self._clock()

    def due(self) -> bool:
        return self._clock() >= self._checked + self.interval

    async def recheck(self) -> bool:
        """Check every queue again (an operator may have recreated one with other arguments):
        log each refused one (one line), take back the accepted ones. Whether anything
        changed."""
        self._checked = self._clock()
        changed = False
        for queue in self.queues:
            try:
                await self.backend.check_queue(queue)
            except ConfigError as e:
                why = _one_line(e)
                if queue not in self.refused:
                    log.error(
                        "queue %s is refused by the backend, not claimed from until it "
                        "is accepted (checked again every %.0fs): %s",
                        queue,
                        self.interval,
                        why,
                        extra={"queue": queue},
                    )
                else:
                    log.error(
                        "queue %s is still refused by the backend: %s",
                        queue,
                        why,
                        extra={"queue": queue},
                    )
                changed |= self.refused.get(queue) != why
                self.refused[queue] = why
                continue
            except BackendError as e:
                if queue in self.refused:
                    log.warning("could not check refused queue %s again (%s)", queue, e)
                continue
            if queue in self.refused:
                del self.refused[queue]
                changed = True
                log.warning(
                    "queue %s is accepted again: claiming from it", queue, extra={"queue": queue}
                )
        return changed


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__
