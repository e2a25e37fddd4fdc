"""How commands answer: rich tables for people, one JSON document for scripts; confirmations."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterable
from typing import Any

import click
import orjson
from rich.console import Console
from rich.table import Table

from relaymq.backends.corrupt import CORRUPT
from relaymq.job import Job, JobState, error_line
from relaymq.records.store import WorkerInfo
from relaymq.serializers import DEFAULT_SERIALIZER

PIPE_WIDTH = 240
"""Columns of a table written to a pipe or a file (no terminal to measure): wide enough that
ids and queue names are never cut or wrapped."""


def console() -> Console:
    """A console on stdout: a terminal's own width, or ``PIPE_WIDTH`` for a pipe."""
    return Console() if sys.stdout.isatty() else Console(width=PIPE_WIDTH)


def emit_json(value: Any) -> None:
    click.echo(orjson.dumps(value, default=str).decode())


def decoded(raw: bytes | None) -> Any:
    """A stored payload, result or progress decoded for display; undecodable bytes are shown
    as text rather than failing the command."""
    if raw is None:
        return None
    try:
        return DEFAULT_SERIALIZER.loads(raw)
    except Exception:
        return raw.decode("utf-8", "replace")


def job_dict(job: Job, *, full: bool = False) -> dict[str, Any]:
    """A job as JSON: the fields an operator reads; ``full`` adds arguments and result."""
    out: dict[str, Any] = {
        "queue": job.queue,
        "id": job.id,
        "task": job.task,
        "state": job.state.value,
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "created_at": job.created_at,
        "run_at": job.run_at,
        "finished_at": job.finished_at,
        "worker_id": job.worker_id,
        "error": job.error,
    }
    if CORRUPT in job.extra:  # listed as far as it could be read: say what is wrong
        out[CORRUPT] = job.extra[CORRUPT]
    if full:
        out |= {
            "payload": decoded(job.payload),
            "progress": decoded(job.progress),
            "result": decoded(job.result),
            "token": job.token,
            "claimed_at": job.claimed_at,
            "heartbeat_at": job.heartbeat_at,
            "stalls": job.stalls,
            "ttl": job.ttl,
            "timeout": job.timeout,
            "cancel_requested": job.cancel_requested,
            "extra": job.extra,
        }
    return out


def when(at: float | None) -> str:
    """An epoch time as local date and time, or '' when absent."""
    return "" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def age(at: float | None, now: float | None = None) -> str:
    """How long ago ``at`` was, short (``42s``, ``3m``, ``5h``, ``2d``)."""
    if at is None:
        return ""
    seconds = max(0.0, (now if now is not None else time.time()) - at)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def relative(at: float, now: float | None = None) -> str:
    """``at`` from now, short: ``5m ago``, ``in 58m`` or ``now``."""
    now = time.time() if now is None else now
    if abs(at - now) < 0.5:
        return "now"
    return f"{age(at, now)} ago" if at < now else f"in {age(now, at)}"


def jobs_table(jobs: Iterable[Job], state: JobState | None = None) -> Table:
    """A listing; a delayed one says when each job runs, an active one when each started and
    its last progress."""
    columns = {JobState.DELAYED: ["runs"], JobState.ACTIVE: ["started", "progress"]}
    shown = columns.get(state, ["finished"]) if state is not None else ["finished"]

    def extra(j: Job) -> list[str]:
        if state is JobState.DELAYED:
            return [at_and_relative(j.run_at)]
        if state is JobState.ACTIVE:
            return [at_and_relative(j.claimed_at), progress_text(j.progress)]
        return [when(j.finished_at)]

    table = Table("id", "task", "state", "attempts", "created", *shown, "error")
    for j in jobs:
        error = error_line(j.error)[:60]
        if CORRUPT in j.extra:  # a damaged record: its values are stand-ins, say why
            error = f"corrupt record: {j.extra[CORRUPT]}"[:60]
        table.add_row(
            j.id,
            j.task,
            j.state.value,
            f"{j.attempts}/{j.max_attempts}",
            when(j.created_at),
            *extra(j),
            error,
        )
    return table


def at_and_relative(at: float | None) -> str:
    """``2026-12-04 19:23:44 (in 58m)``, or '' when absent."""
    return "" if at is None else f"{when(at)} ({relative(at)})"


def progress_text(raw: bytes | None) -> str:
    """A job's progress as compact JSON (cut at 40 characters), '' without one."""
    if raw is None:
        return ""
    text = orjson.dumps(decoded(raw), default=str).decode()
    return text if len(text) <= 40 else text[:39] + "…"


def job_table(job: Job) -> Table:
    table = Table("field", "value", show_header=False)
    for name, value in job_dict(job, full=True).items():
        if name.endswith("_at") and isinstance(value, float):
            value = at_and_relative(value)
        table.add_row(name, "" if value is None else str(value))
    return table


def counts_table(rows: dict[str, tuple[dict[JobState, int], bool]]) -> Table:
    table = Table("queue", "paused", *(s.value for s in JobState))
    for name, (counts, paused) in rows.items():
        table.add_row(name, "PAUSED" if paused else "", *(str(counts[s]) for s in JobState))
    return table


def counts_json(counts: dict[JobState, int], paused: bool) -> dict[str, Any]:
    return {**{s.value: n for s, n in counts.items()}, "paused": paused}


def worker_dict(info: WorkerInfo, running: int, now: float) -> dict[str, Any]:
    return {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "queues": list(info.queues),
        "concurrency": info.concurrency,
        "running": running,
        "started_at": info.started_at,
        "seen_at": info.seen_at,
        "heartbeat_age": max(0.0, now - info.seen_at),
        "refused": dict(info.refused),
    }


def confirm(question: str, yes: bool) -> None:
    """Ask before a destructive action unless ``--yes``; a refusal (or no terminal to ask
    on) ends the command with exit code 1 and changes nothing."""
    if yes:
        return
    try:
        agreed = click.confirm(question, default=False, err=True)
    except click.exceptions.Abort:
        agreed = False
    if not agreed:
        raise click.ClickException("not confirmed: nothing changed (--yes skips the question)")


async def ask(question: str, yes: bool) -> None:
    """``confirm`` from inside a command's coroutine (the question waits in a thread, so the
    backend's connections stay serviced)."""
    if not yes:
        await asyncio.to_thread(confirm, question, yes)


def done(as_json: bool, text: str, **fields: Any) -> None:
    """The answer of an action: ``text`` for people, ``fields`` as JSON for scripts."""
    if as_json:
        emit_json(fields)
    else:
        click.echo(text)
