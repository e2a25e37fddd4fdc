"""Schedules: tasks that enqueue themselves on a cron expression (in a time zone) or at a
fixed interval, fired by one elected scheduler among the workers.

    @task(cron="0 9 * * mon-fri", tz="Europe/Berlin")
    async def report() -> None: ...

    relaymq.schedule(cleanup, every=300, args=("tmp",))            # in code, beside the task
    await Schedules(backend).add(define(cleanup, id="c2", cron="*/5 * * * *"))  # at run time

A worker stores the code-defined schedules of its queues when it starts; schedules added at
run time are stored at once. Both then live in the backend, the same for every process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from relaymq.errors import ArgumentValidationError, ConfigError
from relaymq.schedules.admin import Schedules, ScheduleState
from relaymq.schedules.scheduler import Scheduler
from relaymq.schedules.spec import Schedule

if TYPE_CHECKING:
    from relaymq.task import Task

DEFINED: dict[str, Schedule] = {}
"""Schedules defined in code in this process (``schedule``, ``@task(cron=...)``), by id."""


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
) -> Schedule:
    """A schedule of ``task`` (a ``Task`` or its name, imported from its module), checked
    through: an unknown task, arguments that do not fit its signature, an invalid cron
    expression or an unknown time zone raise here, and nothing is stored. The job's options
    (queue, priority, retries, ttl, timeout) are the task's; ``queue`` overrides its queue.
    ``id`` defaults to the task's name."""
    from relaymq.task import Task, import_task  # it imports this package for @task(cron=...)

    t = import_task(task) if isinstance(task, str) else task
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
        id=id or t.name, task=t.name, queue=queue or o.queue, cron=cron, every=every, tz=tz,
        args=tuple(args), kwargs=kwargs, missed=missed, max_missed=max_missed, grace=grace,
        anchor=anchor, priority=o.priority, retries=o.retries, ttl=o.ttl, timeout=o.timeout,
    )  # fmt: skip


def schedule(task: Task[Any, Any] | str, **how: Any) -> Schedule:
    """``define`` a schedule in code: every worker serving its queue stores it when it
    starts (an unchanged one keeps its state; a changed one replaces it)."""
    s = define(task, **how)
    DEFINED[s.id] = s
    return s


__all__ = ["DEFINED", "Schedule", "ScheduleState", "Scheduler", "Schedules", "define", "schedule"]
