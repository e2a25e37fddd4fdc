"""``relaymq workers`` and ``relaymq stats [--watch]``."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import click
from rich.live import Live
from rich.table import Table

from relaymq.app import App
from relaymq.cli.common import backend_option, json_option, run, with_app
from relaymq.cli.output import console, counts_json, counts_table, emit_json
from relaymq.job import JobState
from relaymq.overview import age, collect_workers
from relaymq.queue import Queue


@click.command("workers")
@backend_option
@json_option
def workers(backend: str, as_json: bool) -> None:
    """The workers: host, pid, queues, concurrency, the jobs running now, attempts processed
    and failed since start, last heartbeat, uptime; workers that went silent lately (no
    heartbeat, never unregistered) marked SILENT; and the queues a worker does not claim from
    because the backend refuses them as configured."""
    found = run(lambda: with_app(backend, lambda app: collect_workers(app.ops)))
    if as_json:
        emit_json(found)
        return
    refusals = any(w["refused"] for w in found)
    table = Table(
        "worker",
        "host",
        "pid",
        "queues",
        "concurrency",
        "running",
        "processed",
        "failed",
        "heartbeat",
        "up",
        *(["refused"] if refusals else []),
    )
    now = time.time()
    for w in found:
        refused = "\n".join(f"{q}: {e}" for q, e in sorted(w["refused"].items()))
        heartbeat = f"{w['heartbeat_age']:.0f}s ago" + (" SILENT" if w["silent"] else "")
        table.add_row(
            w["id"],
            w["host"],
            str(w["pid"]),
            ", ".join(w["queues"]),
            str(w["concurrency"]),
            "-" if w["silent"] else str(w["running"]),
            str(w["processed"]),
            str(w["failed"]),
            heartbeat,
            age(w["started_at"], now),
            *([refused] if refusals else []),
        )
    console().print(table)


async def collect_counts(app: App) -> dict[str, tuple[dict[JobState, int], bool]]:
    out = {}
    for name in await app.ops.list_queues():
        queue = Queue(name, app)
        out[name] = (await queue.counts(), await queue.is_paused())
    return out


@click.command("stats")
@click.option(
    "--watch",
    "-w",
    is_flag=True,
    envvar="RELAYMQ_WATCH",
    show_envvar=True,
    help="Keep the table up to date until Ctrl-C.",
)
@click.option(
    "--interval",
    type=click.FloatRange(0.1, 86400),
    default=2.0,
    show_default=True,
    envvar="RELAYMQ_STATS_INTERVAL",
    show_envvar=True,
    help="Seconds between two refreshes with --watch.",
)
@click.option(
    "--count",
    type=click.IntRange(min=0),
    default=0,
    envvar="RELAYMQ_STATS_COUNT",
    show_envvar=True,
    help="With --watch, stop after this many refreshes (0: never).",
)
@backend_option
@json_option
def stats(watch: bool, interval: float, count: int, backend: str, as_json: bool) -> None:
    """Jobs per state in every queue, and whether it is paused; --watch keeps it live (with
    --json, one JSON line per refresh)."""
    if not watch:
        found = run(lambda: with_app(backend, collect_counts))
        if as_json:
            emit_json({q: counts_json(c, p) for q, (c, p) in found.items()})
        else:
            console().print(counts_table(found))
        return
    try:
        run(lambda: with_app(backend, lambda app: _watch(app, interval, count, as_json)))
    except KeyboardInterrupt:
        pass  # Ctrl-C ends a watch: that is how it is meant to stop


async def _watch(app: App, interval: float, count: int, as_json: bool) -> None:
    refreshes = 0
    lines = not as_json and not sys.stdout.isatty()  # a pipe or a file: a line per interval
    live_table = not (as_json or lines)
    with Live(auto_refresh=False, console=console()) if live_table else _NoLive() as live:
        while True:
            found = await collect_counts(app)
            if as_json:
                queues = {q: counts_json(c, p) for q, (c, p) in found.items()}
                emit_json({"at": time.time(), "queues": queues})
            elif lines:
                click.echo(counts_line(found))
            else:
                table = counts_table(found)
                table.caption = f"{time.strftime('%H:%M:%S')}, every {interval:g}s (Ctrl-C ends)"
                live.update(table, refresh=True)
            refreshes += 1
            if count and refreshes >= count:
                return
            await asyncio.sleep(interval)  # the refresh rate an operator asked for


def counts_line(found: dict[str, tuple[dict[JobState, int], bool]]) -> str:
    """One refresh in one line: ``12:00:00 emails: waiting=3 active=1; reports: (empty)``."""
    parts = []
    for name, (counts, paused) in found.items():
        held = " ".join(f"{s.value}={n}" for s, n in counts.items() if n) or "(empty)"
        parts.append(f"{name}: {held}" + (" PAUSED" if paused else ""))
    return f"{time.strftime('%H:%M:%S')} " + ("; ".join(parts) or "no queues")


class _NoLive:
    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, *args: Any, **kwargs: Any) -> None:
        return None
