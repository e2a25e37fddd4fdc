"""The steps of a PostgreSQL enqueue that the one-statement path cannot take: a job with a key
rule or dependencies, inside the batch's transaction, and the statement's arguments and
answers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from relaymq.backends.postgres.statements import Q
from relaymq.job import NewJob
from relaymq.policy import DependentStep, KeyStep, dependencies_at_enqueue, key_step
from relaymq.records.store import Enqueued


async def enqueue_one_keyed(con: Any, job: NewJob, now: float | None) -> Enqueued:
    """One job of a keyed batch, inside its transaction (``KeyRule``)."""
    rule = job.rule
    replaced = None
    if rule is not None:
        await con.execute(Q["lock_key"], job.queue, rule.key)
        held = await con.fetchrow(Q["key_holder"], job.queue, rule.key, job.id, now)
        if held["taken"]:
            return Enqueued(job.id, duplicate=True)
        holder = held["holder"]
        step = key_step(rule.mode, held["state"], bool(held["in_window"]))
        if step is KeyStep.DUPLICATE:
            return Enqueued(holder, duplicate=True)
        # take_key deletes the holder only if it still waits: a worker may have claimed it
        victim = holder if step is KeyStep.REPLACE else None
        took = await con.fetchrow(
            Q["take_key"], job.queue, rule.key, job.id, rule.window, victim, now
        )
        replaced = took["replaced"]
    rows = await con.fetch(
        Q["enqueue"], *enqueue_args([job], now), None, "", 0.0, limit_keys([job])
    )
    [answer] = enqueue_answers([job], rows)
    if job.depends_on and not answer.duplicate:
        await store_dependencies(con, job, now)
    return Enqueued(answer.id, answer.duplicate, replaced)


async def store_dependencies(con: Any, job: NewJob, now: float | None) -> None:
    """The job just stored (waiting, in this transaction) becomes what
    ``relaymq.policy.dependencies_at_enqueue`` says: blocked, failed, or left waiting. The
    dependencies are locked meanwhile, so none ends unseen (``dependency_states``)."""
    ids = list(dict.fromkeys(job.depends_on))
    states = {r["id"]: r["state"] for r in await con.fetch(Q["dependency_states"], job.queue, ids)}
    start = dependencies_at_enqueue(ids, states, job.on_dependency_failure)
    await con.execute(
        Q["set_dependencies"],
        job.queue,
        job.id,
        list(job.depends_on),
        job.on_dependency_failure.value,
        len(start.waits_for),
        start.error,
        now,
    )
    if start.step is DependentStep.BLOCKED:
        await con.execute(Q["add_dependencies"], job.queue, list(start.waits_for), job.id)


def enqueue_args(jobs: Sequence[NewJob], now: float | None) -> list[Any]:
    """The arguments $1..$11 of the ``enqueue`` statements: one array per column."""
    return [
        [j.queue for j in jobs],
        [j.id for j in jobs],
        [j.task for j in jobs],
        [j.payload for j in jobs],
        [j.priority for j in jobs],
        [float(j.delay) for j in jobs],
        [j.ttl for j in jobs],
        [j.max_attempts for j in jobs],
        [j.timeout for j in jobs],
        now,
        [j.traceparent for j in jobs],
    ]


def limit_keys(jobs: Sequence[NewJob]) -> list[str | None]:
    """The argument $15 of the ``enqueue`` statement."""
    return [j.limit_key for j in jobs]


def enqueue_answers(jobs: Sequence[NewJob], rows: Sequence[Any]) -> list[Enqueued]:
    """Each job's answer from the (queue, id) rows stored (a row of NULLs: none was): a
    repeat later in the batch is a duplicate too."""
    stored = {(r["queue"], r["id"]) for r in rows if r["id"] is not None}
    out: list[Enqueued] = []
    for j in jobs:
        key = (j.queue, j.id)
        out.append(Enqueued(j.id, duplicate=key not in stored))
        stored.discard(key)
    return out
