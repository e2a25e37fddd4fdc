"""relaymq as a Django 6 Tasks backend (``django.tasks``).

::

    TASKS = {
        "default": {
            "BACKEND": "relaymq.contrib.django.RelayMQBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"URL": "redis://127.0.0.1:6379/0"},   # any relaymq backend URL
        }
    }
    INSTALLED_APPS = [..., "relaymq.contrib.django"]           # for the worker command

    python manage.py relaymq_worker                            # runs the backend's queues

Each Django task call becomes one relaymq job in the queue of the task's ``queue_name``; the job
runs ``relaymq.contrib.django:run``, which imports the Django task by path and calls it in one of
the worker's threads; only a task of one of the project's ``INSTALLED_APPS`` is imported,
whatever a job names. Priorities (Django: -100 to 100, higher first) map to relaymq's 0 to 200
(lower first); ``run_after`` becomes the job's delay; ``get_result`` reads the job back (result
ids are ``<queue>/<job id>``). Django tasks are not retried (Django has no retry option).

Inside ``transaction.atomic()``, a task is enqueued through Django's own connection
(``OPTIONS["DATABASE"]``, default ``"default"``), in the same transaction as the view's data:
the job exists if and only if that transaction commits. That needs the relaymq backend in the
same database (a PostgreSQL or SQLite ``URL`` on Django's own database), or an outbox there
(``OPTIONS["OUTBOX"]``, a relaymq URL of Django's database) for any other backend. Outside an
atomic block, Django commits each statement, and so does the enqueue. In an async view, open
the transaction in a sync function (``sync_to_async``) and enqueue there.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any, TypeVar

try:
    from django.apps import apps
    from django.db import connections
    from django.tasks import TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task as DjangoTask
    from django.tasks.base import TaskContext, TaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.utils.json import normalize_json
    from django.utils.module_loading import import_string
except ImportError as e:  # pragma: no cover - the hint is the point
    raise ImportError(
        "relaymq.contrib.django needs Django 6 or later: pip install 'django>=6'"
    ) from e

import relaymq
from relaymq import JobContext, JobState, task
from relaymq.app import default_app
from relaymq.job import Job
from relaymq.serializers import DEFAULT_SERIALIZER

T = TypeVar("T")

RUNNER = "relaymq.contrib.django:run"
STATUS = {
    JobState.WAITING: TaskResultStatus.READY,
    JobState.DELAYED: TaskResultStatus.READY,
    JobState.ACTIVE: TaskResultStatus.RUNNING,
    JobState.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobState.FAILED: TaskResultStatus.FAILED,
    JobState.EXPIRED: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}


@task(name=RUNNER)
def run(ctx: JobContext, path: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """The relaymq job of one Django task call: import the task and call it (in a worker
    thread, where the ORM may be used); its return value is stored as JSON."""
    django_task = project_task(path)
    if django_task.takes_context:
        status = TaskResultStatus.RUNNING
        result = _result(django_task, f"{ctx.queue}/{ctx.job_id}", status, args, kwargs)
        object.__setattr__(result, "worker_ids", ["relaymq"] * ctx.attempt)
        return normalize_json(django_task.call(TaskContext(task_result=result), *args, **kwargs))
    return normalize_json(django_task.call(*args, **kwargs))


def project_task(path: str) -> DjangoTask:
    """The Django task at ``path`` (``app.tasks.send``), imported only from one of the
    project's ``INSTALLED_APPS``: a job names its task, and whoever can write a job must not
    make a worker import any other module (``relaymq.task.resolve``)."""
    if apps.get_containing_app_config(path.rpartition(".")[0]) is None:
        raise LookupError(f"unknown Django task {path!r}: not in one of the INSTALLED_APPS")
    found = import_string(path)
    if not isinstance(found, DjangoTask):
        raise LookupError(f"unknown Django task {path!r}: not a django.tasks task")
    return found


class RelayMQBackend(BaseTaskBackend):
    """A ``django.tasks`` backend on any relaymq backend (``OPTIONS["URL"]``)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.url: str = self.options.get("URL", relaymq.Settings.from_env().backend)
        self.database: str = self.options.get("DATABASE", "default")
        """The Django database whose ``atomic`` blocks enqueues join."""
        self._loop = _Loop()
        self.app = default_app().on(self.url, outbox=self.options.get("OUTBOX"))
        """The default app (whose task ``run`` runs each Django task) on ``URL``."""

    def enqueue(self, task: DjangoTask, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        connection = connections[self.database]
        if connection.in_atomic_block:  # with the view's data, or not at all
            connection.ensure_connection()
            return self._enqueue_in(task, list(args), dict(kwargs), connection.connection)
        return self._loop.run(self._enqueue(task, list(args), dict(kwargs)))

    async def aenqueue(self, task: DjangoTask, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        return await asyncio.wrap_future(
            self._loop.submit(self._enqueue(task, list(args), dict(kwargs)))
        )

    def get_result(self, result_id: str) -> TaskResult:
        return self._loop.run(self._get_result(result_id))

    async def aget_result(self, result_id: str) -> TaskResult:
        return await asyncio.wrap_future(self._loop.submit(self._get_result(result_id)))

    def close(self) -> None:
        """Close the relaymq backend and the thread that holds it."""
        if self.app.connected:
            self._loop.run(self.app.close())
        self._loop.stop()

    # -- on the backend's own event loop ----------------------------------------------------

    async def _queue(self, name: str) -> relaymq.Queue:
        await self.app.connect()
        return relaymq.Queue(name, self.app)

    async def _enqueue(
        self, task: DjangoTask, args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult:
        args, kwargs = normalize_json(args), normalize_json(kwargs)
        queue = await self._queue(task.queue_name)
        handle = await queue.add(_runner(task).call(task.module_path, args, kwargs))
        job = await handle.job()
        return self._to_result(task, job, args, kwargs)

    def _enqueue_in(
        self, task: DjangoTask, args: list[Any], kwargs: dict[str, Any], connection: Any
    ) -> TaskResult:
        """In the open transaction of Django's DB-API ``connection``, on the calling thread;
        the job cannot be read back before the commit, so the result is made from the call."""
        args, kwargs = normalize_json(args), normalize_json(kwargs)
        call = _runner(task).with_options(connection=connection)
        handle = self.app.enqueue_sync(call.call(task.module_path, args, kwargs))
        result = _result(
            task,
            f"{task.queue_name}/{handle.id}",
            STATUS[JobState.WAITING],
            args,
            kwargs,
            self.alias,
        )
        object.__setattr__(result, "enqueued_at", datetime.now(UTC))
        return result

    async def _get_result(self, result_id: str) -> TaskResult:
        queue, _, job_id = result_id.partition("/")
        try:
            job = await (await self._queue(queue)).get_job(job_id)
        except relaymq.ConfigError:
            job = None  # not an id this backend made
        if job is None or job.task != RUNNER:
            raise TaskResultDoesNotExist(result_id)
        payload = DEFAULT_SERIALIZER.loads(job.payload)
        path, args, kwargs = payload["args"][:3]
        return self._to_result(project_task(path), job, args, kwargs)

    def _to_result(
        self, task: DjangoTask, job: Job, args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult:
        result = _result(task, f"{job.queue}/{job.id}", STATUS[job.state], args, kwargs, self.alias)
        at = _when
        object.__setattr__(result, "enqueued_at", at(job.created_at))
        object.__setattr__(result, "started_at", at(job.claimed_at))
        object.__setattr__(result, "last_attempted_at", at(job.claimed_at))
        object.__setattr__(result, "finished_at", at(job.finished_at))
        object.__setattr__(result, "worker_ids", [job.worker_id or "relaymq"] * job.attempts)
        if job.state is JobState.COMPLETED:
            object.__setattr__(result, "_return_value", job.result_value())
        elif job.error:
            result.errors.append(
                TaskError(exception_class_path=_exception_path(job.error), traceback=job.error)
            )
        return result


def _runner(task: DjangoTask) -> Any:
    """The relaymq task that runs ``task``, with its queue, priority and delay."""
    delay = 0.0
    if task.run_after is not None:
        delay = max(0.0, (task.run_after - datetime.now(UTC)).total_seconds())
    return run.with_options(queue=task.queue_name, priority=100 - task.priority, delay=delay)


def _result(
    task: DjangoTask,
    result_id: str,
    status: TaskResultStatus,
    args: list[Any],
    kwargs: dict[str, Any],
    backend: str = "default",
) -> TaskResult:
    return TaskResult(
        task=task,
        id=result_id,
        status=status,
        enqueued_at=None,
        started_at=None,
        finished_at=None,
        last_attempted_at=None,
        args=args,
        kwargs=kwargs,
        backend=backend,
        errors=[],
        worker_ids=[],
    )


def _when(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _exception_path(error: str) -> str:
    """``module.Class`` of the exception a stored traceback ends with (builtins have no
    module in a traceback)."""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    name = lines[-1].split(":", 1)[0].strip() if lines else "Exception"
    return name if "." in name else f"builtins.{name}"


class _Loop:
    """An event loop on a daemon thread: Django's task API is synchronous (and its async one
    runs on any loop), while a relaymq backend belongs to the loop it was connected on."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(
                    target=self._loop.run_forever, name="relaymq-django", daemon=True
                ).start()
            return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.submit(coro).result()

    def stop(self) -> None:
        with self._lock:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._loop = None
