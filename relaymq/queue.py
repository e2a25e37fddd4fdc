"""Queue: the producer and admin handle of one named queue.

It enqueues as its ``Producer`` does (``relaymq.producer``) and administers the queue, reaching
the backend only through an app's facade (``Instrumented``), which reports what happened. Make
one with ``Queue(name, app)``; given a backend, it is the default app's queue on that backend.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from relaymq import bulk
from relaymq import retention as _retention
from relaymq.app import App, default_app
from relaymq.backends.base import Backend
from relaymq.errors import ConfigError
from relaymq.instrumented import Instrumented
from relaymq.job import DLQ_STATES, TERMINAL, Job, JobState
from relaymq.limits import make_limits
from relaymq.options import check_text
from relaymq.producer import JobHandle, Producer, _not_found
from relaymq.records.limits import Limits
from relaymq.records.retention import Retention
from relaymq.records.search import JobFilter
from relaymq.records.store import CancelResult, Tally
from relaymq.serializers import DEFAULT_SERIALIZER, Serializer
from relaymq.settings import Settings

__all__ = ["JobHandle", "Queue"]


class Queue(Producer):
    """A named lane of jobs of an app: enqueue, inspect and administer it. ``app`` may be an
    ``App`` (connected), its facade (``app.ops``), or a backend: then the default app's facade
    on it. ``serializer`` and ``settings`` default to the app's."""

    def __init__(
        self,
        name: str,
        app: App | Instrumented | Backend,
        *,
        serializer: Serializer | None = None,
        settings: Settings | None = None,
    ) -> None:
        if isinstance(app, Backend):
            app = default_app().over(app)
        if isinstance(app, App):
            serializer = serializer or app.serializer
            settings = settings or app.settings
            app = app.ops
        super().__init__(name, app, serializer=serializer or DEFAULT_SERIALIZER, settings=settings)

    # -- admin and observation --------------------------------------------------------------

    def handle(self, job_id: str) -> JobHandle[Any]:
        return JobHandle(self.ops, self.name, _job_id(job_id), serializer=self.serializer)

    # Not found: a lookup (``get_job``) answers None; an action on a job (``cancel``,
    # ``retry_job``, ``remove_job``, and ``JobHandle``'s methods) raises ``JobNotFoundError``.

    async def get_job(self, job_id: str) -> Job | None:
        """The job's current record, or None when there is no such job."""
        return await self.ops.get_job(self.name, _job_id(job_id))

    async def get_jobs(self, job_ids: Sequence[str]) -> list[Job | None]:
        """The current records of ``job_ids`` in one backend call, None for absent ones."""
        return await self.ops.get_jobs(self.name, _job_ids(job_ids))

    async def sequence_head(self, sequence: str) -> Job | None:
        """The job ``sequence`` waits on: its earliest job, in enqueue order, that has not
        left it (waiting, delayed, active, or dead-lettered and holding it); None when no job
        does (the sequence is free)."""
        return await self.ops.sequence_head(self.name, check_text(sequence, "sequence"))

    async def list_jobs(
        self,
        state: JobState,
        offset: int = 0,
        limit: int = 100,
        *,
        task: str | None = None,
        older_than: float | None = None,
        now: float | None = None,
        task_contains: str | None = None,
    ) -> list[Job]:
        """A page of jobs in ``state`` (waiting in claim order, delayed by run time, others
        oldest first). ``task``, ``task_contains`` (a part of the task name) and ``older_than``
        (seconds since the job finished, or was created when it has not) narrow it; ``offset``
        and ``limit`` then count matching jobs, and the listing reads pages of the state until
        it has ``limit`` of them."""
        selection = _selection(None, None, task, older_than, now, task_contains)
        return await bulk.find(self.ops, self.name, state, selection, offset, limit)

    async def search(
        self, state: JobState, where: JobFilter, offset: int = 0, limit: int = 100
    ) -> bulk.Found:
        """A page of the jobs in ``state`` that ``where`` matches (an id prefix, a part of the
        task name, an age, argument values: ``JobFilter``, or ``JobFilter.parse`` for what an
        operator typed), in listing order. SQLite and PostgreSQL find them with one query
        (argument values through their JSON functions), MongoDB all but the arguments; what
        the backend cannot check is checked here over at most ``bulk.SCAN_LIMIT`` jobs read,
        which ``Found.scanned`` says."""
        return await bulk.search(self.ops, self.name, state, where, offset, limit)

    async def history(self, minutes: int = 60) -> list[Tally]:
        """The queue's stored per-minute outcomes (completed, retried, failed), per task with
        its run times and pickup latencies (``Tally``), over the last ``minutes`` minutes,
        this one included, by minute; minutes with none are left out. Workers write them
        every ``Settings.history_flush_interval`` seconds."""
        if minutes < 1:
            raise ConfigError(f"minutes must be at least 1, not {minutes!r}")
        return await self.ops.tallies(self.name, int(time.time() // 60) - minutes + 1)

    async def counts(self) -> dict[JobState, int]:
        return await self.ops.counts(self.name)

    async def cancel(self, job_id: str) -> CancelResult:
        """Cancel a waiting, delayed or active job: ``CANCELLED``, or ``ALREADY_TERMINAL`` when
        it had ended (nothing changes). ``JobNotFoundError`` when there is no such job."""
        result = await self.ops.cancel(self.name, _job_id(job_id))
        if result is CancelResult.NOT_FOUND:
            raise _not_found(self.name, job_id)
        return result

    async def retry_job(self, job_id: str) -> bool:
        """Manual retry / DLQ replay: run a failed, expired or cancelled job again, with a
        fresh TTL window (``created_at`` becomes the time of the replay).

        True when it is waiting again; False when it is not in one of those states (it has not
        ended, or it completed); ``JobNotFoundError`` when there is no such job.
        """
        if await self.ops.retry_job(self.name, _job_id(job_id)):
            return True
        if await self.ops.get_job(self.name, job_id) is None:  # only on the refusal path
            raise _not_found(self.name, job_id)
        return False

    async def remove_job(self, job_id: str) -> None:
        """Delete the job in any state (an active job's claim is lost); ``JobNotFoundError``
        when there is no such job."""
        if not await self.ops.remove_job(self.name, _job_id(job_id)):
            raise _not_found(self.name, job_id)

    # Bulk actions select jobs by ``job_ids`` and/or ``state`` (one or several), narrowed by
    # ``task`` (or a part of its name, ``task_contains``) and ``older_than`` (seconds since a
    # job finished, or was created when it has not; measured from ``now``, default this
    # machine's clock). They go a page at a time (see
    # relaymq.bulk): per page one listing and one batch call. Each returns how many jobs it
    # changed and announces the same events as its one-job form.

    async def retry_jobs(
        self,
        job_ids: Iterable[str] | None = None,
        *,
        state: JobState | Iterable[JobState] | None = None,
        task: str | None = None,
        older_than: float | None = None,
        now: float | None = None,
        task_contains: str | None = None,
    ) -> int:
        """Manual retry / DLQ replay of every selected failed, expired or cancelled job (all
        three when no state is given); how many are waiting again."""
        selection = _selection(job_ids, state, task, older_than, now, task_contains)
        return await bulk.apply(
            self.ops,
            self.name,
            selection,
            _RETRYABLE,
            lambda ids: self.ops.retry_jobs(self.name, ids),
        )

    async def cancel_jobs(
        self,
        job_ids: Iterable[str] | None = None,
        *,
        state: JobState | Iterable[JobState] | None = None,
        task: str | None = None,
        older_than: float | None = None,
        now: float | None = None,
        task_contains: str | None = None,
    ) -> int:
        """Cancel every selected waiting, delayed or active job (all three when no state is
        given); how many are now cancelled."""
        selection = _selection(job_ids, state, task, older_than, now, task_contains)
        return await bulk.apply(
            self.ops, self.name, selection, _LIVE, lambda ids: self.ops.cancel_jobs(self.name, ids)
        )

    async def remove_jobs(
        self,
        job_ids: Iterable[str] | None = None,
        *,
        state: JobState | Iterable[JobState] | None = None,
        task: str | None = None,
        older_than: float | None = None,
        now: float | None = None,
        task_contains: str | None = None,
    ) -> int:
        """Delete every selected job, in any state when no state is given; how many were
        deleted. Selecting nothing at all is a ``ConfigError`` (``obliterate`` empties a
        queue)."""
        selection = _selection(job_ids, state, task, older_than, now, task_contains)
        if selection.empty:
            raise ConfigError("remove_jobs needs job ids, a state, a task or an age")
        return await bulk.apply(
            self.ops,
            self.name,
            selection,
            tuple(JobState),
            lambda ids: self.ops.remove_jobs(self.name, ids),
        )

    async def pause(self) -> None:
        """Stop workers everywhere from claiming this queue's jobs; enqueues still succeed."""
        await self.ops.pause(self.name)
        self._saw_paused(True)

    async def resume(self) -> None:
        await self.ops.resume(self.name)
        self._saw_paused(False)

    async def is_paused(self) -> bool:
        paused = await self.ops.is_paused(self.name)
        self._saw_paused(paused)
        return paused

    async def set_limits(
        self,
        *,
        max_active: int | None = None,
        rate: int | str | None = None,
        per: float = 1.0,
        key_rate: int | str | None = None,
        key_per: float = 1.0,
        key_max_active: int | None = None,
        fair: bool = False,
        weights: Mapping[str, int] | None = None,
    ) -> Limits | None:
        """Limit this queue over every worker, from their next claim on: at most
        ``max_active`` jobs active at once, at most ``rate`` starts per ``per`` seconds (or
        ``rate="100/m"``), at most ``key_rate`` starts per ``key_per`` seconds for each limit
        key (``with_options(limit_key=...)``), and at most ``key_max_active`` active jobs of
        each key (the claim passes over a key at its cap to the jobs behind); ``fair=True``
        rotates claims over the keys with waiting jobs (``weights``: more turns per round for
        some keys). With none, the queue's limits are removed.
        Returns what is stored. See ``relaymq.limits``."""
        limits = make_limits(
            max_active, rate, per, key_rate, key_per, key_max_active, fair, weights
        )
        await self.ops.set_limits(self.name, None if limits.empty else limits)
        return None if limits.empty else limits

    async def limits(self) -> Limits | None:
        """This queue's stored limits, or None."""
        return (await self.ops.list_limits()).get(self.name)

    async def set_retention(
        self,
        *,
        completed: _retention.Seconds | None = None,
        cancelled: _retention.Seconds | None = None,
        failed: _retention.Seconds | None = None,
        max_finished: int | None = None,
    ) -> Retention:
        """Keep this queue's finished jobs this long (seconds or ``timedelta``; 0 keeps them
        for ever), for every worker: ``completed`` and ``cancelled`` jobs (default one day),
        dead-lettered ``failed`` and expired jobs (default seven days), and at most about
        ``max_finished`` jobs per finished state. A window not given keeps its default. The
        elected maintenance deletes older ones (``relaymq.retention``). Returns what is
        stored; ``ConfigError`` on a negative or non-number, and nothing is stored."""
        policy = _retention.make_retention(completed, cancelled, failed, max_finished)
        await _retention.store(self.ops, self.name, policy)
        return policy

    async def retention(self) -> Retention:
        """The retention that applies to this queue: its own, else the backend's default."""
        return await _retention.policy(self.ops, self.name)

    async def drain(self) -> int:
        """Delete every waiting and delayed job."""
        return await self.ops.drain(self.name)

    async def clean(self, state: JobState, older_than: float = 0.0) -> int:
        """Delete jobs in terminal ``state`` finished more than ``older_than`` seconds ago."""
        if state not in TERMINAL:
            raise ConfigError(f"clean takes a terminal state, not {state.value}")
        return await self.ops.clean(self.name, state, older_than)

    async def obliterate(self) -> None:
        """Delete the queue and everything in it, its retention too."""
        await self.ops.obliterate(self.name)
        await _retention.store(self.ops, self.name, None)


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
    job_ids: Iterable[str] | None,
    state: JobState | Iterable[JobState] | None,
    task: str | None,
    older_than: float | None,
    now: float | None,
    task_contains: str | None,
) -> bulk.Selection:
    """What a bulk action selects, its ids and task checked first."""
    ids = None if job_ids is None else _job_ids(job_ids)
    return bulk.Selection.of(
        ids, state, _task(task), older_than, now, _task(task_contains, "task_contains")
    )
