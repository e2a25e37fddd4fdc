"""The producing half of a queue: validate, serialize and enqueue invocations, and the job
handle an enqueue returns. No backend validates or serializes anything; every call goes
through the facade (``Instrumented``), which reports what happened.

An app enqueues through a ``Producer`` per queue (``App.enqueue``, so ``Task.enqueue``);
``relaymq.Queue`` is one too, with the admin half on top.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any, Generic, TypeVar

from relaymq.backends.base import Backend
from relaymq.errors import (
    ConfigError,
    JobCancelledError,
    JobExpiredError,
    JobFailedError,
    JobNotFoundError,
    PayloadTooLargeError,
    RelayError,
    ResultTimeoutError,
)
from relaymq.flows import Flow, check_order
from relaymq.instrumented import Instrumented
from relaymq.job import TERMINAL, Job, JobState, NewJob
from relaymq.models import Models
from relaymq.options import Call, validate_queue_name
from relaymq.records.store import Enqueued, dependent, refuse_sequences
from relaymq.serializers import DEFAULT_SERIALIZER, Serializer
from relaymq.settings import Settings

R = TypeVar("R")

log = logging.getLogger("relaymq.queue")

PAUSE_CHECK_EVERY = 30.0
"""Seconds between two ``is_paused`` checks of one queue by enqueues through one facade."""


class JobHandle(Generic[R]):
    """A reference to one enqueued job.

    ``paused`` says whether the queue was paused when the job was enqueued, as this process
    last saw it (checked at most every ``PAUSE_CHECK_EVERY`` seconds per queue, alongside an
    enqueue; None for handles not made by an enqueue). A paused queue accepts jobs; no worker
    claims them until it is resumed.
    """

    def __init__(
        self,
        ops: Instrumented | Backend,
        queue: str,
        job_id: str,
        *,
        duplicate: bool = False,
        serializer: Serializer = DEFAULT_SERIALIZER,
        paused: bool | None = None,
        models: Models | None = None,
        relayed: bool = False,
    ) -> None:
        self.ops = ops if isinstance(ops, Instrumented) else Instrumented(ops)
        """The facade the handle reads through (its app's)."""
        self.queue = queue
        self.id = job_id
        self.duplicate = duplicate
        self.paused = paused
        self._serializer = serializer
        self._models = models
        self.relayed = relayed
        """The job was enqueued into the app's outbox: the backend has it only once the
        relay moved it (``result`` waits for that too)."""

    def __repr__(self) -> str:
        flags = (" duplicate" if self.duplicate else "") + (" paused" if self.paused else "")
        return f"<JobHandle {self.queue}/{self.id}{flags}>"

    @property
    def backend(self) -> Backend:
        """The backend the job is stored in (read through ``ops``)."""
        return self.ops.backend

    async def job(self) -> Job:
        """The job's current record; ``JobNotFoundError`` when it no longer exists."""
        found = await self.ops.get_job(self.queue, self.id)
        if found is None:
            raise _not_found(self.queue, self.id)
        return found

    async def progress(self) -> Any:
        """The last progress the handler reported (decoded), or None if none was stored."""
        return (await self.job()).progress_value(self._serializer)

    async def result(self, timeout: float | None = None) -> R:
        """Wait until the job ends; its result, or the failure as ``JobFailedError``.

        Raises ``ResultTimeoutError`` (a ``TimeoutError``) when ``timeout`` seconds pass first;
        its message says where the job stands (waiting for a worker, paused, running...).
        """
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                subscription = await self.ops.subscribe()
                try:
                    while True:
                        job = await self.ops.get_job(self.queue, self.id)
                        if job is None and not self.relayed:
                            raise _not_found(self.queue, self.id)
                        if job is not None and job.state in TERMINAL:
                            return self._outcome(job)
                        await _next_event_for(subscription, self.queue, self.id, within=1.0)
                finally:
                    await subscription.aclose()
        except TimeoutError as e:
            if not deadline.expired():
                raise
            raise await self._timed_out(timeout) from e

    def _outcome(self, job: Job) -> R:
        if job.state is JobState.COMPLETED:
            value: R = job.result_value(self._serializer)
            if self._models is not None:  # the task's pydantic result type
                value = self._models.load_result(value)
            return value
        error = {JobState.CANCELLED: JobCancelledError, JobState.EXPIRED: JobExpiredError}.get(
            job.state, JobFailedError
        )
        raise error(job.id, job.state.value, job.error)

    async def _timed_out(self, timeout: float | None) -> ResultTimeoutError:
        where = f"job {self.id} in queue {self.queue!r} did not end within {timeout}s"
        try:
            async with asyncio.timeout(_DIAGNOSE_WITHIN):
                job = await self.ops.get_job(self.queue, self.id)
                paused = (
                    job is not None and not job.terminal and await self.ops.is_paused(self.queue)
                )
        except (RelayError, OSError, TimeoutError) as e:
            return ResultTimeoutError(
                f"{where}; its state could not be read: {e!r}", self.id, self.queue, None
            )
        if job is None:
            gone = "it is still in the outbox" if self.relayed else "it no longer exists"
            return ResultTimeoutError(f"{where}: {gone}", self.id, self.queue, None)
        return ResultTimeoutError(
            f"{where}: {_standing(job, paused)}", self.id, self.queue, job.state.value
        )


_DIAGNOSE_WITHIN = 5.0
"""Seconds ``result()`` spends finding out why it timed out before saying it could not."""


def _standing(job: Job, paused: bool) -> str:
    """Where a job that has not ended stands, in words, for a ``ResultTimeoutError``."""
    last = f" (attempt {job.attempts} failed: {job.error})" if job.attempts and job.error else ""
    if paused and job.state in (JobState.WAITING, JobState.DELAYED):
        return (
            f"it is {job.state.value}{last} and queue {job.queue!r} is paused: no worker "
            "claims its jobs until Queue.resume()"
        )
    if job.state is JobState.WAITING:
        return (
            f"still waiting{last}: no worker has claimed it; is a worker running on "
            f"queue {job.queue!r} (relaymq worker MODULE -q {job.queue})?"
        )
    if job.state is JobState.DELAYED:
        due = (
            ""
            if job.run_at is None
            else f" for about {max(0.0, job.run_at - time.time()):.0f}s more"
        )
        return f"delayed{due}{last}: a worker will claim it once it is due"
    if job.state is JobState.ACTIVE:
        return (
            f"still running: attempt {job.attempts} of {job.max_attempts} on worker "
            f"{job.worker_id or '?'}"
        )
    return f"it ended {job.state.value} just as the deadline passed"


async def _next_event_for(subscription: Any, queue: str, job_id: str, within: float) -> None:
    """Return on the next event about the job, or after ``within`` seconds (a re-check)."""
    try:
        async with asyncio.timeout(within):
            async for event in subscription:
                if event.job_id == job_id and event.queue == queue:
                    return
    except TimeoutError:
        return


class Producer:
    """Enqueues on one named queue through ``ops``, an app's facade (whose observers see the
    enqueues, and whose view of paused queues the enqueues share)."""

    def __init__(
        self,
        name: str,
        ops: Instrumented,
        *,
        serializer: Serializer = DEFAULT_SERIALIZER,
        settings: Settings | None = None,
    ) -> None:
        self.name = validate_queue_name(name)
        self.ops = ops
        """The facade every call goes through."""
        self.serializer = serializer
        self.settings = settings or Settings.from_env()

    @property
    def backend(self) -> Backend:
        """The backend the queue lives in (reached through ``ops``)."""
        return self.ops.backend

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} on {self.backend.url}>"

    # -- producer ---------------------------------------------------------------------------

    async def add(self, call: Call[R], *, connection: object = None) -> JobHandle[R]:
        """Enqueue one invocation (``my_task.call(...)``); returns its handle. With
        ``connection``, in its open transaction (``add_bulk``)."""
        [handle] = await self.add_bulk([call], connection=connection)
        return handle

    async def add_bulk(
        self, calls: Iterable[Call[Any]], *, connection: object = None
    ) -> list[JobHandle[Any]]:
        """Enqueue many invocations in one backend call; nothing is stored if any is invalid.

        With ``connection`` (or a ``connection`` option of the calls), the jobs are written
        in that connection's open transaction, so they exist if and only if it commits
        (docs/transactions.md): a driver's connection or a SQLAlchemy session, on the
        backend's own database, or on the app's outbox's."""
        calls = list(calls)
        connection = _one_connection(calls, connection)
        new_jobs = self._new_jobs(calls)
        if not new_jobs:
            return []
        if connection is not None:
            check_order(new_jobs)  # others may be in the transaction: the statements see them
            answers = await self.ops.enqueue_in(connection, new_jobs)
            return self._handles(calls, answers, None, relayed=self.ops.outbox is not None)
        if dependent(new_jobs):
            await self._check_dependencies(new_jobs)
        seen = self.ops.paused_seen.get(self.name)
        if seen is None or time.monotonic() - seen[0] >= PAUSE_CHECK_EVERY:
            # Asked alongside the enqueue, so it adds no latency (and at most one call per
            # queue every PAUSE_CHECK_EVERY seconds).
            answers, paused = await asyncio.gather(self.ops.enqueue(new_jobs), self._check_paused())
        else:
            answers, paused = await self.ops.enqueue(new_jobs), seen[1]
        return self._handles(calls, answers, paused)

    def add_bulk_sync(
        self, calls: Iterable[Call[Any]], *, connection: object = None
    ) -> list[JobHandle[Any]]:
        """``add_bulk`` in the open transaction of a sync ``connection`` (a sqlite3 or
        psycopg ``Connection``, a SQLAlchemy ``Session``), from sync code: no event loop
        needed, and the app need not be connected (the handles' reads need it)."""
        calls = list(calls)
        connection = _one_connection(calls, connection)
        if connection is None:
            raise ConfigError(
                "a sync enqueue writes in your transaction: give it connection= "
                "(from async code, use add_bulk)"
            )
        new_jobs = self._new_jobs(calls)
        if not new_jobs:
            return []
        check_order(new_jobs)
        answers = self.ops.enqueue_in_sync(connection, new_jobs)
        return self._handles(calls, answers, None, relayed=self.ops.outbox is not None)

    def _handles(
        self,
        calls: list[Call[Any]],
        answers: list[Enqueued],
        paused: bool | None,
        *,
        relayed: bool = False,
    ) -> list[JobHandle[Any]]:
        return [
            JobHandle(
                self.ops,
                self.name,
                a.id,
                duplicate=a.duplicate,
                serializer=self.serializer,
                paused=paused,
                models=c.task.models,
                relayed=relayed,
            )
            for a, c in zip(answers, calls, strict=True)
        ]

    async def add_flow(self, flow: Flow, *, connection: object = None) -> list[JobHandle[Any]]:
        """Enqueue a flow in one batch: the handles of its jobs, children before their parent,
        so the last is the top parent's. See ``relaymq.Flow``. With ``connection``, in its
        open transaction (``add_bulk``)."""
        return await self.add_bulk(flow.calls(), connection=connection)

    async def _check_paused(self) -> bool | None:
        try:
            paused = await self.ops.is_paused(self.name)
        except Exception:  # advisory only: the enqueue itself reports a broken backend
            return None
        self._saw_paused(paused)
        if paused:
            log.warning(
                "queue %r is paused: jobs are accepted, but no worker claims them "
                "until Queue.resume()",
                self.name,
            )
        return paused

    def _saw_paused(self, paused: bool) -> None:
        self.ops.paused_seen[self.name] = (time.monotonic(), paused)

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
            call.task.check_arguments(call.args, call.kwargs)
            args, kwargs = list(call.args), call.kwargs
            models = call.task.models
            if models is not None:  # validated and made JSON-able here, at enqueue
                args, kwargs = models.dump_args(call.args, kwargs)
            payload = self.serializer.dumps({"args": args, "kwargs": kwargs})
            if len(payload) > limit:
                raise PayloadTooLargeError(
                    f"payload of {len(payload)} bytes is over max_payload_bytes={limit}"
                )
            job_id = o.job_id or random_ids[32 * k : 32 * k + 32]
            out.append(
                NewJob(
                    self.name,
                    job_id,
                    call.task.name,
                    payload,
                    o.priority,
                    o.start_delay(),
                    o.ttl,
                    o.retries + 1,
                    o.timeout,
                    rule=o.rule(),
                    depends_on=o.depends_on,
                    on_dependency_failure=o.on_dependency_failure,
                    limit_key=o.limit_key,
                    sequence=o.sequence,
                    sequence_on_failure=o.sequence_on_failure,
                )
            )
        if not self.ops.backend.capabilities.sequences:
            refuse_sequences(out, type(self.ops.backend).__name__)
        return out

    async def _check_dependencies(self, jobs: Sequence[NewJob]) -> None:
        """``ConfigError`` before anything is stored when a job depends on itself, on a later
        job of the batch, or on a job this queue does not hold."""
        outside = check_order(jobs)
        if not outside:
            return
        found = await self.ops.get_jobs(self.name, outside)
        missing = [i for i, job in zip(outside, found, strict=True) if job is None]
        if missing:
            raise ConfigError(
                f"depends_on names {', '.join(map(repr, missing))}: no such job "
                f"in queue {self.name!r}"
            )


def _one_connection(calls: Sequence[Call[Any]], given: object) -> object:
    """The connection a batch is written through: ``given``, or the calls' own option (one
    for all of them); None for none."""
    if given is not None:
        return given
    found = {id(c.options.connection): c.options.connection for c in calls}
    if len(found) > 1:
        raise ConfigError("the calls of one batch name different connections: give one")
    return next(iter(found.values()), None)


def _not_found(queue: str, job_id: str) -> JobNotFoundError:
    return JobNotFoundError(
        f"no job {job_id!r} in queue {queue!r}: it was never enqueued there, was removed, or "
        "finished longer ago than the queue's retention keeps finished jobs"
    )
