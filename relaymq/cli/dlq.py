"""``relaymq dlq list|replay|purge``: the dead-letter queue (failed and expired jobs)."""

from __future__ import annotations

import click

from relaymq.cli.common import (
    backend_option,
    json_option,
    limit_option,
    offset_option,
    older_than_option,
    state_option,
    task_option,
    with_queue,
)
from relaymq.cli.jobs import Pick, bulk_options, run_bulk
from relaymq.cli.output import console, emit_json, jobs_table
from relaymq.job import DLQ_STATES, Job, JobState
from relaymq.overview import job_dict
from relaymq.queue import Queue

DLQ = tuple(s for s in JobState if s in DLQ_STATES)


@click.group("dlq")
def dlq_group() -> None:
    """The dead-letter queue of a queue: its failed and expired jobs."""


@dlq_group.command("list")
@click.argument("queue")
@state_option(DLQ, "Only this state (repeatable; default both).", multiple=True)
@task_option
@older_than_option
@offset_option
@limit_option
@backend_option
@json_option
def dlq_list(
    queue: str,
    states: tuple[str, ...],
    task: str | None,
    older_than: float | None,
    offset: int,
    limit: int,
    backend: str,
    as_json: bool,
) -> None:
    """QUEUE's failed, then expired, jobs, oldest first (--offset and --limit count within
    each state)."""

    async def collect(q: Queue) -> list[Job]:
        out: list[Job] = []
        for state in [JobState(s) for s in states] or list(DLQ):
            out += await q.list_jobs(state, offset, limit, task=task, older_than=older_than)
        return out

    jobs = with_queue(backend, queue, collect)
    if as_json:
        emit_json([job_dict(j) for j in jobs])
    else:
        console().print(jobs_table(jobs))


def _dlq_pick(
    job_ids: tuple[str, ...],
    states: tuple[str, ...],
    task: str | None,
    older_than: float | None,
    everything: bool,
) -> tuple[Pick, Pick]:
    """What was named (for the usage check and the question), and the same confined to the
    DLQ states (what is acted on: a named job that is not in the DLQ is left alone)."""
    named = Pick(job_ids, tuple(JobState(s) for s in states), task, older_than, everything)
    return named, Pick(job_ids, named.states or DLQ, task, older_than, everything)


@dlq_group.command("replay")
@click.argument("queue")
@bulk_options(DLQ, "replay")
def dlq_replay(
    queue: str,
    job_ids: tuple[str, ...],
    states: tuple[str, ...],
    task: str | None,
    older_than: float | None,
    everything: bool,
    backend: str,
    yes: bool,
    as_json: bool,
) -> None:
    """Run dead-lettered jobs again (attempts reset): JOB_IDs, a selection or --all. Asks
    first unless --yes."""
    named, pick = _dlq_pick(job_ids, states, task, older_than, everything)
    named.check()
    run_bulk("replay", queue, pick, backend, yes, as_json, "", lambda q: q.retry_jobs, "replayed")


@dlq_group.command("purge")
@click.argument("queue")
@bulk_options(DLQ, "purge")
def dlq_purge(
    queue: str,
    job_ids: tuple[str, ...],
    states: tuple[str, ...],
    task: str | None,
    older_than: float | None,
    everything: bool,
    backend: str,
    yes: bool,
    as_json: bool,
) -> None:
    """Delete dead-lettered jobs: JOB_IDs, a selection or --all. Asks first unless --yes."""
    named, pick = _dlq_pick(job_ids, states, task, older_than, everything)
    named.check()
    run_bulk("purge", queue, pick, backend, yes, as_json, "", lambda q: q.remove_jobs, "purged")
