"""``relaymq job list|show|watch|retry|cancel|remove``, and the bulk selection that
``job`` and ``dlq`` actions share."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click

from relaymq import events
from relaymq.cli.common import (
    NotFound,
    all_option,
    backend_option,
    json_option,
    limit_option,
    offset_option,
    older_than_option,
    state_option,
    task_option,
    with_queue,
    yes_option,
)
from relaymq.cli.output import (
    ask,
    attempts_table,
    console,
    done,
    emit_json,
    job_table,
    jobs_table,
)
from relaymq.job import Job, JobState
from relaymq.overview import decoded, held_by, job_dict, waits_on
from relaymq.queue import Queue
from relaymq.records.store import CancelResult

ALL_STATES = tuple(JobState)

# -- the selection of a bulk action ------------------------------------------------------------


@dataclass(frozen=True)
class Pick:
    """What an operator named on the command line: ids, or filters, or ``--all``."""

    ids: tuple[str, ...]
    states: tuple[JobState, ...]
    task: str | None
    older_than: float | None
    everything: bool

    @property
    def filtered(self) -> bool:
        return bool(self.states) or self.task is not None or self.older_than is not None

    def check(self) -> None:
        """A usage error (exit 2) unless the command names what it acts on."""
        if not self.ids and not self.filtered and not self.everything:
            raise click.UsageError(
                "name job ids, select with --state/--task/--older-than, or pass --all"
            )
        if self.ids and self.everything:
            raise click.UsageError("give job ids or --all, not both")

    def words(self, default: str) -> str:
        """The selection in words, for the confirmation question."""
        if self.ids:
            head = f"{len(self.ids)} named jobs" if len(self.ids) > 1 else f"job {self.ids[0]!r}"
        elif self.states or default:
            head = "the " + ("/".join(s.value for s in self.states) or default) + " jobs"
        else:
            head = "all jobs"
        if self.task is not None:
            head += f" of task {self.task!r}"
        if self.older_than is not None:
            head += f" older than {self.older_than:g}s"
        return head

    def kwargs(self) -> dict[str, Any]:
        return {
            "state": self.states or None,
            "task": self.task,
            "older_than": self.older_than,
        }


async def require_jobs(queue: Queue, ids: Sequence[str]) -> list[Job]:
    """The named jobs; ``NotFound`` naming the first absent one (nothing is changed then)."""
    found = await queue.get_jobs(list(dict.fromkeys(ids)))
    for job_id, job in zip(dict.fromkeys(ids), found, strict=True):
        if job is None:
            raise NotFound(f"no job {job_id!r} in queue {queue.name!r}")
    return [j for j in found if j is not None]


BulkAction = Callable[..., Awaitable[int]]


async def act_in_bulk(
    queue: Queue, pick: Pick, action: BulkAction, question: str, yes: bool
) -> int:
    """Check the named jobs exist, ask, then run ``action`` (a ``Queue`` bulk method)."""
    if pick.ids:
        await require_jobs(queue, pick.ids)
    await ask(question, yes)
    if pick.ids:
        return await action(list(pick.ids), **pick.kwargs())
    return await action(**pick.kwargs())


# -- commands ---------------------------------------------------------------------------------


@click.group("job")
def job_group() -> None:
    """See and act on jobs of a queue."""


@job_group.command("list")
@click.argument("queue")
@state_option(ALL_STATES, "Jobs in this state.", default=JobState.WAITING.value)
@task_option
@older_than_option
@offset_option
@limit_option
@backend_option
@json_option
def job_list(
    queue: str,
    state: str,
    task: str | None,
    older_than: float | None,
    offset: int,
    limit: int,
    backend: str,
    as_json: bool,
) -> None:
    """A page of QUEUE's jobs in one state (waiting, unless --state): waiting in claim order,
    delayed by run time, others oldest first."""
    chosen = JobState(state)

    async def page(q: Queue) -> tuple[list[Job], dict[JobState, int] | None]:
        jobs = await q.list_jobs(chosen, offset, limit, task=task, older_than=older_than)
        return jobs, (None if jobs or as_json else await q.counts())

    jobs, counts = with_queue(backend, queue, page)
    if as_json:
        emit_json([job_dict(j) for j in jobs])
        return
    console().print(jobs_table(jobs, chosen))
    if counts is not None:
        sys.stdout.flush()  # the table first, then why it is empty
        click.echo(
            empty_hint(queue, chosen, counts, filtered=bool(task or older_than or offset)), err=True
        )


def empty_hint(queue: str, state: JobState, counts: dict[JobState, int], filtered: bool) -> str:
    """Why a listing is empty: it shows one state, and what the others hold."""
    text = f"no {state.value} jobs in {queue!r}" + (" matching the filters" if filtered else "")
    others = [s for s, n in counts.items() if n and s is not state]
    if not others:
        return text + f" (job list shows one state: --state {state.value}; the queue is empty)"
    held = ", ".join(f"{counts[s]} {s.value}" for s in others)
    return text + f"; it holds {held} (job list shows one state: --state {others[0].value})"


@job_group.command("show")
@click.argument("queue")
@click.argument("job_id")
@backend_option
@json_option
def job_show(queue: str, job_id: str, backend: str, as_json: bool) -> None:
    """Everything stored about one job: arguments, state, attempts, error, result, and its
    last attempts (when each ran, on which worker, for how long, and its error). A job of a
    sequence that waits for an earlier one names it (sequence_waits_on: its id and state)."""

    async def get(q: Queue) -> tuple[Job, Job | None]:
        [job] = await require_jobs(q, [job_id])
        return job, await held_by(q, job)

    job, head = with_queue(backend, queue, get)
    if as_json:
        emit_json(job_dict(job, full=True) | {"sequence_waits_on": waits_on(head)})
    else:
        console().print(job_table(job, head))
        if job.attempt_history:
            console().print(attempts_table(job))


@job_group.command("watch")
@click.argument("queue")
@click.argument("job_id")
@backend_option
@json_option
def job_watch(queue: str, job_id: str, backend: str, as_json: bool) -> None:
    """Follow one job's events live until it ends (exit 0), or until it is gone (exit 1)."""

    async def follow(q: Queue) -> None:
        subscription = await q.ops.subscribe()  # live before the first read
        try:
            job = (await require_jobs(q, [job_id]))[0]
            show_state(job, as_json)
            while not job.terminal:
                event = await next_event(subscription, q.name, job_id, within=1.0)
                if event is not None:
                    show_event(event, as_json)
                current = await q.get_job(job_id)
                if current is None:
                    raise NotFound(f"job {job_id!r} of queue {queue!r} was removed")
                if current.state is not job.state or current.terminal:
                    job = current
                    if event is None or event.name != f"job:{job.state.value}":
                        show_state(job, as_json)
        finally:
            await subscription.aclose()

    with_queue(backend, queue, follow)


async def next_event(
    subscription: events.Subscription, queue: str, job_id: str, within: float
) -> events.Event | None:
    """The next event about the job, or None after ``within`` seconds (then the caller reads
    the job again: an event published by a process that could not reach us is not waited for
    forever)."""
    try:
        async with asyncio.timeout(within):
            async for event in subscription:
                if event.job_id == job_id and event.queue == queue:
                    return event
    except TimeoutError:
        pass
    return None


def show_event(event: events.Event, as_json: bool) -> None:
    if as_json:
        emit_json(
            {
                "event": event.name,
                "queue": event.queue,
                "job_id": event.job_id,
                "at": event.at,
                "data": event.data,
            }
        )
        return
    data = " ".join(f"{k}={v}" for k, v in event.data.items())
    click.echo(f"{event.name} {data}".rstrip())


def show_state(job: Job, as_json: bool) -> None:
    if as_json:
        emit_json({"state": job.state.value, **job_dict(job)})
        return
    line = f"{job.id}: {job.state.value} (attempt {job.attempts}/{job.max_attempts})"
    if job.terminal and job.error:
        line += f": {job.error}"
    elif job.state is JobState.COMPLETED:
        line += f": {decoded(job.result)!r}"
    click.echo(line)


def bulk_options(states: tuple[JobState, ...], what: str) -> Callable[[Any], Any]:
    """IDS..., --state (repeatable), --task, --older-than, --all, --yes, --backend, --json."""

    def add(command: Any) -> Any:
        for option in reversed(
            (
                click.argument("job_ids", nargs=-1),
                state_option(
                    states, f"Only {what} jobs in this state (repeatable).", multiple=True
                ),
                task_option,
                older_than_option,
                all_option,
                backend_option,
                yes_option,
                json_option,
            )
        ):
            command = option(command)
        return command

    return add


def run_bulk(
    name: str,
    queue: str,
    pick: Pick,
    backend: str,
    yes: bool,
    as_json: bool,
    default: str,
    action: Callable[[Queue], BulkAction],
    verb: str,
) -> int:
    pick.check()
    question = f"{name.capitalize()} {pick.words(default)} in queue {queue!r}?"
    n = with_queue(backend, queue, lambda q: act_in_bulk(q, pick, action(q), question, yes))
    done(as_json, f"{verb} {n} jobs of {queue!r}", queue=queue, action=name, changed=n)
    return n


def _pick(
    job_ids: tuple[str, ...],
    states: tuple[str, ...],
    task: str | None,
    older_than: float | None,
    everything: bool,
) -> Pick:
    return Pick(job_ids, tuple(JobState(s) for s in states), task, older_than, everything)


RETRYABLE = (JobState.FAILED, JobState.EXPIRED, JobState.CANCELLED)
LIVE = (JobState.WAITING, JobState.DELAYED, JobState.ACTIVE)


@job_group.command("retry")
@click.argument("queue")
@bulk_options(RETRYABLE, "retry")
def job_retry(
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
    """Run failed, expired or cancelled jobs again: one JOB_ID, several, or a selection
    (several or a selection ask first unless --yes)."""
    pick = _pick(job_ids, states, task, older_than, everything)
    if len(job_ids) == 1 and not pick.filtered:

        async def one(q: Queue) -> None:
            if not await q.retry_job(job_ids[0]):
                job = await q.get_job(job_ids[0])
                state = job.state.value if job else "gone"
                raise click.ClickException(
                    f"job {job_ids[0]!r} is {state}: only failed, "
                    "expired or cancelled jobs can be retried"
                )

        with_queue(backend, queue, one)
        done(
            as_json, f"job {job_ids[0]!r} is waiting again", queue=queue, action="retry", changed=1
        )
        return
    run_bulk(
        "retry",
        queue,
        pick,
        backend,
        yes or len(job_ids) == 1,
        as_json,
        "failed/expired/cancelled",
        lambda q: q.retry_jobs,
        "retried",
    )


@job_group.command("cancel")
@click.argument("queue")
@bulk_options(LIVE, "cancel")
def job_cancel(
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
    """Cancel waiting, delayed or running jobs: one JOB_ID, several, or a selection (several
    or a selection ask first unless --yes)."""
    pick = _pick(job_ids, states, task, older_than, everything)
    if len(job_ids) == 1 and not pick.filtered:
        result = with_queue(backend, queue, lambda q: q.cancel(job_ids[0]))
        changed = int(result is CancelResult.CANCELLED)
        text = (
            f"job {job_ids[0]!r} cancelled"
            if changed
            else f"job {job_ids[0]!r} had already ended: nothing changed"
        )
        done(as_json, text, queue=queue, action="cancel", changed=changed)
        return
    run_bulk(
        "cancel",
        queue,
        pick,
        backend,
        yes or len(job_ids) == 1,
        as_json,
        "waiting/delayed/active",
        lambda q: q.cancel_jobs,
        "cancelled",
    )


@job_group.command("remove")
@click.argument("queue")
@bulk_options(ALL_STATES, "remove")
def job_remove(
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
    """Delete jobs in any state (running ones lose their claim): JOB_IDs or a selection.
    Asks first unless --yes."""
    pick = _pick(job_ids, states, task, older_than, everything)
    run_bulk("remove", queue, pick, backend, yes, as_json, "", _remover, "removed")


def _remover(q: Queue) -> BulkAction:
    """``Queue.remove_jobs``; ``--all`` alone selects every state explicitly (the API refuses
    an empty selection on purpose)."""

    async def remove(job_ids: Sequence[str] | None = None, **kwargs: Any) -> int:
        if job_ids is None and kwargs.get("state") is None:
            kwargs["state"] = ALL_STATES
        return await q.remove_jobs(job_ids, **kwargs)

    return remove
