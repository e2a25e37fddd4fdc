"""Job documents: their fields, how a ``NewJob`` becomes one and how one becomes a ``Job``.

A job document (collection ``jobs``)::

    _id            ObjectId          internal; (queue, id) is the unique key
    queue, id      str
    task           str
    payload        binary            opaque bytes (the core serializes)
    state          str               a JobState value
    priority       int               lower runs first
    ready_at       date              the job's place in line: when it entered ``waiting``, or
                                     when a ``delayed`` job falls due (its run time)
    seq            int               per-queue FIFO sequence (``queues.seq``), breaks ties
    created_at     date
    ttl, timeout   double | null     seconds
    max_attempts, attempts, token, stalls   int
    claimed_at, heartbeat_at, finished_at   date | null
    worker_id      str | null
    cancel_requested  bool           an operator cancelled the job while it was active
    progress, result  binary | null
    error          str | null
    claim_id       str               the batch claim that last took the job (read-back key)
    write_id       str               the batched write that last changed it (read-back key)

Claims take jobs in ``(priority, ready_at, seq)`` order among ``waiting`` jobs and ``delayed``
jobs whose ``ready_at`` has passed, so a delayed job that falls due enters the line at its run
time, never ahead of jobs that were waiting before it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from bson import Binary

from relaymq.errors import CorruptRecordError
from relaymq.job import Job, JobState, NewJob

Document = dict[str, Any]

UTC = dt.UTC


def to_date(seconds: float) -> dt.datetime:
    """Seconds since the epoch as a BSON date (millisecond precision on the server)."""
    return dt.datetime.fromtimestamp(seconds, UTC)


def to_seconds(value: dt.datetime) -> float:
    if value.tzinfo is None:  # defensive: the client is tz-aware, but old data may not be
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def new_document(job: NewJob, seq: int, now: dt.datetime) -> Document:
    """The document ``enqueue`` inserts for ``job``, with its FIFO sequence and the time."""
    delayed = job.delay > 0
    return {
        "queue": job.queue,
        "id": job.id,
        "task": job.task,
        "payload": Binary(job.payload),
        "state": str(JobState.DELAYED if delayed else JobState.WAITING),
        "priority": job.priority,
        "ready_at": now + dt.timedelta(seconds=job.delay) if delayed else now,
        "seq": seq,
        "created_at": now,
        "ttl": job.ttl,
        "max_attempts": job.max_attempts,
        "timeout": job.timeout,
        "attempts": 0,
        "token": 0,
        "claimed_at": None,
        "heartbeat_at": None,
        "worker_id": None,
        "stalls": 0,
        "cancel_requested": False,
        "progress": None,
        "result": None,
        "error": None,
        "finished_at": None,
    }


def to_job(doc: Mapping[str, Any]) -> Job:
    """The ``Job`` a document stores; ``CorruptRecordError`` when a field has the wrong type."""
    try:
        state = JobState(doc["state"])
        ready_at = _time(doc, "ready_at")
        return Job(
            queue=_str(doc, "queue"),
            id=_str(doc, "id"),
            task=_str(doc, "task"),
            payload=_bytes(doc, "payload", required=True) or b"",
            state=state,
            priority=_int(doc, "priority"),
            seq=_int(doc, "seq"),
            created_at=_time(doc, "created_at", required=True) or 0.0,
            run_at=ready_at if state is JobState.DELAYED else None,
            ttl=_float(doc, "ttl"),
            max_attempts=_int(doc, "max_attempts"),
            timeout=_float(doc, "timeout"),
            attempts=_int(doc, "attempts"),
            token=_int(doc, "token"),
            claimed_at=_time(doc, "claimed_at"),
            heartbeat_at=_time(doc, "heartbeat_at"),
            worker_id=_opt_str(doc, "worker_id"),
            stalls=_int(doc, "stalls"),
            cancel_requested=bool(doc.get("cancel_requested", False)),
            progress=_bytes(doc, "progress"),
            result=_bytes(doc, "result"),
            error=_opt_str(doc, "error"),
            finished_at=_time(doc, "finished_at"),
        )
    except (KeyError, TypeError, ValueError) as e:
        where = f"{doc.get('queue')!r}/{doc.get('id')!r}"
        raise CorruptRecordError(f"job document {where} cannot be read: {e!r}") from e


def _str(doc: Mapping[str, Any], key: str) -> str:
    value = doc[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} is {type(value).__name__}, not str")
    return value


def _opt_str(doc: Mapping[str, Any], key: str) -> str | None:
    return None if doc.get(key) is None else _str(doc, key)


def _int(doc: Mapping[str, Any], key: str) -> int:
    value = doc.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{key} is {type(value).__name__}, not int")
    return value


def _float(doc: Mapping[str, Any], key: str) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{key} is {type(value).__name__}, not a number")
    return float(value)


def _bytes(doc: Mapping[str, Any], key: str, *, required: bool = False) -> bytes | None:
    value = doc[key] if required else doc.get(key)
    if value is None:
        return None
    if not isinstance(value, bytes):  # bson.Binary subclasses bytes
        raise TypeError(f"{key} is {type(value).__name__}, not binary")
    return bytes(value)


def _time(doc: Mapping[str, Any], key: str, *, required: bool = False) -> float | None:
    value = doc[key] if required else doc.get(key)
    if value is None:
        return None
    if not isinstance(value, dt.datetime):
        raise TypeError(f"{key} is {type(value).__name__}, not a date")
    return to_seconds(value)
