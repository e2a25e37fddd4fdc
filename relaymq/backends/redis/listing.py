"""Listings of job hashes for operators: every job of the page, readable or not.

``page.lua`` sends each record's values in ``JOB_FIELDS`` order (or 0 for a key that is not a
hash). A readable record is its ``Job``; an unreadable one is listed with what could be read,
neutral values elsewhere and the damage in ``extra[CORRUPT]`` (``relaymq.backends.corrupt``),
so that a listing never shows fewer jobs than the counts say with no word why. Claims never
read records this way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from relaymq.backends.corrupt import CORRUPT, state_problem
from relaymq.backends.redis.keys import JOB_FIELDS
from relaymq.backends.redis.records import parse_job
from relaymq.errors import CorruptRecordError
from relaymq.job import DependencyPolicy, Job, JobState, attempts_from

Read = Callable[[bytes], Any]


def _deps(raw: bytes) -> tuple[str, ...]:
    ids = orjson.loads(raw)
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ValueError("not a JSON array of job ids")
    return tuple(ids)


_READ: dict[str, tuple[Read, bool]] = {
    # field: (how its stored bytes read, whether a record must have it)
    "task": (bytes.decode, True),
    "payload": (bytes, True),
    "priority": (int, True),
    "seq": (int, True),
    "created_at": (float, True),
    "run_at": (float, False),
    "ttl": (float, False),
    "max_attempts": (int, False),
    "timeout": (float, False),
    "attempts": (int, False),
    "token": (int, False),
    "claimed_at": (float, False),
    "heartbeat_at": (float, False),
    "stalls": (int, False),
    "progress": (bytes, False),
    "result": (bytes, False),
    "error": (bytes.decode, False),
    "finished_at": (float, False),
    "traceparent": (bytes.decode, False),
    "depends_on": (_deps, False),
    "dep_policy": (lambda raw: DependencyPolicy(raw.decode()), False),
    "limit_key": (bytes.decode, False),
    "attempt_history": (attempts_from, False),
}
_RENAMED = {"dep_policy": "on_dependency_failure"}


def listed_jobs(queue: str, state: JobState, reply: list[Any]) -> list[Job]:
    """The jobs of a ``page.lua`` reply for ``state``, in its order, unreadable ones included."""
    return [
        listed_job(queue, reply[at].decode(), state, reply[at + 1])
        for at in range(0, len(reply), 2)
    ]


def listed_job(
    queue: str, job_id: str, state: JobState, values: Sequence[bytes | None] | int
) -> Job:
    """The job, or what could be read of an unreadable record, listed under ``state``."""
    if isinstance(values, int):  # page.lua's 0: the key holds no hash
        return Job(queue, job_id, "", b"", state, extra={CORRUPT: "the record is not a hash"})
    try:
        return parse_job(queue, job_id, values)
    except CorruptRecordError:
        pass
    stored = dict(zip(JOB_FIELDS, values, strict=True))
    problems: list[str] = []
    if (wrong := state_problem(stored["state"])) is not None:
        problems.append(wrong)
    kept: dict[str, Any] = {}
    for name, (read, required) in _READ.items():
        raw = stored[name]
        if raw is None:
            if required:
                problems.append(f"{name} is missing")
            continue
        try:
            kept[_RENAMED.get(name, name)] = read(raw)
        except (ValueError, TypeError, UnicodeDecodeError):
            problems.append(f"{name} is {raw[:40]!r}, not readable")
    return Job(
        queue=queue,
        id=job_id,
        task=kept.pop("task", ""),
        payload=kept.pop("payload", b""),
        state=state,
        cancel_requested=stored["cancel_requested"] == b"1",
        worker_id=(stored["worker_id"] or b"").decode(errors="replace") or None,
        extra={CORRUPT: "; ".join(problems) or "unreadable"},
        **kept,
    )
