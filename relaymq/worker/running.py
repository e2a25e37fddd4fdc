"""The jobs a worker holds: one ``RunningJob`` per claim, and the rule linking slots and claims."""

from __future__ import annotations

import asyncio
import enum
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from relaymq.job import Claim, Job
from relaymq.records.store import Settle
from relaymq.task import JobContext
from relaymq.worker import logcontext


class StopReason(enum.Enum):
    """Why a handler was stopped before it returned."""

    LOST = "lost"  # another worker owns the job now: write nothing
    CANCELLED = "cancelled"  # an operator cancelled it: acknowledge the cancellation
    SHUTDOWN = "shutdown"  # this worker is stopping: release the job to run again at once
    # (a handler still running in a thread is waited for, never released while it runs)


@dataclass(eq=False, slots=True)
class RunningJob:
    """One claimed job, from its claim until its outcome is settled."""

    job: Job
    claim: Claim
    claimed_mono: float = field(default_factory=time.monotonic)
    """When the call that made the claim was sent: the claim is at least this old."""
    ctx: JobContext | None = None
    """Made only for handlers that take one."""
    task: asyncio.Task[Any] | None = None
    thread: Future[Any] | None = None
    """A plain handler's call in the worker's thread pool, once submitted."""
    stop_reason: StopReason | None = None
    progress: bytes | None = None
    """Progress reported since the last heartbeat, stored by the next one."""
    running: bool = True
    """The handler (or the checks before it) has not ended: the job takes a slot."""
    settling: bool = False
    """The outcome is written or being written: heartbeats leave the claim alone."""
    completed_in: Settle | None = None
    """The completion the handler wrote in its own transaction (``JobContext.complete_in``):
    the claim is no longer renewed (that transaction holds the job), and the worker writes
    no outcome of its own if it committed."""
    ran_for: float | None = None
    """Seconds the handler ran, once it ended (None while it runs, or if it never started)."""
    key: tuple[str, str, int] = field(init=False)
    """One attempt: the same job claimed again (after this claim was recovered as stalled)
    is another ``RunningJob``, and each is renewed, stopped and dropped on its own."""

    def __post_init__(self) -> None:
        self.key = (self.claim.queue, self.claim.job_id, self.claim.token)

    @property
    def in_thread(self) -> bool:
        """A plain handler is running in a thread, which nothing can stop from outside."""
        return self.thread is not None and not self.thread.done()

    @property
    def log_extra(self) -> dict[str, Any]:
        """The fields every log line about this job carries (``extra=``); empty inside the
        job's own context, where every record gets them already (``logcontext``)."""
        if logcontext.CURRENT.get() is self.job:
            return {}
        return logcontext.fields(self.job)

    def stop(self, reason: StopReason, *, interrupt: bool = True) -> None:
        """Stop the job: the first reason given is the one its outcome follows. ``interrupt``
        cancels its asyncio task (not wanted from inside that task, which returns by itself).
        A handler running in a thread is only told (``JobContext.cancelled``): its task goes on
        waiting for the thread, so the job keeps its slot and claim until the thread ends."""
        if self.stop_reason is None:
            self.stop_reason = reason
        if self.ctx is not None:
            self.ctx._cancelled = True
        if interrupt and not self.in_thread and self.task is not None and not self.task.done():
            self.task.cancel()


class Claims:
    """Every claim a worker holds.

    The rule, in one place: a claim is HELD from the claim until the backend answered its
    settle (or the claim was found lost); a job is RUNNING, and takes one of the worker's
    slots, from the claim until its handler ended. Running jobs are a subset of held claims,
    and only the three methods below move a job between these sets.
    """

    def __init__(self) -> None:
        self._held: dict[tuple[str, str, int], RunningJob] = {}
        self.running = 0
        self.by_queue: dict[str, int] = {}
        """Running jobs per queue (for ``App.limit(local_max_active=...)``)."""
        self.slot_free = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()

    def add(self, job: Job, sent: float | None = None) -> RunningJob:
        """A new claim, made by a call sent at ``sent`` (monotonic; default: now): held and
        running."""
        r = RunningJob(job, job.claim, time.monotonic() if sent is None else sent)
        self._held[r.key] = r
        self.running += 1
        self.by_queue[job.queue] = self.by_queue.get(job.queue, 0) + 1
        self.idle.clear()
        return r

    def handler_ended(self, r: RunningJob) -> None:
        """The job gives back its slot; its claim stays held until it is settled."""
        if r.running:
            r.running = False
            self.running -= 1
            self.by_queue[r.job.queue] -= 1
            self.slot_free.set()
            if self.running == 0:
                self.idle.set()

    def drop(self, r: RunningJob) -> None:
        """The claim is no longer held: settled, or lost with nothing to write."""
        self.handler_ended(r)
        if self._held.get(r.key) is r:
            del self._held[r.key]

    def holds(self, r: RunningJob) -> bool:
        return self._held.get(r.key) is r

    def __len__(self) -> int:
        return len(self._held)

    def to_renew(self) -> list[RunningJob]:
        """Every held claim, those whose outcome waits to be written included: a settle held up
        (a slow or reconnecting backend) must not let the outcomes queued behind it stall.
        Not one completed in a handler's transaction, which holds the job (and its lock)."""
        return [r for r in self._held.values() if r.completed_in is None]

    def running_jobs(self) -> list[RunningJob]:
        return [r for r in self._held.values() if r.running]
