"""How commands answer: rich tables for people, one JSON document for scripts; confirmations."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable
from typing import Any

import click
import orjson
from rich.console import Console
from rich.table import Table

from relaymq.backends.corrupt import CORRUPT
from relaymq.job import Job, JobState, error_line
from relaymq.overview import decoded, job_dict, relative, when
from relaymq.records.store import OUTCOME_WORDS

PIPE_WIDTH = 240
"""Columns of a table written to a pipe or a file (no terminal to measure): wide enough that
ids and queue names are never cut or wrapped."""


def console() -> Console:
    """A console on stdout: a terminal's own width, or ``PIPE_WIDTH`` for a pipe."""
    return Console() if sys.stdout.isatty() else Console(width=PIPE_WIDTH)


def emit_json(value: Any) -> None:
    click.echo(orjson.dumps(value, default=str).decode())


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

    jobs = list(jobs)
    sequences = any(j.sequence is not None for j in jobs)  # a column only when one has one
    table = Table(
        "id", "task", "state", *(["sequence"] if sequences else []), "attempts", "created",
        *shown, "error",
    )  # fmt: skip
    for j in jobs:
        error = error_line(j.error)[:60]
        if CORRUPT in j.extra:  # a damaged record: its values are stand-ins, say why
            error = f"corrupt record: {j.extra[CORRUPT]}"[:60]
        table.add_row(
            j.id,
            j.task,
            j.state.value,
            *([j.sequence or ""] if sequences else []),
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


def job_table(job: Job, held_by: Job | None = None) -> Table:
    """Every field of ``job``; with ``held_by``, the job its sequence waits on."""
    table = Table("field", "value", show_header=False)
    for name, value in job_dict(job, full=True).items():
        if name == "attempt_history":  # a table of its own: attempts_table
            continue
        if name.endswith("_at") and isinstance(value, float):
            value = at_and_relative(value)
        table.add_row(name, "" if value is None else str(value))
    if held_by is not None:
        table.add_row("sequence_waits_on", f"{held_by.id} ({held_by.state.value})")
    return table


def attempts_table(job: Job) -> Table:
    """The job's attempt history, oldest first: outcome, worker, when it started, how long
    its handler ran, and the last line of its error (``--json`` has the whole traceback)."""
    table = Table("attempt", "outcome", "worker", "started", "ran for", "error")
    table.title = f"last {len(job.attempt_history)} attempts"
    for a in job.attempt_history:
        table.add_row(
            str(a.attempt),
            OUTCOME_WORDS[a.outcome],
            a.worker or "",
            when(a.started_at),
            "" if a.ran_for is None else f"{a.ran_for:.3f}s",
            error_line(a.error)[:80],
        )
    return table


def counts_table(rows: dict[str, tuple[dict[JobState, int], bool]]) -> Table:
    table = Table("queue", "paused", *(s.value for s in JobState))
    for name, (counts, paused) in rows.items():
        table.add_row(name, "PAUSED" if paused else "", *(str(counts[s]) for s in JobState))
    return table


def counts_json(counts: dict[JobState, int], paused: bool) -> dict[str, Any]:
    return {**{s.value: n for s, n in counts.items()}, "paused": paused}


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
