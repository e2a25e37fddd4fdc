"""Queue: the producer and admin handle of one named queue, and the job handle it returns.

It validates and serializes what producers enqueue (no backend does either) and reaches the
backend through ``Instrumented``, which reports what happened.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, Generic, TypeVar

from relaymq import bulk, events
from relaymq.backends.base import Backend, CancelResult, Tally, dependent
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
from relaymq.job import DLQ_STATES, TERMINAL, Job, JobState, NewJob
from relaymq.limits import Limits, make_limits
from relaymq.models import Models
from relaymq.options import Call, check_text, validate_queue_name
from relaymq.serializers import DEFAULT_SERIALIZER, Serializer
from relaymq.settings import Settings

R = TypeVar("R")

log = logging.getLogger("relaymq.queue")

PAUSE_CHECK_EVERY = 30.0
"""Seconds between two ``is_paused`` checks of one queue by enqueues in this process."""

_pause_seen: weakref.WeakKeyDictionary[Backend, dict[str, tuple[float, bool]]] = (
    weakref.WeakKeyDictionary()
)
"""Per backend and queue: when this process last learnt whether the queue is paused, and the
answer. Enqueues read it so that they need no extra round trip of their own."""


class JobHandle(Generic[R]):
    """A reference to one enqueued job.

    ``paused`` says whether the queue was paused when the job was enqueued, as this process
    last saw it (checked at most every ``PAUSE_CHECK_EVERY`` seconds per queue, alongside an
    enqueue; None for handles not made by an enqueue). A paused queue accepts jobs; no worker
    claims them until it is resumed.
    """

    def __init__(
        self, backend: Backend, queue: str, job_id: str, *, duplicate: bool = False,
        serializer: Serializer = DEFAULT_SERIALIZER, paused: bool | None = None,
        models: Models | None = None,
    ) -> None:  # fmt: skip
        self.backend = backend
        self.queue = queue
        self.id = job_id
        self.duplicate = duplicate
        self.paused = paused
        self._serializer = serializer
        self._models = models

    def __repr__(self) -> str:
        flags = (" duplicate" if self.duplicate else "") + (" paused" if self.paused else "")
        return f"<JobHandle {self.queue}/{self.id}{flags}>"

    async def job(self) -> Job:
        """The job's current record; ``JobNotFoundError`` when it no longer exists."""
        [found] = await self.backend.get_jobs(self.queue, [self.id])
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
                subscription = await events.subscribe(self.backend)
                try:
                    while True:
                        job = await self.job()
                        if job.state in TERMINAL:
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
                [job] = await self.backend.get_jobs(self.queue, [self.id])
                paused = job is not None and not job.terminal and (
                    await self.backend.is_paused(self.queue)
                )  # fmt: skip
        except (RelayError, OSError, TimeoutError) as e:
            return ResultTimeoutError(f"{where}; its state could not be read: {e!r}",
                                      self.id, self.queue, None)  # fmt: skip
        if job is None:
            return ResultTimeoutError(f"{where}: it no longer exists", self.id, self.queue, None)
        return ResultTimeoutError(f"{where}: {_standing(job, paused)}", self.id, self.queue,
                                  job.state.value)  # fmt: skip


_DIAGNOSE_WITHIN = 5.0
"""Seconds ``result()`` spends finding out why it timed out before saying it could not."""


def _standing(job: Job, paused: bool) -> str:
    """Where a job that has not ended stands, in words, for a ``ResultTimeoutError``."""
    last = f" (attempt {job.attempts} failed: {job.error})" if job.attempts and job.error else ""
    if paused and job.state in (JobState.WAITING, JobState.DELAYED):
        return (f"it is {job.state.value}{last} and queue {job.queue!r} is paused: no worker "
                "claims its jobs until Queue.resume()")  # fmt: skip
    if job.state is JobState.WAITING:
        return (f"still waiting{last}: no worker has claimed it; is a worker running on "
                f"queue {job.queue!r} (relaymq worker MODULE -q {job.queue})?")  # fmt: skip
    if job.state is JobState.DELAYED:
        due = (
            ""
            if job.run_at is None
            else f" for about {max(0.0, job.run_at - time.time()):.0f}s more"
        )
        return f"delayed{due}{last}: a worker will claim it once it is due"
    if job.state is JobState.ACTIVE:
        return (f"still running: attempt {job.attempts} of {job.max_attempts} on worker "
                f"{job.worker_id or '?'}")  # fmt: skip
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
        calls = list(calls)
        new_jobs = self._new_jobs(calls)
        if not new_jobs:
            return []
        if dependent(new_jobs):
            await self._check_dependencies(new_jobs)
        seen = _pause_seen.setdefault(self.backend, {}).get(self.name)
        if seen is None or time.monotonic() - seen[0] >= PAUSE_CHECK_EVERY:
            # Asked alongside the enqueue, so it adds no latency (and at most one call per
            # queue every PAUSE_CHECK_EVERY seconds).
            answers, paused = await asyncio.gather(self._ops.enqueue(new_jobs),
                                                   self._check_paused())  # fmt: skip
        else:
            answers, paused = await self._ops.enqueue(new_jobs), seen[1]
        return [
            JobHandle(self.backend, self.name, a.id, duplicate=a.duplicate,
                      serializer=self.serializer, paused=paused, models=c.task.models)
            for a, c in zip(answers, calls, strict=True)
        ]  # fmt: skip

    async def add_flow(self, flow: Flow) -> list[JobHandle[Any]]:
        """Enqueue a flow in one batch: the handles of its jobs, children before their parent,
        so the last is the top parent's. See ``relaymq.Flow``."""
        return await self.add_bulk(flow.calls())

    async def _check_paused(self) -> bool | None:
        try:
            paused = await self.backend.is_paused(self.name)
        except Exception:  # advisory only: the enqueue itself reports a broken backend
            return None
        self._saw_paused(paused)
        if paused:
            log.warning("queue %r is paused: jobs are accepted, but no worker claims them "
                        "until Queue.resume()", self.name)  # fmt: skip
        return paused

    def _saw_paused(self, paused: bool) -> None:
        _pause_seen.setdefault(self.backend, {})[self.name] = (time.monotonic(), paused)

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
            out.append(NewJob(self.name, job_id, call.task.name, payload, o.priority,
                              o.start_delay(), o.ttl, o.retries + 1, o.timeout,
                              rule=o.rule(), depends_on=o.depends_on,
                              on_dependency_failure=o.on_dependency_failure,
                              limit_key=o.limit_key))  # fmt: skip
        return out

    async def _check_dependencies(self, jobs: Sequence[NewJob]) -> None:
        """``ConfigError`` before anything is stored when a job depends on itself, on a later
        job of the batch, or on a job this queue does not hold."""
        outside = check_order(jobs)
        if not outside:
            return
        found = await self.backend.get_jobs(self.name, outside)
        missing = [i for i, job in zip(outside, found, strict=True) if job is None]
        if missing:
            raise ConfigError(f"depends_on names {', '.join(map(repr, missing))}: no such job "
                              f"in queue {self.name!r}")  # fmt: skip

    # -- admin and observation --------------------------------------------------------------

    def handle(self, job_id: str) -> JobHandle[Any]:
        return JobHandle(self.backend, self.name, _job_id(job_id), serializer=self.serializer)

    # Not found: a lookup (``get_job``) answers None; an action on a job (``cancel``,
    # ``retry_job``, ``remove_job``, and ``JobHandle``'s methods) raises ``JobNotFoundError``.

    async def get_job(self, job_id: str) -> Job | None:
        """The job's current record, or None when there is no such job."""
        [job] = await self.backend.get_jobs(self.name, [_job_id(job_id)])
        return job

    async def get_jobs(self, job_ids: Sequence[str]) -> list[Job | None]:
        """The current records of ``job_ids`` in one backend call, None for absent ones."""
        return await self.backend.get_jobs(self.name, _job_ids(job_ids))

    async def list_jobs(
        self, state: JobState, offset: int = 0, limit: int = 100, *,
        task: str | None = None, older_than: float | None = None, now: float | None = None,
        task_contains: str | None = None,
    ) -> list[Job]:  # fmt: skip
        """A page of jobs in ``state`` (waiting in claim order, delayed by run time, others
        oldest first). ``task``, ``task_contains`` (a part of the task name) and ``older_than``
        (seconds since the job finished, or was created when it has not) narrow it; ``offset``
        and ``limit`` then count matching jobs, and the listing reads pages of the state until
        it has ``limit`` of them."""
        selection = _selection(None, None, task, older_than, now, task_contains)
        return await bulk.find(self.backend, self.name, state, selection, offset, limit)

    async def history(self, minutes: int = 60) -> list[Tally]:
        """The queue's stored per-minute outcomes (completed, retried, failed) over the last
        ``minutes`` minutes, this one included, oldest first; minutes with none are left out.
        Workers write them every ``Settings.history_flush_interval`` seconds."""
        if minutes < 1:
            raise ConfigError(f"minutes must be at least 1, not {minutes!r}")
        return await self.backend.tallies(self.name, int(time.time() // 60) - minutes + 1)

    async def counts(self) -> dict[JobState, int]:
        return await self.backend.counts(self.name)

    async def cancel(self, job_id: str) -> CancelResult:
        """Cancel a waiting, delayed or active job: ``CANCELLED``, or ``ALREADY_TERMINAL`` when
        it had ended (nothing changes). ``JobNotFoundError`` when there is no such job."""
        result = await self._ops.cancel(self.name, _job_id(job_id))
        if result is CancelResult.NOT_FOUND:
            raise _not_found(self.name, job_id)
        return result

    async def retry_job(self, job_id: str) -> bool:
        """Manual retry / DLQ replay: run a failed, expired or cancelled job again, with a
        fresh TTL window (``created_at`` becomes the time of the replay).

        True when it is waiting again; False when it is not in one of those states (it has not
        ended, or it completed); ``JobNotFoundError`` when there is no such job.
        """
        if await self._ops.retry_job(self.name, _job_id(job_id)):
            return True
        if (await self.backend.get_jobs(self.name, [job_id]))[0] is None:  # on refusal only
            raise _not_found(self.name, job_id)
        return False

    async def remove_job(self, job_id: str) -> None:
        """Delete the job in any state (an active job's claim is lost); ``JobNotFoundError``
        when there is no such job."""
        if not await self._ops.remove_job(self.name, _job_id(job_id)):
            raise _not_found(self.name, job_id)

    # Bulk actions select jobs by ``job_ids`` and/or ``state`` (one or several), narrowed by
    # ``task`` (or a part of its name, ``task_contains``) and ``older_than`` (seconds since a
    # job finished, or was created when it has not; measured from ``now``, default this
    # machine's clock). They go a page at a time (see
    # relaymq.bulk): per page one listing and one batch call. Each returns how many jobs it
    # changed and announces the same events as its one-job form.

    async def retry_jobs(
        self, job_ids: Iterable[str] | None = None, *,
        state: JobState | Iterable[JobState] | None = None, task: str | None = None,
        older_than: float | None = None, now: float | None = None,
        task_contains: str | None = None,
    ) -> int:  # fmt: skip
        """Manual retry / DLQ replay of every selected failed, expired or cancelled job (all
        three when no state is given); how many are waiting again."""
        selection = _selection(job_ids, state, task, older_than, now, task_contains)
        return await bulk.apply(self.backend, self.name, selection, _RETRYABLE,
                                lambda ids: self._ops.retry_jobs(self.name, ids))  # fmt: skip

    async def cancel_jobs(
        self, job_ids: Iterable[str] | None = None, *,
        state: JobState | Iterable[JobState] | None = None, task: str | None = None,
        older_than: float | None = None, now: float | None = None,
        task_contains: str | None = None,
    ) -> int:  # fmt: skip
        """Cancel every selected waiting, delayed or active job (all three when no state is
        given); how many are now cancelled."""
        selection = _selection(job_ids, state, task, older_than, now, task_contains)
        return await bulk.apply(self.backend, self.name, selection, _LIVE,
                                lambda ids: self._ops.cancel_jobs(self.name, ids))  # fmt: skip

    async def remove_jobs(
        self, job_ids: Iterable[str] | None = None, *,
        state: JobState | Iterable[JobState] | None = None, task: str | None = None,
        older_than: float | None = None, now: float | None = None,
        task_contains: str | None = None,
    ) -> int:  # fmt: skip
        """Delete every selected job, in any state when no state is given; how many were
        deleted. Selecting nothing at all is a ``ConfigError`` (``obliterate`` empties a
        queue)."""
        selection = _selection(job_ids, state, task, older_than, now, task_contains)
        if selection.empty:
            raise ConfigError("remove_jobs needs job ids, a state, a task or an age")
        return await bulk.apply(self.backend, self.name, selection, tuple(JobState),
                                lambda ids: self._ops.remove_jobs(self.name, ids))  # fmt: skip

    async def pause(self) -> None:
        """Stop workers everywhere from claiming this queue's jobs; enqueues still succeed."""
        await self._ops.pause(self.name)
        self._saw_paused(True)

    async def resume(self) -> None:
        await self._ops.resume(self.name)
        self._saw_paused(False)

    async def is_paused(self) -> bool:
        paused = await self.backend.is_paused(self.name)
        self._saw_paused(paused)
        return paused

    async def set_limits(self, *, max_active: int | None = None, rate: int | str | None = None,
                         per: float = 1.0, key_rate: int | str | None = None,
                         key_per: float = 1.0) -> Limits | None:  # fmt: skip
        """Limit this queue over every worker, from their next claim on: at most
        ``max_active`` jobs active at once, at most ``rate`` starts per ``per`` seconds (or
        ``rate="100/m"``), at most ``key_rate`` starts per ``key_per`` seconds for each limit
        key (``with_options(limit_key=...)``). With none, the queue's limits are removed.
        Returns what is stored. See ``relaymq.limits``."""
        limits = make_limits(max_active, rate, per, key_rate, key_per)
        await self.backend.set_limits(self.name, None if limits.empty else limits)
        return None if limits.empty else limits

    async def limits(self) -> Limits | None:
        """This queue's stored limits, or None."""
        return (await self.backend.list_limits()).get(self.name)

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


_RETRYABLE = (*sorted(DLQ_STATES), JobState.CANCELLED)
_LIVE = (JobState.WAITING, JobState.DELAYED, JobState.ACTIVE)


def _job_id(job_id: str) -> str:
    return check_text(job_id, "job_id")


def _job_ids(job_ids: Iterable[str]) -> list[str]:
    if isinstance(job_ids, str):
        raise ConfigError(f"job_ids takes a list of job ids, not the string {job_ids!r}")
    return [check_text(i, "job_id") for i in job_ids]


def _task(task: str | None, what: str = "task") -> str | None:
    return None if task is None else check_text(task, what, max_length=None)


def _selection(
    job_ids: Iterable[str] | None, state: JobState | Iterable[JobState] | None,
    task: str | None, older_than: float | None, now: float | None, task_contains: str | None,
) -> bulk.Selection:  # fmt: skip
    """What a bulk action selects, its ids and task checked first."""
    ids = None if job_ids is None else _job_ids(job_ids)
    return bulk.Selection.of(ids, state, _task(task), older_than, now,
                             _task(task_contains, "task_contains"))  # fmt: skip


def _not_found(queue: str, job_id: str) -> JobNotFoundError:
    return JobNotFoundError(f"no job {job_id!r} in queue {queue!r}")
