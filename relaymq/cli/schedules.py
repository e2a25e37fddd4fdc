"""``relaymq schedule list|add|remove|pause|resume|run-now``."""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

import click
import orjson
from rich.table import Table

from relaymq.app import App
from relaymq.cli.common import (
    ConfigProblem,
    Duration,
    backend_option,
    json_option,
    run,
    with_app,
    yes_option,
)
from relaymq.cli.output import ask, console, done, emit_json
from relaymq.errors import ConfigError, RelayError
from relaymq.schedules import Schedules, ScheduleState, define
from relaymq.schedules.spec import MISSED_POLICIES

id_argument = click.argument("schedule_id", metavar="ID")


def on_schedules(url: str, fn: Any, *, create: bool = False) -> Any:
    """Run ``fn(Schedules)`` on the backend at ``url`` (``create``: a missing SQLite file
    is made, as a producer's enqueue makes it)."""

    async def go(app: App) -> Any:
        return await fn(Schedules(app.ops))

    return run(lambda: with_app(url, go, create=create))


@click.group("schedule")
def schedule_group() -> None:
    """See and change the schedules workers fire (cron or interval)."""


@schedule_group.command("list")
@backend_option
@json_option
def schedule_list(backend: str, as_json: bool) -> None:
    """Every stored schedule: what it runs, when, and when next."""
    found: list[ScheduleState] = on_schedules(backend, lambda s: s.list())
    if as_json:
        emit_json([_json(s) for s in found])
        return
    table = Table("id", "task", "queue", "when", "next", "missed", "arguments")
    for s in found:
        spec = s.schedule
        if spec is None:
            table.add_row(s.id, f"[red]{s.error}[/red]", "", "", "", "", "")
            continue
        next_at = "[yellow]paused[/yellow]" if s.paused else _when(s.next_at)
        args = orjson.dumps({"args": list(spec.args), "kwargs": dict(spec.kwargs)}).decode()
        table.add_row(s.id, spec.task, spec.queue, spec.describe(), next_at, spec.missed, args)
    console().print(table if found else "no schedules")


@schedule_group.command("add")
@id_argument
@click.option(
    "--task",
    "-t",
    "task_name",
    required=True,
    envvar="RELAYMQ_TASK",
    show_envvar=True,
    help="The task, as module:function (its module imported from here).",
)
@click.option(
    "--cron",
    envvar="RELAYMQ_SCHEDULE_CRON",
    show_envvar=True,
    help="A cron expression: minute hour day month weekday.",
)
@click.option(
    "--tz",
    default="UTC",
    show_default=True,
    envvar="RELAYMQ_SCHEDULE_TZ",
    show_envvar=True,
    help="The cron's time zone (IANA).",
)
@click.option(
    "--every",
    type=Duration(),
    envvar="RELAYMQ_SCHEDULE_EVERY",
    show_envvar=True,
    help="An interval instead: 90, 30s, 15m, 2h, 1d.",
)
@click.option(
    "--args",
    "args_json",
    default="[]",
    envvar="RELAYMQ_SCHEDULE_ARGS",
    show_envvar=True,
    help="Positional arguments, a JSON list.",
)
@click.option(
    "--kwargs",
    "kwargs_json",
    default="{}",
    envvar="RELAYMQ_SCHEDULE_KWARGS",
    show_envvar=True,
    help="Keyword arguments, a JSON object.",
)
@click.option(
    "--queue",
    "-q",
    envvar="RELAYMQ_SCHEDULE_QUEUE",
    show_envvar=True,
    help="The queue (default: the task's).",
)
@click.option(
    "--missed",
    type=click.Choice(MISSED_POLICIES),
    default="skip",
    show_default=True,
    envvar="RELAYMQ_SCHEDULE_MISSED",
    show_envvar=True,
    help="Ticks missed while no worker ran: fire none, the latest once, or each.",
)
@click.option(
    "--max-missed",
    type=click.IntRange(1, 100_000),
    default=10,
    show_default=True,
    envvar="RELAYMQ_SCHEDULE_MAX_MISSED",
    show_envvar=True,
    help="With --missed all: at most this many of the latest missed ticks.",
)
@backend_option
@json_option
def schedule_add(
    schedule_id: str,
    task_name: str,
    cron: str | None,
    tz: str,
    every: float | None,
    args_json: str,
    kwargs_json: str,
    queue: str | None,
    missed: str,
    max_missed: int,
    backend: str,
    as_json: bool,
) -> None:
    """Store schedule ID (replacing the one of that id, whose pause it keeps). The task must
    import and the arguments fit it; the cron, the time zone and the arguments are checked
    before anything is stored."""
    args, kwargs = _json_arg("--args", args_json, list), _json_arg("--kwargs", kwargs_json, dict)
    sys.path.insert(0, os.getcwd())
    try:
        s = define(
            task_name,
            id=schedule_id,
            cron=cron,
            every=every,
            tz=tz,
            args=args,
            kwargs=kwargs,
            queue=queue,
            missed=missed,
            max_missed=max_missed,
        )
    except ConfigError as e:
        raise ConfigProblem(str(e)) from e
    except RelayError as e:  # an unknown task, arguments JSON cannot carry
        raise click.ClickException(str(e)) from e

    async def go(book: Schedules) -> tuple[bool, ScheduleState]:
        return await book.add(s), await book.get(s.id)

    changed, state = on_schedules(backend, go, create=True)
    verb = "stored" if changed else "unchanged:"
    done(
        as_json,
        f"schedule {s.id!r} {verb} {s.describe()}, next {_when(state.next_at)}",
        **_json(state),
        changed=changed,
    )


@schedule_group.command("remove")
@id_argument
@backend_option
@yes_option
@json_option
def schedule_remove(schedule_id: str, backend: str, yes: bool, as_json: bool) -> None:
    """Delete schedule ID (jobs it enqueued stay; asks first unless --yes)."""

    async def go(book: Schedules) -> None:
        await book.get(schedule_id)  # not found: said before asking
        await ask(f"Delete schedule {schedule_id!r}?", yes)
        await book.remove(schedule_id)

    on_schedules(backend, go)
    done(as_json, f"schedule {schedule_id!r} removed", id=schedule_id, removed=True)


@schedule_group.command("pause")
@id_argument
@backend_option
@json_option
def schedule_pause(schedule_id: str, backend: str, as_json: bool) -> None:
    """Stop firing schedule ID; ticks that fall while it is paused never fire."""
    on_schedules(backend, lambda book: book.pause(schedule_id))
    done(as_json, f"schedule {schedule_id!r} paused", id=schedule_id, paused=True)


@schedule_group.command("resume")
@id_argument
@backend_option
@json_option
def schedule_resume(schedule_id: str, backend: str, as_json: bool) -> None:
    """Fire schedule ID again, from its first tick after now."""

    async def go(book: Schedules) -> ScheduleState:
        await book.resume(schedule_id)
        return await book.get(schedule_id)

    state = on_schedules(backend, go)
    done(
        as_json,
        f"schedule {schedule_id!r} resumed, next {_when(state.next_at)}",
        id=schedule_id,
        paused=False,
        next_at=_iso(state.next_at),
    )


@schedule_group.command("run-now")
@id_argument
@backend_option
@json_option
def schedule_run_now(schedule_id: str, backend: str, as_json: bool) -> None:
    """Enqueue schedule ID's job once now; its ticks stay as they are."""

    async def go(book: Schedules) -> tuple[str, str]:
        handle = await book.run_now(schedule_id)
        return handle.queue, handle.id

    queue, job_id = on_schedules(backend, go)
    done(
        as_json,
        f"enqueued job {job_id} in queue {queue!r}",
        id=schedule_id,
        queue=queue,
        job_id=job_id,
    )


def _json_arg(option: str, text: str, kind: type) -> Any:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise ConfigProblem(f"{option} is not JSON: {e}") from e
    if not isinstance(value, kind):
        raise ConfigProblem(f"{option} must be a JSON {'list' if kind is list else 'object'}")
    return value


def _json(s: ScheduleState) -> dict[str, Any]:
    out: dict[str, Any] = {"id": s.id, "paused": s.paused, "next_at": _iso(s.next_at)}
    if s.schedule is None:
        return {**out, "error": s.error}
    spec = s.schedule
    return {
        **out,
        "task": spec.task,
        "queue": spec.queue,
        "cron": spec.cron,
        "tz": spec.tz,
        "every": spec.every,
        "args": list(spec.args),
        "kwargs": dict(spec.kwargs),
        "missed": spec.missed,
        "max_missed": spec.max_missed,
    }


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _when(t: float) -> str:
    """``2026-12-04T09:00:00Z (in 3h 2m)``."""
    left = t - time.time()
    if left < 0:
        return f"{_iso(t)} (due)"
    h, rest = divmod(int(left), 3600)
    m, s = divmod(rest, 60)
    return f"{_iso(t)} (in {f'{h}h {m}m' if h else f'{m}m {s}s' if m else f'{s}s'})"
