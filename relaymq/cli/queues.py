"""``relaymq queue list|info|limits|retention|pause|resume|drain|clean|obliterate``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from relaymq import retention as _retention
from relaymq.app import App
from relaymq.cli.common import (
    Duration,
    backend_option,
    json_option,
    older_than_option,
    run,
    state_option,
    with_app,
    with_queue,
    yes_option,
)
from relaymq.cli.output import ask, console, counts_json, counts_table, done, emit_json
from relaymq.job import TERMINAL, JobState
from relaymq.keyusage import KeyUsage, key_usage
from relaymq.queue import Queue
from relaymq.records.limits import Limits
from relaymq.records.retention import Retention

F = TypeVar("F", bound=Callable[..., Any])


@click.group("queue")
def queue_group() -> None:
    """See and administer queues."""


@queue_group.command("list")
@backend_option
@json_option
def queue_list(backend: str, as_json: bool) -> None:
    """Every queue that holds jobs or is paused, with its jobs per state."""

    async def collect(app: App) -> dict[str, tuple[dict[JobState, int], bool]]:
        out = {}
        for name in await app.ops.list_queues():
            q = Queue(name, app)
            out[name] = (await q.counts(), await q.is_paused())
        return out

    found = run(lambda: with_app(backend, collect))
    if as_json:
        emit_json([{"queue": name, **counts_json(c, p)} for name, (c, p) in found.items()])
    else:
        console().print(counts_table(found))


@queue_group.command("info")
@click.argument("queue")
@backend_option
@json_option
def queue_info(queue: str, backend: str, as_json: bool) -> None:
    """QUEUE's jobs per state, whether it is paused, and the workers serving it."""

    async def collect(q: Queue) -> dict[str, Any]:
        counts, paused = await q.counts(), await q.is_paused()
        workers = [w for w in await q.ops.list_workers() if q.name in w.queues]
        return {
            "queue": q.name,
            **counts_json(counts, paused),
            "limits": limits_json(await q.limits()),
            "retention": _retention.to_dict(await q.retention()),
            "workers": [
                {"id": w.id, "host": w.host, "pid": w.pid, "concurrency": w.concurrency}
                for w in workers
            ],
        }

    info = with_queue(backend, queue, collect)
    if as_json:
        emit_json(info)
        return
    out = console()
    out.print(f"queue [bold]{queue}[/bold]" + (" [red]PAUSED[/red]" if info["paused"] else ""))
    out.print("  " + "  ".join(f"{s.value}={info[s.value]}" for s in JobState))
    names = ", ".join(f"{w['id']} ({w['concurrency']})" for w in info["workers"]) or "none"
    out.print(f"  workers: {names}")
    out.print(f"  limits: {Limits(**info['limits']).describe() if info['limits'] else 'none'}")
    out.print(f"  retention: {_retention.describe(Retention(**info['retention']))}")


def limits_json(limits: Limits | None) -> dict[str, Any] | None:
    if limits is None:
        return None
    return {
        "max_active": limits.max_active,
        "rate": limits.rate,
        "per": limits.per,
        "key_rate": limits.key_rate,
        "key_per": limits.key_per,
        "key_max_active": limits.key_max_active,
        "fair": limits.fair,
        "weights": dict(limits.weights),
    }


def _weights(given: tuple[str, ...]) -> dict[str, int]:
    """``--weight KEY=N`` options as a mapping (a usage error for one that is not)."""
    weights: dict[str, int] = {}
    for text in given:
        key, sep, n = text.rpartition("=")
        if not sep or not key or not n.strip().isdigit():
            raise click.UsageError(f"--weight {text!r}: expected KEY=N, e.g. enterprise=3")
        weights[key] = int(n)
    return weights


@queue_group.command("limits")
@click.argument("queue", required=False)
@click.option(
    "--max-active",
    type=click.IntRange(1, 1_000_000_000),
    envvar="RELAYMQ_MAX_ACTIVE",
    show_envvar=True,
    help="At most this many of QUEUE's jobs active at once, over every worker.",
)
@click.option(
    "--rate",
    envvar="RELAYMQ_RATE",
    show_envvar=True,
    help="At most N starts per period: 100/60 (seconds), 10/m, 5/s, 1000/h.",
)
@click.option(
    "--key-rate",
    envvar="RELAYMQ_KEY_RATE",
    show_envvar=True,
    help="At most N starts per period for each limit key (a job's limit_key), e.g. 10/m.",
)
@click.option(
    "--key-max-active",
    type=click.IntRange(1, 1_000_000_000),
    envvar="RELAYMQ_KEY_MAX_ACTIVE",
    show_envvar=True,
    help="At most this many active jobs of each limit key at once, over every worker.",
)
@click.option(
    "--fair",
    is_flag=True,
    default=None,
    envvar="RELAYMQ_FAIR",
    show_envvar=True,
    help="Rotate claims over the limit keys with waiting jobs (round robin).",
)
@click.option(
    "--weight",
    "weights",
    multiple=True,
    metavar="KEY=N",
    envvar="RELAYMQ_WEIGHTS",
    show_envvar=True,
    help="With --fair: KEY starts up to N jobs in each round (repeat for more keys; the "
    "variable holds them separated by spaces).",
)
@click.option(
    "--clear",
    is_flag=True,
    envvar="RELAYMQ_CLEAR_LIMITS",
    show_envvar=True,
    help="Remove QUEUE's limits.",
)
@backend_option
@json_option
def queue_limits(
    queue: str | None,
    max_active: int | None,
    rate: str | None,
    key_rate: str | None,
    key_max_active: int | None,
    fair: bool | None,
    weights: tuple[str, ...],
    clear: bool,
    backend: str,
    as_json: bool,
) -> None:
    """Show or set QUEUE's limits (every queue's, without QUEUE).

    --max-active, --rate, --key-rate, --key-max-active, --fair and --weight replace what is
    stored (one left out is unset);
    workers obey from their next claim. Limits defined in code (relaymq.limit) are stored
    again by each worker of the queue when it starts."""
    given = (max_active, rate, key_rate, key_max_active, fair, weights or None)
    changing = clear or any(v is not None for v in given)
    weighted = _weights(weights)
    if queue is None:
        if changing:
            raise click.UsageError("name the QUEUE whose limits to set")
        found = run(lambda: with_app(backend, lambda app: app.ops.list_limits()))
        if as_json:
            emit_json([{"queue": q, **(limits_json(lim) or {})} for q, lim in found.items()])
        else:
            for q, lim in found.items():
                click.echo(f"{q}: {lim.describe()}")
            if not found:
                click.echo("no queue has limits")
        return
    if clear and any(v is not None for v in given):
        raise click.UsageError("--clear removes the limits: give it alone")

    async def go(app: App) -> tuple[Limits | None, KeyUsage | None]:
        q = Queue(queue, app)
        if not changing:
            limits = await q.limits()
            return limits, await key_usage(app.ops, queue, limits)
        stored = await q.set_limits(
            max_active=max_active,
            rate=rate,
            key_rate=key_rate,
            key_max_active=key_max_active,
            fair=bool(fair),
            weights=weighted,
        )
        return stored, None

    stored, usage = run(lambda: with_app(backend, go, create=changing))
    if as_json:
        shown = {"queue": queue, "limits": limits_json(stored)}
        emit_json(shown | ({"keys": usage.as_json()} if usage is not None else {}))
        return
    click.echo(f"queue {queue!r}: {stored.describe() if stored else 'no limits'}")
    if usage is not None and stored is not None:
        busiest = ", ".join(f"{k} {n}" for k, n in usage.active) or "none"
        click.echo(f"  active jobs of the busiest keys: {busiest}")
        click.echo(f"  keys at their cap: {', '.join(usage.at_cap) or 'none'}")
        click.echo(f"  waiting jobs held back: {usage.held_back}")


def _window(name: str, default: str, what: str) -> Callable[[F], F]:
    return click.option(
        f"--{name}",
        type=Duration(),
        envvar=f"RELAYMQ_RETENTION_{name.upper()}",
        show_envvar=True,
        help=f"Keep {what} this long: seconds, or 30m, 24h, 7d; 0 keeps them for ever "
        f"(default {default}).",
    )


@queue_group.command("retention")
@click.argument("queue")
@_window("completed", "24h", "completed jobs")
@_window("cancelled", "24h", "cancelled jobs")
@_window("failed", "7d", "dead-lettered (failed and expired) jobs")
@click.option(
    "--max-finished",
    type=click.IntRange(1, 1_000_000_000),
    envvar="RELAYMQ_RETENTION_MAX_FINISHED",
    show_envvar=True,
    help="Keep at most about N jobs per finished state, the newest.",
)
@backend_option
@json_option
def queue_retention(
    queue: str,
    completed: float | None,
    cancelled: float | None,
    failed: float | None,
    max_finished: int | None,
    backend: str,
    as_json: bool,
) -> None:
    """Show or set how long QUEUE's finished jobs are kept.

    Given any option, stores QUEUE's retention for every worker (a window left out takes
    its default); the elected maintenance deletes older finished jobs from then on."""
    windows = (completed, cancelled, failed, max_finished)
    changing = any(w is not None for w in windows)

    async def go(app: App) -> Retention:
        q = Queue(queue, app)
        if not changing:
            return await q.retention()
        return await q.set_retention(
            completed=completed, cancelled=cancelled, failed=failed, max_finished=max_finished
        )

    stored = run(lambda: with_app(backend, go, create=changing))
    if as_json:
        emit_json({"queue": queue, "retention": _retention.to_dict(stored)})
    else:
        click.echo(f"queue {queue!r}: {_retention.describe(stored)}")


@queue_group.command("pause")
@click.argument("queue")
@backend_option
@json_option
def queue_pause(queue: str, backend: str, as_json: bool) -> None:
    """Stop workers everywhere from claiming QUEUE's jobs (enqueues still succeed)."""
    with_queue(backend, queue, lambda q: q.pause())
    done(as_json, f"queue {queue!r} paused", queue=queue, paused=True)


@queue_group.command("resume")
@click.argument("queue")
@backend_option
@json_option
def queue_resume(queue: str, backend: str, as_json: bool) -> None:
    """Let workers claim QUEUE's jobs again."""
    with_queue(backend, queue, lambda q: q.resume())
    done(as_json, f"queue {queue!r} resumed", queue=queue, paused=False)


@queue_group.command("drain")
@click.argument("queue")
@backend_option
@yes_option
@json_option
def queue_drain(queue: str, backend: str, yes: bool, as_json: bool) -> None:
    """Delete every waiting and delayed job of QUEUE (asks first unless --yes)."""

    async def go(q: Queue) -> int:
        await ask(f"Delete every waiting and delayed job of queue {queue!r}?", yes)
        return await q.drain()

    n = with_queue(backend, queue, go)
    done(as_json, f"deleted {n} waiting and delayed jobs of {queue!r}", queue=queue, removed=n)


@queue_group.command("clean")
@click.argument("queue")
@state_option(
    tuple(s for s in JobState if s in TERMINAL),
    "Which finished jobs to delete.",
    default=JobState.COMPLETED.value,
)
@older_than_option
@backend_option
@yes_option
@json_option
def queue_clean(
    queue: str, state: str, older_than: float | None, backend: str, yes: bool, as_json: bool
) -> None:
    """Delete QUEUE's jobs in a finished state (asks first unless --yes)."""
    age = older_than or 0.0

    async def go(q: Queue) -> int:
        since = f" that finished more than {age:g}s ago" if age else ""
        await ask(f"Delete the {state} jobs of queue {queue!r}{since}?", yes)
        return await q.clean(JobState(state), age)

    n = with_queue(backend, queue, go)
    done(as_json, f"deleted {n} {state} jobs of {queue!r}", queue=queue, state=state, removed=n)


@queue_group.command("obliterate")
@click.argument("queue")
@backend_option
@yes_option
@json_option
def queue_obliterate(queue: str, backend: str, yes: bool, as_json: bool) -> None:
    """Delete QUEUE and every job in it, in every state (asks first unless --yes)."""

    async def go(q: Queue) -> None:
        await ask(f"Delete queue {queue!r} and every job in it, running ones too?", yes)
        await q.obliterate()

    with_queue(backend, queue, go)
    done(as_json, f"queue {queue!r} obliterated", queue=queue, obliterated=True)
