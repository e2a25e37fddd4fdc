"""Selecting many jobs of a queue for one admin action (``Queue.retry_jobs`` and friends).

A ``Selection`` is what the operator asked for: explicit ids, or states, narrowed by task and
age. ``apply`` walks it a page at a time, so an action over a million jobs costs pages, never
one call per job and never a load of the whole queue: per page one listing (or one batch read
of explicit ids) and one batch action. Jobs that change state during the pass (other workers,
other operators) may or may not be included; nothing is acted on twice.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from relaymq.errors import ConfigError
from relaymq.instrumented import Instrumented
from relaymq.job import Job, JobState
from relaymq.records.search import JobFilter

PAGE = 500
"""Jobs per page of a bulk action: one listing and one batch call each."""

Action = Callable[[Sequence[str]], Awaitable[list[bool]]]


@dataclass(frozen=True, slots=True)
class Selection:
    """The jobs a bulk action applies to; every criterion given must hold.

    ``ids``: exactly these jobs (absent ones are skipped). ``states``: jobs in these states
    (None: the action's own default). ``task``: jobs of this task name. ``task_contains``:
    jobs whose task name contains this text (a search). ``older_than``: jobs
    that finished (terminal ones) or were created (the others) more than this many seconds
    before ``now`` (the backend's time; default this machine's clock).
    """

    ids: tuple[str, ...] | None = None
    states: tuple[JobState, ...] | None = None
    task: str | None = None
    older_than: float | None = None
    now: float | None = None
    task_contains: str | None = None

    @classmethod
    def of(
        cls,
        ids: Iterable[str] | None = None,
        state: JobState | Iterable[JobState] | None = None,
        task: str | None = None,
        older_than: float | None = None,
        now: float | None = None,
        task_contains: str | None = None,
    ) -> Selection:
        """Validate and normalise what a caller gave (ids and states without repeats)."""
        if older_than is not None and not older_than >= 0:
            raise ConfigError(f"older_than must be a number of seconds >= 0, not {older_than!r}")
        states = None
        if state is not None:
            given = [state] if isinstance(state, JobState) else list(state)
            states = tuple(dict.fromkeys(JobState(s) for s in given))
        unique = None if ids is None else tuple(dict.fromkeys(ids))
        return cls(unique, states, task, older_than, now, task_contains or None)

    @property
    def narrowed(self) -> bool:
        """Whether anything beyond ids and states must be checked on each job."""
        return (
            self.task is not None or self.older_than is not None or self.task_contains is not None
        )

    @property
    def empty(self) -> bool:
        """Nothing selects: no ids, states, task or age were given."""
        return self.ids is None and self.states is None and not self.narrowed

    def matches(self, job: Job, now: float) -> bool:
        if self.states is not None and job.state not in self.states:
            return False
        if self.task is not None and job.task != self.task:
            return False
        if self.task_contains is not None and self.task_contains not in job.task:
            return False
        if self.older_than is not None:
            since = job.finished_at if job.terminal and job.finished_at else job.created_at
            if not since < now - self.older_than:
                return False
        return True


async def apply(
    ops: Instrumented,
    queue: str,
    selection: Selection,
    defaults: Sequence[JobState],
    action: Action,
    page: int = PAGE,
) -> int:
    """Run ``action`` over the selected jobs of ``queue``, a page at a time; how many changed.

    Explicit ids go in pages of ``page`` (read first only when a state, task or age must be
    checked). Otherwise each state is listed page by page; the jobs an action changed leave
    their state, so the next page starts after the ones it left alone.
    """
    now = selection.now if selection.now is not None else time.time()
    if selection.ids is not None:
        total = 0
        for at in range(0, len(selection.ids), page):
            chunk = list(selection.ids[at : at + page])
            if selection.narrowed or selection.states is not None:
                found = await ops.get_jobs(queue, chunk)
                chunk = [j.id for j in found if j is not None and selection.matches(j, now)]
            if chunk:
                total += sum(await action(chunk))
        return total
    total = 0
    for state in selection.states or defaults:
        offset = 0
        while True:
            jobs = await ops.list_jobs(queue, state, offset, page)
            chosen = [j.id for j in jobs if selection.matches(j, now)]
            changed = sum(await action(chosen)) if chosen else 0
            total += changed
            if len(jobs) < page:
                break
            offset += len(jobs) - changed
    return total


async def find(
    ops: Instrumented,
    queue: str,
    state: JobState,
    selection: Selection,
    offset: int,
    limit: int,
    page: int = PAGE,
) -> list[Job]:
    """The jobs in ``state`` that ``selection`` matches, skipping ``offset`` of them, at most
    ``limit``. Without a task or age this is one listing; with one it reads pages of the state
    until enough matched (the cost of the jobs read, not of the queue unless nothing matches)."""
    if not selection.narrowed:
        return await ops.list_jobs(queue, state, offset, limit)
    now = selection.now if selection.now is not None else time.time()
    out: list[Job] = []
    skip, at = offset, 0
    while len(out) < limit:
        jobs = await ops.list_jobs(queue, state, at, page)
        for job in jobs:
            if not selection.matches(job, now):
                continue
            if skip:
                skip -= 1
            elif len(out) < limit:
                out.append(job)
        if len(jobs) < page:
            break
        at += len(jobs)
    return out


SCAN_LIMIT = 10_000
"""Jobs a search reads at most, a page at a time, where the backend's own query cannot check
every condition (``Capabilities.search``)."""


@dataclass(frozen=True, slots=True)
class Found:
    """What a search found (``Queue.search``), and how."""

    jobs: list[Job]
    scanned: int | None = None
    """Jobs read and checked here, a page at a time, because the backend's query cannot check
    every condition; None when its query found them."""
    cut: bool = False
    """The scan stopped at its bound before the end of the state: jobs past it were not
    looked at."""


async def search(
    ops: Instrumented,
    queue: str,
    state: JobState,
    where: JobFilter,
    offset: int = 0,
    limit: int = 100,
    scan: int = SCAN_LIMIT,
) -> Found:
    """The jobs of ``queue`` in ``state`` that ``where`` matches, skipping ``offset`` of them,
    at most ``limit``: by the backend's own query where it checks every condition
    (``"native"``), else checked here over at most ``scan`` jobs read."""
    if where.empty:
        return Found(await ops.list_jobs(queue, state, offset, limit))
    if ops.backend.capabilities.search == "native":
        return Found(await ops.list_jobs(queue, state, offset, limit, where))
    out: list[Job] = []
    skip, read = offset, 0
    while len(out) < limit and read < scan:
        want = min(PAGE, scan - read)
        jobs = await ops.list_jobs(queue, state, read, want)
        read += len(jobs)
        for job in jobs:
            if not where.matches(job):
                continue
            if skip:
                skip -= 1
            elif len(out) < limit:
                out.append(job)
        if len(jobs) < want:
            return Found(out, read)
    return Found(out, read, cut=len(out) < limit)
