"""Queue: the producer and admin handle of one named queue, and the job handle it returns.

It validates and serializes what producers enqueue (no backend does either) and reaches the
backend through ``Instrumented``, which reports what happened.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from relaymq import events
from relaymq.backends.base import Backend, CancelResult
from relaymq.errors import (
    ConfigError,
    JobCancelledError,
    JobExpiredError,
    JobFailedError,
    JobNotFoundError,
    PayloadTooLargeError,
)
from relaymq.instrumented import Instrumented
from relaymq.job import TERMINAL, Job, JobState, NewJob
from relaymq.options import Call, validate_queue_name
from relaymq.serializers import DEFAULT_SERIALIZER, Serializer
from relaymq.settings import Settings

R = TypeVar("R")


class JobHandle(Generic[R]):
    """A reference to one enqueued job."""

    def __init__(
        self, backend: Backend, queue: str, job_id: str, *, duplicate: bool = False,
        serializer: Serializer = DEFAULT_SERIALIZER,
    ) -> None:  # fmt: skip
        self.backend = backend
        self.queue = queue
        self.id = job_id
        self.duplicate = duplicate
        self._serializer = serializer

    def __repr__(self) -> str:
        return f"<JobHandle {self.queue}/{self.id}{' duplicate' if self.duplicate else ''}>"

    async def job(self) -> Job:
        """The job's current record."""
        found = await self.backend.get_job(self.queue, self.id)
        if found is None:
            raise JobNotFoundError(f"no job {self.id!r} in queue {self.queue!r}")
        return found

    async def result(self, timeout: float | None = None) -> R:
        """Wait until the job ends; its result, or the failure as ``JobFailedError``.

        Raises ``TimeoutError`` when ``timeout`` seconds pass first.
        """
        async with asyncio.timeout(timeout):
            subscription = await events.subscribe(self.backend)
            try:
                while True:
                    job = await self.job()
                    if job.state in TERMINAL:
                        return self._outcome(job)
                    await _next_event_for(subscription, self.queue, self.id, within=1.0)
            finally:
                await subscription.aclose()

    def _outcome(self, job: Job) -> R:
        if job.state is JobState.COMPLETED:
            value: R = self._serializer.loads(job.result) if job.result is not None else None  # type: ignore[assignment]
            return value
        error = {JobState.CANCELLED: JobCancelledError, JobState.EXPIRED: JobExpiredError}.get(
            job.state, JobFailedError
        )
        raise error(job.id, job.state.value, job.error)


async def _next_event_for(subscription: Any, queue: str, job_id: str, within: float) -> None:
    """Return on the next event about the job, or after ``within`` seconds (a re-check)."""
    try:
        async with asyncio.timeout(within):
            async for event in subscription:
                if event.job_id == job_id and event.queue == queue:
                    return
    except TimeoutError:
        return


class Queue:
    """A named lane of jobs on a backend: enqueue, inspect and administer it."""

    def __init__(
        self,
        name: str,
        backend: Backend,
        *,
        serializer: Serializer = DEFAULT_SERIALIZER,
        settings: Settings | None = None,
    ) -> None:
        self.name = validate_queue_name(name)
        self.backend = backend
        self._ops = Instrumented(backend)
        self.serializer = serializer
        self.settings = settings or Settings.from_env()

    def __repr__(self) -> str:
        return f"<Queue {self.name} on {self.backend.url}>"

    # -- producer ---------------------------------------------------------------------------

    async def add(self, call: Call[R]) -> JobHandle[R]:
        """Enqueue one invocation (``my_task.call(...)``); returns its handle."""
        [handle] = await self.add_bulk([call])
        return handle

    async def add_bulk(self, calls: Iterable[Call[Any]]) -> list[JobHandle[Any]]:
        """Enqueue many invocations in one backend call; nothing is stored if any is invalid."""
        new_jobs = self._new_jobs(list(calls))
        if not new_jobs:
            return []
        answers = await self._ops.enqueue(new_jobs)
        return [
            JobHandle(self.backend, self.name, a.id, duplicate=a.duplicate,
                      serializer=self.serializer)
            for a in answers
        ]  # fmt: skip

    def _new_jobs(self, calls: list[Call[Any]]) -> list[NewJob]:
        random_ids = os.urandom(16 * len(calls)).hex()  # one system call for the whole batch
        checked: set[int] = set()
        out: list[NewJob] = []
        limit = self.settings.max_payload_bytes
        for k, call in enumerate(calls):
            o = call.options
            if id(o) not in checked:  # calls made from one task share their Options
                o.validate()
                checked.add(id(o))
            payload = self.serializer.dumps({"args": list(call.args), "kwargs": call.kwargs})
            if len(payload) > limit:
                raise PayloadTooLargeError(
                    f"payload of {len(payload)} bytes is over max_payload_bytes={limit}"
                )
            job_id = o.job_id or random_ids[32 * k : 32 * k + 32]
            out.append(NewJob(self.name, job_id, call.task.name, payload, o.priority, o.delay,
                              o.ttl, o.retries + 1, o.timeout))  # fmt: skip
        return out

    # -- admin and observation --------------------------------------------------------------

    def handle(self, job_id: str) -> JobHandle[Any]:
        return JobHandle(self.backend, self.name, job_id, serializer=self.serializer)

    async def get_job(self, job_id: str) -> Job | None:
        return await self.backend.get_job(self.name, job_id)

    async def list_jobs(self, state: JobState, offset: int = 0, limit: int = 100) -> list[Job]:
        return await self.backend.list_jobs(self.name, state, offset, limit)

    async def counts(self) -> dict[JobState, int]:
        return await self.backend.counts(self.name)

    async def cancel(self, job_id: str) -> CancelResult:
        return await self._ops.cancel(self.name, job_id)

    async def retry_job(self, job_id: str) -> bool:
        """Manual retry / DLQ replay: run a failed, expired or cancelled job again."""
        return await self._ops.retry_job(self.name, job_id)

    async def remove_job(self, job_id: str) -> bool:
        return await self._ops.remove_job(self.name, job_id)

    async def pause(self) -> None:
        await self._ops.pause(self.name)

    async def resume(self) -> None:
        await self._ops.resume(self.name)

    async def is_paused(self) -> bool:
        return await self.backend.is_paused(self.name)

    async def drain(self) -> int:
        """Delete every waiting and delayed job."""
        return await self.backend.drain(self.name)

    async def clean(self, state: JobState, older_than: float = 0.0) -> int:
        """Delete jobs in terminal ``state`` finished more than ``older_than`` seconds ago."""
        if state not in TERMINAL:
            raise ConfigError(f"clean takes a terminal state, not {state.value}")
        return await self.backend.clean(self.name, state, older_than)

    async def obliterate(self) -> None:
        """Delete the queue and everything in it."""
        await self.backend.obliterate(self.name)
