"""One attempt of one job: from a claimed record to the ``Settle`` that ends it (or nothing).

Pure of the backend: what the attempt needs from outside (the fenced start check, progress
reporting) is passed in, so every decision here is testable without a server. The core decides
here (expire, cancel, unknown task, retry or fail); the backend only stores the decision.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from relaymq.backends.base import Outcome, Settle
from relaymq.errors import BackendError, SerializationError, TaskNotFoundError
from relaymq.job import Job
from relaymq.retry import Backoff, next_delay
from relaymq.serializers import Serializer
from relaymq.task import JobContext, invoke, resolve
from relaymq.worker.running import RunningJob, StopReason

log = logging.getLogger("relaymq.worker")

MAX_ERROR_CHARS = 4000


def failure(job: Job, backoff: Backoff | float, error: str) -> Settle:
    """The retry decision: retry with backoff while attempts remain, else fail into the DLQ."""
    if job.attempts < job.max_attempts:
        return Settle(
            job.claim, Outcome.RETRY, error=error, delay=next_delay(backoff, job.attempts)
        )
    return Settle(job.claim, Outcome.FAIL, error=error)


def after_stop(r: RunningJob) -> Settle | None:
    """The outcome of a stopped handler; None when the claim is lost (write nothing)."""
    if r.ctx is not None:
        r.ctx._cancelled = True
    if r.stop_reason is StopReason.SHUTDOWN:
        return Settle(r.claim, Outcome.RELEASE)
    if r.stop_reason is StopReason.CANCELLED:
        return Settle(r.claim, Outcome.CANCEL, error="cancelled by request")
    return None


def describe(e: BaseException) -> str:
    """The stored error: type, message and a trimmed traceback; never fails itself."""
    try:
        text = "".join(traceback.format_exception(e))
    except Exception:
        text = f"{type(e).__name__}: <unprintable exception>"
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS // 4] + "\n...\n" + text[-MAX_ERROR_CHARS // 2 :]
    return text


class Execution:
    """Runs attempts. ``still_held`` is the fenced start check (RELIABILITY F12), asked for
    claims older than ``fresh_for`` seconds; younger ones rely on the last heartbeat.
    ``report`` receives a handler's progress values."""

    def __init__(
        self,
        serializer: Serializer,
        still_held: Callable[[RunningJob], Awaitable[bool]],
        report: Callable[[RunningJob, Any], None],
        fresh_for: float,
    ) -> None:
        self.serializer = serializer
        self.still_held = still_held
        self.report = report
        self.fresh_for = fresh_for

    async def run(self, r: RunningJob, now: float) -> Settle | None:
        """One attempt; ``now`` is the backend's clock at the claim. It always ends in an
        outcome (or a lost claim): a claim left held would be renewed, never recovered."""
        try:
            return await self._attempt(r, now)
        except asyncio.CancelledError:
            return after_stop(r)
        except Exception as e:  # outside the handler, which has its own outcomes
            if r.stop_reason is not None:
                return after_stop(r)
            if isinstance(e, BackendError):  # the start check could not ask: run it later
                log.warning("could not check the claim on %s/%s (%s); releasing it",
                            r.job.queue, r.job.id, e)  # fmt: skip
                return Settle(r.claim, Outcome.RELEASE)
            log.exception("job %s/%s failed outside its handler", r.job.queue, r.job.id)
            return Settle(r.claim, Outcome.FAIL, error=describe(e))

    async def _attempt(self, r: RunningJob, now: float) -> Settle | None:
        job, claim = r.job, r.claim
        if job.expired_at(now):
            error = f"expired: ttl of {job.ttl}s passed before the job started"
            return Settle(claim, Outcome.EXPIRE, error=error)
        if r.stop_reason is not None:
            return after_stop(r)
        try:
            t = resolve(job.task)
        except TaskNotFoundError as e:
            return Settle(claim, Outcome.FAIL, error=str(e))
        try:
            data = self.serializer.loads(job.payload)
            args, kwargs = list(data["args"]), dict(data["kwargs"])
        except (SerializationError, KeyError, TypeError, ValueError) as e:
            return Settle(claim, Outcome.FAIL, error=f"cannot decode the job's payload: {e}")
        fresh = time.monotonic() - r.claimed_mono < self.fresh_for
        if r.stop_reason is not None or not (fresh or await self.still_held(r)):
            return after_stop(r)
        if t.takes_context:
            r.ctx = JobContext(job.id, job.queue, job.task, job.attempts,
                               lambda value: self.report(r, value))  # fmt: skip
            args.insert(0, r.ctx)
        try:
            if job.timeout is None and t.is_async:
                value = await t.fn(*args, **kwargs)  # the common case, without a wrapper
            else:
                async with asyncio.timeout(job.timeout):
                    value = await invoke(t, args, kwargs)
        except TimeoutError:
            return failure(job, t.options.backoff, f"TimeoutError: timed out after {job.timeout}s")
        except asyncio.CancelledError:
            raise
        except Exception as e:
            return failure(job, t.options.backoff, describe(e))
        try:
            result = self.serializer.dumps(value)
        except SerializationError as e:
            return Settle(claim, Outcome.FAIL, error=f"the result cannot be serialized: {e}")
        return Settle(claim, Outcome.COMPLETE, result=result)
