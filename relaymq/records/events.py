"""Event names, the Event record and its wire form, and the enqueue facts that backends
publish in its place: the one home of both formats. Publishing and subscribing go through the
facade (``relaymq.events`` re-exports what users need)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from relaymq.job import NewJob
from relaymq.records.store import Enqueued

JOB_BLOCKED: Final = "job:blocked"
"""A job with dependencies was enqueued (it waits for them unless they had all ended)."""
JOB_WAITING: Final = "job:waiting"
JOB_DELAYED: Final = "job:delayed"
JOB_ACTIVE: Final = "job:active"
JOB_PROGRESS: Final = "job:progress"
JOB_COMPLETED: Final = "job:completed"
JOB_RETRYING: Final = "job:retrying"
JOB_FAILED: Final = "job:failed"
JOB_EXPIRED: Final = "job:expired"
JOB_CANCELLED: Final = "job:cancelled"
JOB_STALLED: Final = "job:stalled"
JOB_REMOVED: Final = "job:removed"
JOB_DEDUPLICATED: Final = "job:deduplicated"
JOB_CLAIM_LOST: Final = "job:claim_lost"
QUEUE_PAUSED: Final = "queue:paused"
QUEUE_RESUMED: Final = "queue:resumed"
WORKER_ONLINE: Final = "worker:online"
WORKER_OFFLINE: Final = "worker:offline"

EVENT_NAMES: Final = frozenset(
    {
        JOB_BLOCKED,
        JOB_WAITING,
        JOB_DELAYED,
        JOB_ACTIVE,
        JOB_PROGRESS,
        JOB_COMPLETED,
        JOB_RETRYING,
        JOB_FAILED,
        JOB_EXPIRED,
        JOB_CANCELLED,
        JOB_STALLED,
        JOB_REMOVED,
        JOB_DEDUPLICATED,
        JOB_CLAIM_LOST,
        QUEUE_PAUSED,
        QUEUE_RESUMED,
        WORKER_ONLINE,
        WORKER_OFFLINE,
    }
)


@dataclass(slots=True)
class Event:
    """Something that happened to a job, a queue or a worker. ``at`` is seconds since epoch.
    Not frozen, as the other per-job records (``relaymq.job`` says why)."""

    name: str
    queue: str
    at: float
    job_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Event:
        return cls(d["name"], d["queue"], d["at"], d.get("job_id"), d.get("data") or {})


def encode(events: Sequence[Event]) -> bytes:
    """One message for a batch of events (a JSON array), so a batch costs one publish.

    Each event goes to orjson as a dict, in the dataclass's field order: the same bytes as
    orjson's own dataclass path, in half the time (every job sends three events or more)."""
    return orjson.dumps(
        [
            {"name": e.name, "queue": e.queue, "at": e.at, "job_id": e.job_id, "data": e.data}
            for e in events
        ]
    )


def decode(raw: bytes) -> list[Event]:
    """The events of one message (a batch of events, or enqueue facts); a message that is not
    ours decodes to nothing."""
    try:
        items = orjson.loads(raw)
        if isinstance(items, dict) and FACTS_ENQUEUED in items:
            return from_enqueue_facts(items)
        return [Event.from_dict(d) for d in (items if isinstance(items, list) else [items])]
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError, ValueError):
        return []


# Enqueue facts: what a backend that stores jobs and announces them in one round trip (a Redis
# script, a PostgreSQL statement) publishes instead of events, so that the events' own form is
# written here alone. One message is a JSON object:
#     {"at": <seconds since the epoch: a number, or a string of one>,
#      "enqueued": [[<fact>, <queue>, <job id>], ...]}
# with one entry per job asked for, in order, and <fact> one of ENQUEUE_FACTS' keys: the state
# the job was stored in, or "duplicate" when nothing was stored. Subscribers decode it into
# the events ``enqueued`` gives for the same jobs.

FACTS_ENQUEUED: Final = "enqueued"
ENQUEUE_FACTS: Final = {
    "waiting": JOB_WAITING,
    "delayed": JOB_DELAYED,
    "blocked": JOB_BLOCKED,
    "duplicate": JOB_DEDUPLICATED,
}
"""Each fact an enqueue reports, and the event it becomes."""


def enqueue_facts(jobs: Sequence[NewJob], answers: Sequence[Enqueued], at: float) -> dict[str, Any]:
    """The facts of an enqueue, as the one-round-trip backends publish them: each job was a
    duplicate, or stored waiting for its dependencies, delayed, or waiting."""
    return {
        "at": at,
        FACTS_ENQUEUED: [
            [_fact(new, answer), new.queue, answer.id]
            for new, answer in zip(jobs, answers, strict=True)
        ],
    }


def _fact(new: NewJob, answer: Enqueued) -> str:
    if answer.duplicate:
        return "duplicate"
    return "blocked" if new.depends_on else "delayed" if new.delay > 0 else "waiting"


def from_enqueue_facts(facts: dict[str, Any]) -> list[Event]:
    """The events of an enqueue's facts (``enqueue_facts``, or a backend's message of them)."""
    at = float(facts["at"])
    return [
        Event(ENQUEUE_FACTS[fact], str(queue), at, str(job_id))
        for fact, queue, job_id in facts[FACTS_ENQUEUED]
    ]


def enqueued(jobs: Sequence[NewJob], answers: Sequence[Enqueued], at: float) -> list[Event]:
    """The event of each enqueue: the job waits, is delayed, waits for its dependencies, or was
    a duplicate."""
    return from_enqueue_facts(enqueue_facts(jobs, answers, at))
