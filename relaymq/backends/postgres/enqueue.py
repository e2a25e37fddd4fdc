"""The statements of a PostgreSQL enqueue, written once as steps (``Steps``) that a driver runs:
the backend's pool, or a caller's connection in its own transaction (``tx.py``).

A step is ``(kind, name, args)``: the statement ``name`` of queries.sql, run as ``fetch``,
``fetchrow``, ``fetchval`` or ``execute`` with the positional ``args``; the generator receives
its answer. A batch without key rules or dependencies is one statement (which may also send
the enqueue's facts as a notification); a keyed or dependent batch is a few statements per job
and needs a transaction around it.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, TypeVar

from relaymq.backends.postgres.notify import NOTIFY_LIMIT, STORED_EVENTS_KEEP, Notes
from relaymq.job import NewJob
from relaymq.policy import DependentStep, KeyStep, dependencies_at_enqueue, key_step
from relaymq.records.store import Enqueued, dependent, keyed

T = TypeVar("T")
Step = tuple[str, str, tuple[Any, ...]]
"""``(kind, statement name, positional args)``; kind is fetch, fetchrow, fetchval or execute."""
Steps = Generator[Step, Any, T]
Note = tuple[str | None, str, float]
"""The notification an enqueue statement sends: (channel or None for none, number, time)."""
NO_NOTE: Note = (None, "", 0.0)


def in_one_statement(jobs: Sequence[NewJob]) -> bool:
    """Whether ``enqueue_steps`` of ``jobs`` is one statement (no transaction needed)."""
    return not (keyed(jobs) or dependent(jobs) or sequenced(jobs))


def sequenced(jobs: Sequence[NewJob]) -> bool:
    """Whether any of ``jobs`` belongs to a sequence (its enqueue locks it first)."""
    return any(j.sequence is not None for j in jobs)


def facts_fit(jobs: Sequence[NewJob]) -> bool:
    """Whether the enqueue statement can carry the jobs' facts in its notification."""
    size = 100  # the envelope: 't', the number, the time
    for j in jobs:  # a fact: '["duplicate", "<queue>", "<id>"], '
        text = j.queue + j.id
        plain = text.isascii() and text.isprintable() and '"' not in text and "\\" not in text
        size += 24 + len(text) * (1 if plain else 6)  # at worst "\u001f" for one byte
    return size < NOTIFY_LIMIT and in_one_statement(jobs)


def enqueue_steps(
    jobs: Sequence[NewJob], now: float | None, note: Note = NO_NOTE
) -> Steps[list[Enqueued]]:
    """Store ``jobs``: one statement (sending ``note`` when it names a channel), or, for a
    keyed or dependent batch, a few per job (``note`` is not sent: publish the events after)."""
    if sequenced(jobs):  # every sequence of the batch, in one order, before any seq is taken
        pairs = sorted({(j.queue, j.sequence) for j in jobs if j.sequence is not None})
        yield ("execute", "lock_sequences", ([q for q, _ in pairs], [s for _, s in pairs]))
    if keyed(jobs) or dependent(jobs):
        out: list[Enqueued] = []
        for job in jobs:
            out.append((yield from _one_keyed(job, now)))
        return out
    if not in_one_statement(jobs):
        note = NO_NOTE  # the events are published after, as for a keyed batch
    rows = yield ("fetch", "enqueue", (*enqueue_args(jobs, now), *note, *job_keys(jobs)))
    return enqueue_answers(jobs, rows)


def _one_keyed(job: NewJob, now: float | None) -> Steps[Enqueued]:
    """One job of a keyed or dependent batch, inside its transaction (``KeyRule``)."""
    rule = job.rule
    replaced = None
    if rule is not None:
        yield ("execute", "lock_key", (job.queue, rule.key))
        held = yield ("fetchrow", "key_holder", (job.queue, rule.key, job.id, now))
        if held["taken"]:
            return Enqueued(job.id, duplicate=True)
        holder = held["holder"]
        step = key_step(rule.mode, held["state"], bool(held["in_window"]))
        if step is KeyStep.DUPLICATE:
            return Enqueued(holder, duplicate=True)
        # take_key deletes the holder only if it still waits: a worker may have claimed it
        victim = holder if step is KeyStep.REPLACE else None
        took = yield (
            "fetchrow",
            "take_key",
            (job.queue, rule.key, job.id, rule.window, victim, now),
        )
        replaced = took["replaced"]
    rows = yield ("fetch", "enqueue", (*enqueue_args([job], now), *NO_NOTE, *job_keys([job])))
    [answer] = enqueue_answers([job], rows)
    if job.depends_on and not answer.duplicate:
        yield from _store_dependencies(job, now)
    return Enqueued(answer.id, answer.duplicate, replaced)


def _store_dependencies(job: NewJob, now: float | None) -> Steps[None]:
    """The job just stored (waiting, in this transaction) becomes what
    ``relaymq.policy.dependencies_at_enqueue`` says: blocked, failed, or left waiting. The
    dependencies are locked meanwhile, so none ends unseen (``dependency_states``)."""
    ids = list(dict.fromkeys(job.depends_on))
    found = yield ("fetch", "dependency_states", (job.queue, ids))
    states = {r["id"]: r["state"] for r in found}
    start = dependencies_at_enqueue(ids, states, job.on_dependency_failure)
    yield (
        "execute",
        "set_dependencies",
        (
            job.queue,
            job.id,
            list(job.depends_on),
            job.on_dependency_failure.value,
            len(start.waits_for),
            start.error,
            now,
        ),
    )
    if start.step is DependentStep.BLOCKED:
        yield ("execute", "add_dependencies", (job.queue, list(start.waits_for), job.id))


def publish_steps(channel: str, events: Sequence[bytes], notes: Notes) -> Steps[None]:
    """Publish ``events`` on ``channel`` in order, in one transaction: each as a notification,
    or, when too large for one, stored in the events table and its id sent (``notify``)."""
    if not any(notes.too_large(e) for e in events):
        yield ("execute", "publish", (channel, notes.inline(events)))
        return
    sent: list[str] = []
    for e in events:
        if notes.too_large(e):
            sent.append(notes.stored((yield ("fetchval", "store_event", (e,)))))
        else:
            sent += notes.inline([e])
    # stored events are rare: trim the old ones while here, not in a background task
    yield ("execute", "prune_events", (STORED_EVENTS_KEEP,))
    yield ("execute", "publish", (channel, sent))


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


def job_keys(jobs: Sequence[NewJob]) -> list[list[str | None]]:
    """The arguments $15 to $17 of the ``enqueue`` statement: limit keys, sequences and what
    each job of a sequence does to it when dead-lettered."""
    return [
        [j.limit_key for j in jobs],
        [j.sequence for j in jobs],
        [None if j.sequence is None else j.sequence_on_failure.value for j in jobs],
    ]


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
