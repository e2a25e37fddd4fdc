"""Maintenance: stalled recovery and retention, run in every worker but elected per queue
through the backend's lease, so N workers make one scan per queue per interval rather than N.

Every pass survives any error: it is logged (with its traceback when unexpected) and the next
pass tries again, so one bad moment never ends recovery for good.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from relaymq.errors import BackendError, ConfigError
from relaymq.instrumented import Instrumented
from relaymq.records.store import Recovered
from relaymq.retention import enforce, policy
from relaymq.settings import Settings

log = logging.getLogger("relaymq.recovery")

KEY_GRACE = 60.0
"""Seconds after its window a throttle or debounce key is kept at least (``prune_keys``)."""
PRUNE_INTERVAL = 300.0
"""Seconds between two prunings of the history (every queue's at once) by one worker."""


def lock_name(queue: str) -> str:
    return f"maintenance:{queue}"


class Maintenance:
    def __init__(
        self,
        ops: Instrumented,
        queues: Sequence[str],
        settings: Settings,
        owner: str,
        *,
        hold_off: Callable[[], bool] | None = None,
    ) -> None:
        self.ops = ops
        self.hold_off = hold_off
        """True while this worker's own heartbeats may be late (its event loop was blocked):
        a pass then would take its live jobs for stalled ones, so it waits for the next."""
        self.queues = list(queues)
        self.settings = settings
        self.owner = owner
        self._held: set[str] = set()
        self._cleaned_at: dict[str, float] = {}
        self._pruned_at = -PRUNE_INTERVAL

    async def run(self) -> None:
        """Every ``stalled_check_interval``: one pass over the queues this worker leads."""
        while True:
            if self.hold_off is None or not self.hold_off():
                await self.run_once()
            await asyncio.sleep(self.settings.stalled_check_interval)

    async def run_once(self) -> dict[str, Recovered]:
        """Recover the stalled jobs of every queue whose lease this worker holds or takes, and
        apply the backend's retention to it when due."""
        done: dict[str, Recovered] = {}
        for queue in self.queues:
            try:
                if not await self._lead(queue):
                    continue
                done[queue] = await self.ops.recover_stalled(
                    queue, self.settings.stalled_threshold, self.settings.max_stalled
                )
                await self._retain(queue)
            except (BackendError, ConfigError) as e:  # one line; the next pass tries again
                log.warning("maintenance of %s failed: %s", queue, e)
            except Exception:  # a bug in one pass must not end maintenance for good
                log.exception("maintenance of %s failed", queue)
        if self._held:
            await self._prune_history()
        return done

    async def _prune_history(self) -> None:
        """Forget history older than ``history_retention``, at most every ``PRUNE_INTERVAL``
        (by a worker that leads a queue: the pass covers every queue, and is idempotent)."""
        now = time.monotonic()
        if now - self._pruned_at < PRUNE_INTERVAL:
            return
        self._pruned_at = now
        before = int((time.time() - self.settings.history_retention) // 60)
        try:
            await self.ops.prune_tallies(before)
        except BackendError as e:
            log.warning("pruning the history failed: %s", e)
        except Exception:
            log.exception("pruning the history failed")

    async def _lead(self, queue: str) -> bool:
        ttl = self.settings.stalled_check_interval * 3
        if await self.ops.lease(lock_name(queue), self.owner, ttl):
            self._held.add(queue)
            return True
        self._held.discard(queue)
        return False

    async def _retain(self, queue: str) -> None:
        """Every ``retention_interval``: forget the queue's keys that hold nothing any more, and
        delete the finished jobs its retention no longer keeps (``relaymq.retention``)."""
        now, every = time.monotonic(), self.settings.retention_interval
        if queue in self._cleaned_at and now - self._cleaned_at[queue] < every:
            return
        self._cleaned_at[queue] = now
        forgotten = await self.ops.prune_keys(queue, KEY_GRACE)
        if forgotten:
            log.info("forgot %d throttle and debounce keys of %s", forgotten, queue)
        removed = await enforce(self.ops, queue, await policy(self.ops, queue))
        for state, n in removed.items():
            log.info("retention removed %d %s jobs of %s", n, state.value, queue)

    async def release_locks(self) -> None:
        for queue in self._held:
            await self.ops.lease(lock_name(queue), self.owner, 0)
        self._held.clear()
