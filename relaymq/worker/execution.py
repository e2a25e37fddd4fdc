"""One attempt of one job: from a claimed record to the ``Settle`` that ends it (or nothing).

Pure of the backend: what the attempt needs from outside (the fenced start check, progress
reporting) is passed in, so every decision here is testable without a server. The core decides
here (expire, cancel, unknown task, retry or fail); the backend only stores the decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from concurrent.futures import Executor
from typing import Any

from relaymq.app import default_app
from relaymq.errors import BackendError, SerializationError, TaskNotFoundError
from relaymq.instrumented import Instrumented
from relaymq.job import ATTEMPTS_KEPT, DependencyPolicy, Job, JobState, describe, error_line
from relaymq.observers import Hooks
from relaymq.records.store import Outcome, Settle
from relaymq.retry import DEFAULT_BACKOFF, Backoff, next_delay
from relaymq.serializers import Serializer
from relaymq.settings import Settings
from relaymq.task import JobContext, Task, resolve
from relaymq.worker import logcontext
from relaymq.worker.completing import NOT_COMMITTED, CompleteIn, committed
from relaymq.worker.running import RunningJob, StopReason
from relaymq.worker.sandbox import Sandbox, SandboxFailed
from relaymq.worker.threads import ThreadPool

log = logging.getLogger("relaymq.worker")


START_CHECK_AFTER = 0.05
"""A handler that starts this many seconds or more after its claim is checked again first
(claim held, job not cancelled), in one round trip shared with the other jobs starting then.
One that starts sooner relies on the claim itself, which skipped cancelled jobs atomically."""

DEFAULT_MAX_RESULT_BYTES = Settings().max_result_bytes

NOT_STARTED: Any = object()
"""What a plain handler's thread returns when the check right before the handler stopped it."""


def failure(job: Job, backoff: Backoff | float, error: str) -> Settle:
    """The retry decision: retry with backoff while attempts remain, else fail into the DLQ."""
    if job.attempts < job.max_attempts:
        return Settle(
            job.claim, Outcome.RETRY, error=error, delay=next_delay(backoff, job.attempts)
        )
    return Settle(job.claim, Outcome.FAIL, error=error)


def too_large(size: int, limit: int) -> str:
    """The error of an attempt whose result is over ``max_result_bytes``."""
    return (
        f"result too large: the result is {size} bytes, over max_result_bytes={limit} "
        "(RELAYMQ_MAX_RESULT_BYTES); store a large result elsewhere and return a reference"
    )


def refused(
    job: Job, settle: Settle, reason: str, tasks: Mapping[str, Task[Any, Any]] | None = None
) -> Settle:
    """What to write instead of an outcome the backend refused for good (``RecordRefusedError``,
    e.g. a result over MongoDB's document limit): a failed attempt without a result, the
    refusal as its error, retried by the task's policy while attempts remain (a completion
    or a retry), else the same ending with the refusal as its error."""
    error = f"the backend refused this attempt's outcome ({settle.outcome}): {reason}"
    if settle.outcome not in (Outcome.COMPLETE, Outcome.RETRY):
        return Settle(settle.claim, settle.outcome, error=error)
    try:
        backoff = resolve(tasks or default_app().tasks, job.task).options.backoff
    except TaskNotFoundError:
        backoff = DEFAULT_BACKOFF
    return failure(job, backoff, error)


def unknown_task(job: Job, e: TaskNotFoundError) -> str:
    """The error of a job whose task this worker does not know, with how to fix it."""
    text = f"{e} (retried while attempts remain: another worker may know it)"
    if job.task.startswith("__main__:"):
        text += (
            "; a task defined in a script run as __main__ has a name no worker can import: "
            "define it in an importable module, or give it @task(name=...)"
        )
    return text


def _raised(hooks: Hooks, job: Job, e: BaseException) -> None:
    if hooks.observers:
        hooks.tell(lambda o: o.handler_raised(job, e))


class Overran(Exception):
    """A plain handler ran past its timeout; raised once its thread has returned."""


def after_stop(r: RunningJob) -> Settle | None:
    """The outcome of a stopped handler; None when the claim is lost (write nothing)."""
    if r.ctx is not None:
        r.ctx._cancelled = True
    if r.stop_reason is StopReason.SHUTDOWN:
        return Settle(r.claim, Outcome.RELEASE)
    if r.stop_reason is StopReason.CANCELLED:
        return Settle(r.claim, Outcome.CANCEL, error="cancelled by request")
    return None


class Execution:
    """Runs attempts. ``still_held`` is the fenced start check (RELIABILITY F12, and the spec's
    cancellation check immediately before the handler), asked for claims older than
    ``fresh_for`` seconds when their handler starts. ``report`` receives a handler's progress
    values; plain handlers run on ``pool``, and are checked on their thread, after waiting
    for it."""

    def __init__(
        self,
        serializer: Serializer,
        still_held: Callable[[RunningJob], Coroutine[Any, Any, bool]],
        report: Callable[[RunningJob, Any], None],
        fresh_for: float = START_CHECK_AFTER,
        pool: Executor | None = None,
        sandbox: Sandbox | None = None,
        get_jobs: Callable[[str, list[str]], Awaitable[list[Job | None]]] | None = None,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        import_prefixes: tuple[str, ...] = (),
        tasks: Mapping[str, Task[Any, Any]] | None = None,
        hooks: Hooks | None = None,
        ops: Instrumented | None = None,
        attempt_history: int = ATTEMPTS_KEPT,
    ) -> None:
        self.serializer = serializer
        self.attempt_history = attempt_history
        """Attempts a job's history keeps, for a completion written by ``complete_in``."""
        self.max_result_bytes = max_result_bytes
        """A larger serialized result fails the attempt (``Settings.max_result_bytes``)."""
        self.import_prefixes = import_prefixes
        """Modules a job's task name may make this worker import (``Settings``); none by
        default: only the tasks registered in this process run."""
        self.tasks = default_app().tasks if tasks is None else tasks
        """The tasks this worker runs (its app's)."""
        self.hooks = default_app().hooks if hooks is None else hooks
        """The observers told of each attempt (its app's)."""
        self.get_jobs = get_jobs
        """Reads the dependencies of a job whose handler takes a ``JobContext``, and a job
        the handler completed in its own transaction (``JobContext.complete_in``)."""
        self.ops = ops
        """Where ``JobContext.complete_in`` writes (None: a context without it)."""
        self.still_held = still_held
        self.report = report
        self.fresh_for = fresh_for
        self.pool = pool or ThreadPool(4)
        """Where plain handlers run (the worker gives its own, sized to its concurrency)."""
        self.sandbox = sandbox or Sandbox(1)
        """Where sandboxed handlers run (the worker's, one child per slot at most)."""
        logcontext.install()

    async def run(self, r: RunningJob, now: float) -> Settle | None:
        """One attempt; ``now`` is the backend's clock at the claim. It always ends in an
        outcome (or a lost claim): a claim left held would be renewed, never recovered.

        Every log record made meanwhile carries the job's fields (``logcontext``); the
        installed observers see the attempt (a trace span, run-time metrics)."""
        token = logcontext.CURRENT.set(r.job)
        try:
            if not self.hooks.observers:
                return await self._run(r, now)
            with self.hooks.around(lambda o: o.attempt(r.job)):
                settle = await self._run(r, now)
                self.hooks.tell(lambda o: o.attempt_ended(r.job, settle, r.ran_for))
                return settle
        finally:
            logcontext.CURRENT.reset(token)

    async def _run(self, r: RunningJob, now: float) -> Settle | None:
        try:
            return await self._attempt(r, now)
        except asyncio.CancelledError:
            return after_stop(r)
        except Exception as e:  # outside the handler, which has its own outcomes
            if r.stop_reason is not None:
                return after_stop(r)
            if isinstance(e, BackendError):  # the start check could not ask: run it later
                log.warning(
                    "could not check the claim on %s/%s (%s); releasing it",
                    r.job.queue,
                    r.job.id,
                    e,
                )
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
            t = resolve(self.tasks, job.task, self.import_prefixes)
        except TaskNotFoundError as e:  # the job's own backoff is its task's: use the default
            return failure(job, DEFAULT_BACKOFF, unknown_task(job, e))
        try:
            data = self.serializer.loads(job.payload)
            args, kwargs = list(data["args"]), dict(data["kwargs"])
            models = t.models
            if models is not None:  # pydantic-typed parameters get their models back
                args, kwargs = models.load_args(args, kwargs)
        except (SerializationError, KeyError, TypeError, ValueError) as e:
            return Settle(claim, Outcome.FAIL, error=f"cannot decode the job's payload: {e}")
        sandboxed = t.options.sandbox
        if t.is_async or sandboxed:  # the check right before the handler
            if self._check_due(r):
                await self.still_held(r)
            if r.stop_reason is not None:
                return after_stop(r)
        results: dict[str, Any] = {}
        failed: dict[str, str] = {}
        if t.takes_context and job.depends_on and self.get_jobs is not None:
            try:
                results, failed = await self._dependencies(job)
            except BackendError as e:  # run it again once they can be read
                log.warning(
                    "job %s/%s: its dependencies could not be read (%s); released",
                    job.queue,
                    job.id,
                    e,
                )
                return Settle(claim, Outcome.RELEASE)
        if t.takes_context and not sandboxed:
            r.ctx = JobContext(
                job.id,
                job.queue,
                job.task,
                job.attempts,
                lambda value: self.report(r, value),
                results,
                failed,
                None
                if self.ops is None
                else CompleteIn(
                    self.ops,
                    r,
                    self.serializer,
                    models,
                    self.max_result_bytes,
                    self.attempt_history,
                ),
            )
            args.insert(0, r.ctx)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "job %s/%s started (%s, attempt %d)", job.queue, job.id, job.task, job.attempts
            )
        value: Any = None
        settle: Settle | None = None  # the handler failed
        backoff = t.options.backoff
        began = time.monotonic()
        try:
            if sandboxed:
                value = await self._in_sandbox(r, t, args, kwargs, (results, failed))
            elif not t.is_async:
                value = await self._in_thread(r, t, args, kwargs)
                if value is NOT_STARTED:
                    return after_stop(r) if r.stop_reason else Settle(claim, Outcome.RELEASE)
            elif job.timeout is None:
                value = await t.fn(*args, **kwargs)  # the common case, without a wrapper
            else:
                async with asyncio.timeout(job.timeout):
                    value = await t.fn(*args, **kwargs)
        except (Overran, SandboxFailed) as e:
            settle = failure(job, backoff, str(e))
            _raised(self.hooks, job, e)
        except TimeoutError as e:
            settle = failure(job, backoff, f"TimeoutError: timed out after {job.timeout}s")
            _raised(self.hooks, job, e)
        except asyncio.CancelledError:
            r.ran_for = time.monotonic() - began
            raise
        except Exception as e:
            settle = failure(job, backoff, describe(e))
            _raised(self.hooks, job, e)
        r.ran_for = time.monotonic() - began
        if r.stop_reason in (StopReason.LOST, StopReason.CANCELLED):
            return after_stop(r)  # a thread that ended after it was told to stop
        if r.completed_in is not None and self.get_jobs is not None:
            [now_job] = await self.get_jobs(job.queue, [job.id])
            done = committed(r, now_job)
            if done is not False:  # written in the handler's transaction, or lost meanwhile
                return r.completed_in if done else None
            return settle or failure(job, backoff, NOT_COMMITTED)
        if settle is not None:
            return settle
        try:
            result = self.serializer.dumps(value if models is None else models.dump_result(value))
        except SerializationError as e:
            return Settle(claim, Outcome.FAIL, error=f"the result cannot be serialized: {e}")
        if len(result) > self.max_result_bytes:  # the backend might refuse it, or serve it whole
            return failure(job, backoff, too_large(len(result), self.max_result_bytes))
        return Settle(claim, Outcome.COMPLETE, result=result)

    def _check_due(self, r: RunningJob) -> bool:
        """The check right before a handler asks the backend: for a job not stopped already
        whose claim is ``fresh_for`` old or older (a fresher one relies on the claim)."""
        return r.stop_reason is None and time.monotonic() - r.claimed_mono >= self.fresh_for

    async def _dependencies(self, job: Job) -> tuple[dict[str, Any], dict[str, str]]:
        """The results of ``job``'s completed dependencies, and (``DependencyPolicy.INCLUDE``)
        how each of the others ended, by job id."""
        assert self.get_jobs is not None
        ids = list(dict.fromkeys(job.depends_on))
        results: dict[str, Any] = {}
        failed: dict[str, str] = {}
        for dep_id, dep in zip(ids, await self.get_jobs(job.queue, ids), strict=True):
            if dep is not None and dep.state is JobState.COMPLETED:
                results[dep_id] = dep.result_value(self.serializer)
            elif job.on_dependency_failure is DependencyPolicy.INCLUDE:
                how = "removed" if dep is None else dep.state.value
                failed[dep_id] = f"{how}: {error_line(dep.error)}" if dep and dep.error else how
        return results, failed

    async def _in_sandbox(
        self,
        r: RunningJob,
        t: Task[Any, Any],
        args: list[Any],
        kwargs: dict[str, Any],
        dependencies: tuple[dict[str, Any], dict[str, str]],
    ) -> Any:
        """Run the handler in one of the sandbox's child processes; a timeout or a stop
        (the job's task cancelled) kills the child."""
        job = r.job
        context = (
            (job.id, job.queue, job.task, job.attempts, *dependencies)
            if (t.takes_context)
            else None
        )
        call = self.sandbox.run(
            job.task, t.fn.__module__, args, kwargs, context, lambda v: self.report(r, v)
        )
        if job.timeout is None:
            return await call
        async with asyncio.timeout(job.timeout):
            return await call

    async def _in_thread(
        self, r: RunningJob, t: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        """Run a plain handler on the pool and return what it returned. A thread cannot be
        stopped: past the job's timeout it is told (``JobContext.cancelled``) and still
        awaited, so the job keeps its slot and its claim (renewed by the heartbeats) and the
        next attempt never starts beside this one; then ``Overran`` is raised."""
        began = time.monotonic()
        loop = asyncio.get_running_loop()

        def checked_call() -> Any:  # on the handler's thread, once it has one
            if self._check_due(r):
                try:
                    asyncio.run_coroutine_threadsafe(self.still_held(r), loop).result()
                except Exception as e:
                    log.warning(
                        "could not check the claim on %s/%s (%s); releasing it",
                        r.job.queue,
                        r.job.id,
                        e,
                        extra=r.log_extra,
                    )
                    return NOT_STARTED
            if r.stop_reason is not None:
                return NOT_STARTED
            return t.fn(*args, **kwargs)

        r.thread = self.pool.submit(contextvars.copy_context().run, checked_call)
        done = asyncio.wrap_future(r.thread)
        limit = asyncio.timeout(r.job.timeout)
        try:
            async with limit:
                return await asyncio.shield(done)
        except TimeoutError:
            if not limit.expired():
                raise  # the handler's own TimeoutError
        if r.ctx is not None:
            r.ctx._cancelled = True
        log.warning(
            "job %s/%s (%s, attempt %d) overran its timeout of %ss: a plain function "
            "cannot be stopped, so it keeps its slot and claim until it returns",
            r.job.queue,
            r.job.id,
            r.job.task,
            r.job.attempts,
            r.job.timeout,
        )
        with contextlib.suppress(Exception):  # overran: what it returned or raised is moot
            await done
        raise Overran(
            f"TimeoutError: the handler overran its timeout of {r.job.timeout}s and "
            f"returned after {time.monotonic() - began:.1f}s (a plain function cannot "
            "be stopped: the next attempt waited for it)"
        )
