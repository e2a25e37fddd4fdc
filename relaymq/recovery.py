"""Maintenance: stalled recovery, run in every worker but elected per queue through the
backend's lease, so N workers make one scan per queue per interval rather than N."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from relaymq import events
from relaymq.backends.base import Backend, Recovered
from relaymq.errors import BackendError
from relaymq.settings import Settings

log = logging.getLogger("relaymq.recovery")


def lock_name(queue: str) -> str:
    return f"maintenance:{queue}"


class Maintenance:
    def __init__(
        self, backend: Backend, queues: Sequence[str], settings: Settings, owner: str
    ) -> None:
        self.backend = backend
        self.queues = list(queues)
        self.settings = settings
        self.owner = owner
        self._held: set[str] = set()

    async def run(self) -> None:
        """Every ``stalled_check_interval``: one pass over the queues this worker leads."""
        while True:
            await self.run_once()
            await asyncio.sleep(self.settings.stalled_check_interval)

    async def run_once(self) -> dict[str, Recovered]:
        """Recover the stalled jobs of every queue whose lease this worker holds or takes."""
        done: dict[str, Recovered] = {}
        ttl = self.settings.stalled_check_interval * 3
        for queue in self.queues:
            try:
                if not await self.backend.lock(lock_name(queue), self.owner, ttl):
                    self._held.discard(queue)
                    continue
                self._held.add(queue)
                found = await self.backend.recover_stalled(
                    queue, self.settings.stalled_threshold, self.settings.max_stalled
                )
            except BackendError as e:  # logged; the next pass tries again
                log.warning("stalled recovery of %s failed: %s", queue, e)
                continue
            except Exception:  # a bug in one pass must not end recovery for good
                log.exception("stalled recovery of %s failed", queue)
                continue
            done[queue] = found
            await self._report(queue, found)
        return done

    async def _report(self, queue: str, found: Recovered) -> None:
        now = time.time()
        published = [events.Event(events.JOB_STALLED, queue, now, i) for i in found.requeued]
        published += [
            events.Event(events.JOB_FAILED, queue, now, i, {"error": "stalled too often"})
            for i in found.failed
        ]
        for job_id in found.requeued:
            log.warning("job %s/%s stalled; back to waiting", queue, job_id)
        for job_id in found.failed:
            log.error("job %s/%s stalled more than max_stalled times; failed", queue, job_id)
        for problem in found.errors:
            log.error("stalled recovery of %s skipped a job: %s", queue, problem)
        try:
            await events.publish(self.backend, published)
        except BackendError as e:
            log.warning("could not publish recovery events: %s", e)

    async def release_locks(self) -> None:
        for queue in self._held:
            await self.backend.unlock(lock_name(queue), self.owner)
        self._held.clear()
