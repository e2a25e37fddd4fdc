"""Tasks: registered functions with default options, and the typed way to enqueue them.

    @task(queue="emails", retries=3)
    async def send(to: str) -> None: ...

    await send.enqueue("a@example.com")                  # checked against send's signature
    await send.with_options(delay=60, job_id="welcome-a").enqueue("a@example.com")

A handler whose first parameter is annotated ``JobContext`` receives one; it is not part of the
arguments given to ``enqueue``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar

from relaymq.arguments import Parameters
from relaymq.errors import ConfigError, TaskNotFoundError
from relaymq.flows import dependency_ids, dependency_policy
from relaymq.models import Models, models_of
from relaymq.options import Call, Options, check_text, sequence_policy
from relaymq.producer import JobHandle
from relaymq.retry import Backoff

if TYPE_CHECKING:
    from relaymq.backends.base import Backend

P = ParamSpec("P")
R = TypeVar("R")


class Enqueuer(Protocol):
    """Where a task's jobs go: its app (``relaymq.App``)."""

    async def enqueue(self, call: Call[R]) -> JobHandle[R]: ...

    def enqueue_sync(self, call: Call[R]) -> JobHandle[R]: ...


class Completer(Protocol):
    """How a worker completes a job in a handler's transaction (``JobContext.complete_in``)."""

    async def complete(self, connection: object, result: Any) -> None: ...

    def complete_sync(self, connection: object, result: Any) -> None: ...


class JobContext:
    """What a running handler may know and do about its own job."""

    def __init__(
        self,
        job_id: str,
        queue: str,
        task: str,
        attempt: int,
        report: Callable[[Any], None],
        results: dict[str, Any] | None = None,
        failed: dict[str, str] | None = None,
        complete: Completer | None = None,
    ) -> None:
        self.job_id = job_id
        self.queue = queue
        self.task = task
        self.attempt = attempt
        self.results: dict[str, Any] = results or {}
        """The results of the jobs this one depended on that completed, by job id (a flow's
        parent: its children's), decoded."""
        self.failed: dict[str, str] = failed or {}
        """Under ``on_dependency_failure="include"``: each dependency that did not complete,
        by job id: how it ended (``"failed: <error>"``, ``"cancelled: ..."``, ``"removed"``)."""
        self._report = report
        self._complete = complete
        self._cancelled = False

    def progress(self, value: Any) -> None:
        """Record progress (any serializable value); stored with the next heartbeat and
        published as ``job:progress``. Safe to call from a plain function's thread."""
        self._report(value)

    async def complete_in(self, connection: object, result: Any = None) -> None:
        """Complete this job in ``connection``'s open transaction, with ``result``: the
        handler's own writes in that transaction and the job's completion commit together, or
        not at all. Fenced by the attempt's claim: when the job is no longer this attempt's
        (recovered and claimed elsewhere, cancelled), nothing is written and
        ``ClaimLostError`` is raised, so the transaction it leaves rolls back. Once the
        transaction commits, the worker writes no outcome of its own (the handler's return
        value is not stored); if it did not commit, the attempt counts as failed. On the
        PostgreSQL and SQLite backends (docs/transactions.md)."""
        await self._completer().complete(connection, result)

    def complete_in_sync(self, connection: object, result: Any = None) -> None:
        """``complete_in`` from a plain (sync) handler, with a sync connection."""
        self._completer().complete_sync(connection, result)

    def _completer(self) -> Completer:
        if self._complete is None:
            raise ConfigError("complete_in is for a handler that a worker runs")
        return self._complete

    @property
    def cancelled(self) -> bool:
        """True once the job was cancelled or its claim lost: a plain function should stop."""
        return self._cancelled


class Task(Generic[P, R]):
    """A registered function plus default options."""

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str,
        options: Options,
        takes_context: bool,
        app: Enqueuer | None = None,
    ) -> None:
        self.app = app
        """The app that registered it (``@app.task``; ``@relaymq.task``: the default app),
        which its ``enqueue`` goes through."""
        self.fn = fn
        self.name = check_text(name, "task name", max_length=None)
        self.options = options
        self.takes_context = takes_context
        self.is_async = inspect.iscoroutinefunction(fn)
        self._models: Models | bool | None = False  # False: not looked at yet
        self._parameters: Parameters | None = None

    @property
    def models(self) -> Models | None:
        """The pydantic adapters of its model-typed parameters and result; None when it has
        none. Read on first use, so models defined after the task still resolve."""
        if self._models is False:
            self._models = models_of(self.fn, skip_first=self.takes_context)
        return self._models if isinstance(self._models, Models) else None

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.options.queue}>"

    def check_arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Raise ``ArgumentValidationError`` when the handler cannot be called with these
        arguments (its ``JobContext`` left out): every enqueue and schedule checks them, so
        nothing is stored that could only fail with a ``TypeError``."""
        if self._parameters is None:
            self._parameters = Parameters(self.fn, skip_first=self.takes_context)
        self._parameters.check(self.name, args, kwargs)

    def call(self, *args: P.args, **kwargs: P.kwargs) -> Call[R]:
        """An invocation to pass to ``Queue.add_bulk`` (arguments checked by type checkers)."""
        return Call(self, args, kwargs, self.options)

    async def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """Enqueue one job through the task's app, on the task's backend if it names one;
        returns its handle. With a ``connection`` option, in that connection's open
        transaction: the job exists if and only if it commits (docs/transactions.md)."""
        return await self._app().enqueue(self.call(*args, **kwargs))

    def enqueue_sync(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """``enqueue`` from sync code, in the open transaction of the ``connection`` option
        (``with_options(connection=conn)``: a sqlite3 or psycopg ``Connection``, a SQLAlchemy
        ``Session``); no event loop needed."""
        return self._app().enqueue_sync(self.call(*args, **kwargs))

    def _app(self) -> Enqueuer:
        if self.app is None:
            raise ConfigError(
                f"task {self.name!r} belongs to no app: define it with @app.task "
                "or @relaymq.task, or enqueue it with Queue.add"
            )
        return self.app

    def with_options(
        self,
        *,
        queue: str | None = None,
        delay: float | None = None,
        job_id: str | None = None,
        priority: int | None = None,
        ttl: float | None = None,
        timeout: float | None = None,
        retries: int | None = None,
        backoff: Backoff | float | None = None,
        backend: Backend | None = None,
        throttle: tuple[str, float] | None = None,
        debounce: tuple[str, float] | None = None,
        depends_on: Iterable[str | JobHandle[Any]] | None = None,
        on_dependency_failure: str | None = None,
        limit_key: str | None = None,
        sequence: str | None = None,
        sequence_on_failure: str | None = None,
        connection: object = None,
    ) -> Task[P, R]:
        """A copy of this task whose next enqueues use these options.

        ``throttle=(key, seconds)`` drops the job while a job of ``key`` is pending in the
        queue or was enqueued less than ``seconds`` ago (the handle is then that job's).
        ``debounce=(key, seconds)`` replaces the pending job of ``key`` and runs ``seconds``
        after this enqueue, so of a burst only the last runs.
        ``depends_on=[handle or id, ...]`` makes the job wait (``blocked``) until those jobs of
        its queue have ended; ``on_dependency_failure`` says what it does when one did not
        complete: ``"fail"`` (the default), ``"ignore"`` or ``"include"``
        (``DependencyPolicy``; see ``relaymq.Flow`` for a parent with children).
        ``limit_key="customer:42"`` counts the job under that key for its queue's per-key
        limits (``relaymq.limit(queue, key_rate=...)``).
        ``sequence="customer:42"`` runs the jobs of that sequence of the queue one at a time,
        in enqueue order; a failed or expired one holds the sequence until it is retried,
        cancelled or removed, unless ``sequence_on_failure="continue"`` (``SequenceFailure``).
        ``connection=conn`` writes the job in ``conn``'s open transaction (a driver's
        connection or a SQLAlchemy session): it exists if and only if that transaction commits
        (docs/transactions.md).

        Raises ``ConfigError`` at once for an invalid option, as ``@task(...)`` does.
        """
        changes: dict[str, Any] = {
            k: v
            for k, v in {
                "queue": queue,
                "delay": delay,
                "job_id": job_id,
                "priority": priority,
                "ttl": ttl,
                "timeout": timeout,
                "retries": retries,
                "backoff": backoff,
                "backend": backend,
                "throttle": throttle,
                "debounce": debounce,
                "depends_on": None if depends_on is None else dependency_ids(depends_on),
                "on_dependency_failure": None
                if on_dependency_failure is None
                else dependency_policy(on_dependency_failure),
                "limit_key": limit_key,
                "sequence": sequence,
                "sequence_on_failure": None
                if sequence_on_failure is None
                else sequence_policy(sequence_on_failure),
                "connection": connection,
            }.items()
            if v is not None
        }
        options = dataclasses.replace(self.options, **changes)
        options.validate()
        copy: Task[P, R] = Task(self.fn, self.name, options, self.takes_context, self.app)
        copy._models = self._models
        copy._parameters = self._parameters
        return copy

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Call the function directly, as if it were not a task (a coroutine if async)."""
        return self.fn(*args, **kwargs)


def takes_context(fn: Callable[..., Any]) -> bool:
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        return False
    annotation = params[0].annotation
    return annotation is JobContext or (
        isinstance(annotation, str) and annotation.rsplit(".", 1)[-1] == "JobContext"
    )


def resolve(
    registry: Mapping[str, Task[Any, Any]], name: str, import_prefixes: Iterable[str] = ()
) -> Task[Any, Any]:
    """The task registered as ``name`` in ``registry`` (an app's ``tasks``, declared by the
    modules the worker was started with). A job's task name is data anyone who can write to
    the backend controls: it never makes this process import a module, unless that module is
    listed in ``import_prefixes`` (a module or a package whose modules may be imported by
    name, ``Settings.import_prefixes``).

    Only functions decorated with ``@task`` can be run, never arbitrary callables.
    """
    found = registry.get(name)
    if found is not None:
        return found
    module_name = name.partition(":")[0]
    if any(module_name == p or module_name.startswith(p + ".") for p in import_prefixes):
        return import_task(registry, name)
    raise TaskNotFoundError(f"unknown task {name!r}: not registered in this worker")


def import_task(
    registry: Mapping[str, Task[Any, Any]], name: str, module: str | None = None
) -> Task[Any, Any]:
    """The task ``name``, importing ``module`` first (by default the part of ``name`` before
    ``:``). For names written in code or by an operator (``schedule("app.tasks:cleanup")``,
    ``relaymq schedule add``), never for a stored job's name (``resolve``).
    """
    found = registry.get(name)
    if found is not None:
        return found
    module_name, sep, attr = name.partition(":")
    if module is None and not sep:
        raise TaskNotFoundError(f"unknown task {name!r}: not registered in this process")
    module_name = module or module_name
    try:
        imported = importlib.import_module(module_name)
    except ImportError as e:
        raise TaskNotFoundError(f"unknown task {name!r}: cannot import {module_name!r}: {e}") from e
    found = registry.get(name)
    obj = getattr(imported, attr, None) if found is None and sep else found
    if not isinstance(obj, Task):
        raise TaskNotFoundError(f"unknown task {name!r}: {module_name} has no @task {attr!r}")
    return obj
