"""Job documents: their fields, how a ``NewJob`` becomes one and how one becomes a ``Job``.

A job document (collection ``jobs``)::

    _id            ObjectId          internal; (queue, id) is the unique key
    queue, id      str
    task           str
    payload        binary            opaque bytes (the core serializes)
    arguments      document          the payload decoded, when it is JSON that BSON holds as it
                                     is (``arguments_of``); absent otherwise. Only searches
                                     read it: a search's first cut, on the server
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
    traceparent    str               W3C trace context of the enqueue; absent unless tracing
    sequence       str               the job's sequence (``NewJob.sequence``); absent without
    seq_failure    str               its ``sequence_on_failure`` value (hold, continue)
    sequence_pos   int               its place in the sequence: ``seq`` at enqueue, never changed
    claim_id       str               the batch claim that last took the job (read-back key)
    write_id       str               the batched write that last changed it (read-back key)

Claims take jobs in ``(priority, ready_at, seq)`` order among ``waiting`` jobs and ``delayed``
jobs whose ``ready_at`` has passed, so a delayed job that falls due enters the line at its run
time, never ahead of jobs that were waiting before it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson
from bson import Binary

from relaymq.backends.corrupt import reason, state_problem
from relaymq.errors import ConfigError, CorruptRecordError
from relaymq.job import DependencyPolicy, Job, JobState, NewJob, SequenceFailure, attempts_from
from relaymq.records.limits import Limits

Document = dict[str, Any]

UTC = dt.UTC


def text(value: Any, what: str) -> str:
    """``value`` when it is a ``str``; else ``ConfigError`` naming ``what``. Every value a
    caller gives (queue, job id, task, key, schedule id...) goes into a filter or a document
    only through this: a dict there would be read as query operators (``{"$ne": None}`` as a
    job id matches every job)."""
    if not isinstance(value, str):
        raise ConfigError(
            f"{what} must be a str, got {type(value).__name__}: MongoDB would "
            "read anything else as a query"
        )
    return value


def texts(values: Iterable[Any], what: str) -> list[str]:
    """Each of ``values`` checked by ``text``."""
    if isinstance(values, str):
        raise ConfigError(f"{what}s must be a list of str, not the string {values!r}")
    return [text(v, what) for v in values]


def check_new(job: NewJob) -> None:
    """Every caller's value of a new job is a ``str`` (``text``) before it is stored."""
    text(job.queue, "queue")
    text(job.id, "job_id")
    text(job.task, "task")
    texts(job.depends_on, "depends_on id")
    if job.rule is not None:
        text(job.rule.key, "key")
    if job.limit_key is not None:
        text(job.limit_key, "limit_key")
    if job.sequence is not None:
        text(job.sequence, "sequence")


def to_date(seconds: float) -> dt.datetime:
    """Seconds since the epoch as a BSON date (millisecond precision on the server)."""
    return dt.datetime.fromtimestamp(seconds, UTC)


def to_seconds(value: dt.datetime) -> float:
    if value.tzinfo is None:  # defensive: the client is tz-aware, but old data may not be
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


ARGUMENTS_MAX = 16 * 1024
"""Bytes of payload up to which a job's arguments are also stored decoded, for searches."""
JOB_FIELDS: Final = {"arguments": 0}
"""The projection of a whole job read back: all but the searches' copy of its arguments."""
_DEPTH = 50
"""Nesting kept (MongoDB refuses documents nested past 100 levels)."""
INT64: Final = range(-(2**63), 2**63)
"""The integers BSON holds."""


def arguments_of(payload: bytes) -> dict[str, Any] | None:
    """``payload`` decoded as JSON, stored beside it so that a search by argument values is a
    server-side query; None when it is not JSON (another serializer), is larger than
    ``ARGUMENTS_MAX``, or holds what BSON does not store as it is: integers past 64 bits,
    names with ``.``, a leading ``$`` or NUL, nesting deeper than ``_DEPTH``. Such a job is
    still found: a search checks every job without ``arguments`` by its payload."""
    if len(payload) > ARGUMENTS_MAX or not payload.startswith(b"{"):
        return None
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) and _storable(value, 0) else None


def _storable(value: Any, depth: int) -> bool:
    if isinstance(value, dict):
        return depth < _DEPTH and all(
            "." not in k and not k.startswith("$") and "\0" not in k and _storable(v, depth + 1)
            for k, v in value.items()
        )
    if isinstance(value, list):
        return depth < _DEPTH and all(_storable(v, depth + 1) for v in value)
    return not isinstance(value, int) or value in INT64


def new_document(job: NewJob, seq: int, now: dt.datetime) -> Document:
    """The document ``enqueue`` inserts for ``job``, with its FIFO sequence and the time."""
    delayed = job.delay > 0
    doc: Document = {
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
    arguments = arguments_of(job.payload)
    if arguments is not None:
        doc["arguments"] = arguments
    if job.traceparent is not None:  # only while tracing is on: no field otherwise
        doc["traceparent"] = job.traceparent
    if job.limit_key is not None:
        doc["limit_key"] = job.limit_key
    if job.sequence is not None:
        doc["sequence"] = job.sequence
        doc["seq_failure"] = job.sequence_on_failure.value
        doc["sequence_pos"] = seq
    return doc


# Every field a Job is read from: (name, accepted types, may be null/absent, neutral value).
_FIELDS: list[tuple[str, tuple[type, ...], bool, Any]] = [
    ("queue", (str,), False, ""),
    ("id", (str,), False, ""),
    ("task", (str,), False, ""),
    ("payload", (bytes,), False, b""),  # bson.Binary subclasses bytes
    ("priority", (int,), False, 0),
    ("seq", (int,), False, 0),
    ("created_at", (dt.datetime,), False, None),
    ("ready_at", (dt.datetime,), True, None),
    ("ttl", (int, float), True, None),
    ("max_attempts", (int,), False, 1),
    ("timeout", (int, float), True, None),
    ("attempts", (int,), False, 0),
    ("token", (int,), False, 0),
    ("claimed_at", (dt.datetime,), True, None),
    ("heartbeat_at", (dt.datetime,), True, None),
    ("worker_id", (str,), True, None),
    ("stalls", (int,), False, 0),
    ("cancel_requested", (bool,), True, False),
    ("progress", (bytes,), True, None),
    ("result", (bytes,), True, None),
    ("error", (str,), True, None),
    ("finished_at", (dt.datetime,), True, None),
    ("traceparent", (str,), True, None),
    ("depends_on", (list,), True, None),
    ("dep_policy", (str,), True, None),
    ("limit_key", (str,), True, None),
    ("sequence", (str,), True, None),
    ("seq_failure", (str,), True, None),
    ("sequence_pos", (int,), True, None),
]
_POLICIES = {p.value: p for p in DependencyPolicy}
_FAILURES = {f.value: f for f in SequenceFailure}


def problems(doc: Mapping[str, Any]) -> list[str]:
    """What is wrong with ``doc``, one phrase per unreadable field; empty for a sound one."""
    found: list[str] = []
    if (wrong := state_problem(doc.get("state"))) is not None:
        found.append(wrong)
    for name, types, nullable, _ in _FIELDS:
        value = doc.get(name)
        if value is None:
            if not nullable:
                found.append(f"{name} is missing")
        elif not _readable(value, types):
            found.append(
                f"{name} is {type(value).__name__} {_short(value)}, not {types[0].__name__}"
            )
    return found


def _readable(value: Any, types: tuple[type, ...]) -> bool:
    return isinstance(value, types) and (bool in types or not isinstance(value, bool))


def describe(doc: Mapping[str, Any], bad: list[str]) -> str:
    """The reason raised for, and stored with, an unreadable job."""
    return reason(doc.get("queue"), doc.get("id"), bad)


def to_limits(doc: Mapping[str, Any] | None) -> Limits | None:
    """The limits stored in a queue document, or None (none stored, or unreadable: a queue
    whose limits cannot be read is claimed as one without; set them again to mend it)."""
    stored = doc.get("limits") if doc is not None else None
    if not isinstance(stored, Mapping):
        return None
    try:
        return Limits(
            max_active=stored.get("max_active"),
            rate=stored.get("rate"),
            per=float(stored.get("per", 1.0)),
            key_rate=stored.get("key_rate"),
            key_per=float(stored.get("key_per", 1.0)),
            key_max_active=stored.get("key_max_active"),
            fair=bool(stored.get("fair", False)),
            weights=tuple((str(k), int(n)) for k, n in stored.get("weights") or []),
        )
    except (ConfigError, TypeError, ValueError):
        return None


def to_job(doc: Mapping[str, Any]) -> Job:
    """The ``Job`` a document stores; ``CorruptRecordError`` when any field is unreadable."""
    bad = problems(doc)
    if bad:
        raise CorruptRecordError(describe(doc, bad))
    return _build(doc)


def to_job_lenient(doc: Mapping[str, Any], state: JobState) -> Job:
    """Like ``to_job``, but an unreadable field gets a neutral value and the damage is told in
    ``extra["corrupt"]``. Only for listings shown to operators (selected by ``state``)."""
    bad = problems(doc)
    if not bad:
        return _build(doc)
    fixed = dict(doc, state=str(state))
    for name, types, nullable, neutral in _FIELDS:
        value = doc.get(name)
        if (value is None and not nullable) or (value is not None and not _readable(value, types)):
            fixed[name] = neutral
    if fixed.get("created_at") is None:
        fixed["created_at"] = to_date(0)
    return dataclasses.replace(_build(fixed), extra={"corrupt": "; ".join(bad)})


def _build(doc: Mapping[str, Any]) -> Job:
    state = JobState(doc["state"])
    return Job(
        queue=doc["queue"],
        id=doc["id"],
        task=doc["task"],
        payload=bytes(doc["payload"]),
        state=state,
        priority=doc["priority"],
        seq=doc["seq"],
        created_at=to_seconds(doc["created_at"]),
        run_at=_seconds(doc.get("ready_at")) if state is JobState.DELAYED else None,
        ttl=_float(doc.get("ttl")),
        max_attempts=doc["max_attempts"],
        timeout=_float(doc.get("timeout")),
        attempts=doc["attempts"],
        token=doc["token"],
        claimed_at=_seconds(doc.get("claimed_at")),
        heartbeat_at=_seconds(doc.get("heartbeat_at")),
        worker_id=doc.get("worker_id"),
        stalls=doc["stalls"],
        cancel_requested=bool(doc.get("cancel_requested")),
        progress=_bytes(doc.get("progress")),
        result=_bytes(doc.get("result")),
        error=doc.get("error"),
        finished_at=_seconds(doc.get("finished_at")),
        traceparent=doc.get("traceparent"),
        depends_on=tuple(str(i) for i in doc.get("depends_on") or ()),
        on_dependency_failure=_POLICIES.get(str(doc.get("dep_policy")), DependencyPolicy.FAIL),
        limit_key=doc.get("limit_key"),
        attempt_history=attempts_from(doc.get("attempt_history")),
        sequence=doc.get("sequence"),
        sequence_on_failure=_FAILURES.get(str(doc.get("seq_failure")), SequenceFailure.HOLD),
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _seconds(value: Any) -> float | None:
    return None if value is None else to_seconds(value)
