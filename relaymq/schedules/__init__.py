"""Schedules: tasks that enqueue themselves on a cron expression (in a time zone) or at a
fixed interval, fired by one elected scheduler among the workers.

    @task(cron="0 9 * * mon-fri", tz="Europe/Berlin")
    async def report() -> None: ...

    relaymq.schedule(cleanup, every=300, args=("tmp",))            # in code, beside the task
    await Schedules(app.ops).add(define(cleanup, id="c2", cron="*/5 * * * *"))  # at run time

A worker stores the code-defined schedules of its queues (its app's: ``App.schedule``) when it
starts; schedules added at run time are stored at once. Both then live in the backend, the same
for every process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relaymq.errors import ArgumentValidationError, ConfigError
from relaymq.schedules.admin import Schedules, ScheduleState
from relaymq.schedules.scheduler import Scheduler
from relaymq.schedules.spec import Schedule
from relaymq.task import Task, import_task


def define(
    task: Task[Any, Any] | str,
    *,
    id: str | None = None,
    cron: str | None = None,
    every: float | None = None,
    tz: str = "UTC",
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    queue: str | None = None,
    missed: str = "skip",
    max_missed: int = 10,
    grace: float = 60.0,
    anchor: float = 0.0,
    registry: Mapping[str, Task[Any, Any]] | None = None,
) -> Schedule:
    """A schedule of ``task`` (a ``Task`` or its name, imported from its module), checked
    through: an unknown task, arguments that do not fit its signature, an invalid cron
    expression or an unknown time zone raise here, and nothing is stored. The job's options
    (queue, priority, retries, ttl, timeout) are the task's; ``queue`` overrides its queue.
    ``id`` defaults to the task's name. A name is looked up in ``registry`` (an app's
    ``tasks``) once its module is imported."""
    t = import_task(registry or {}, task) if isinstance(task, str) else task
    if not isinstance(t, Task):
        raise ConfigError(f"a schedule's task is a Task or its name, got {type(t).__name__}")
    kwargs = dict(kwargs or {})
    try:
        t.check_arguments(tuple(args), kwargs)
    except ArgumentValidationError as e:  # a definition error, as a bad cron is (CLI: exit 2)
        raise ConfigError(f"schedule {id or t.name!r}: {e}") from e
    if t.models is not None:  # pydantic arguments are validated now and stored as JSON
        args, kwargs = t.models.dump_args(tuple(args), kwargs)
    o = t.options
    return Schedule(
        id=id or t.name,
        task=t.name,
        queue=queue or o.queue,
        cron=cron,
        every=every,
        tz=tz,
        args=tuple(args),
        kwargs=kwargs,
        missed=missed,
        max_missed=max_missed,
        grace=grace,
        anchor=anchor,
        priority=o.priority,
        retries=o.retries,
        ttl=o.ttl,
        timeout=o.timeout,
    )


__all__ = ["Schedule", "ScheduleState", "Scheduler", "Schedules", "define"]
