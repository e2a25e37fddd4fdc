"""Turning job hashes and script replies into ``Job`` records, and values into script arguments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from relaymq.backends.redis.keys import PRIORITY_LIMIT
from relaymq.errors import ConfigError, CorruptRecordError
from relaymq.job import (
    Claim,
    DependencyPolicy,
    Job,
    JobState,
    NewJob,
    SequenceFailure,
    attempts_from,
)
from relaymq.records.meta import MetaRecord

Unreadable = tuple[Claim, str]
"""A job that was claimed but whose record cannot be read back, and why: the backend fails it
into the DLQ with that reason rather than hand it out or drop it."""


def opt(value: bytes | str | None) -> bytes:
    """An optional value as a script argument: ``b''`` for None, else ``b'=' + value``."""
    if value is None:
        return b""
    return b"=" + (value.encode() if isinstance(value, str) else value)


def num(value: float) -> str:
    """A float as a decimal string that reads back as exactly the same double."""
    return repr(float(value))


def _deps(raw: bytes | None) -> tuple[str, ...]:
    """A stored ``depends_on`` (a JSON array of ids); ``ValueError`` when it is not one."""
    if raw is None:
        return ()
    ids = orjson.loads(raw)
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ValueError(f"depends_on is {raw!r}, not a JSON array of job ids")
    return tuple(ids)


def _float(raw: bytes | None) -> float | None:
    return None if raw is None else float(raw)


def _str(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode()


_STATES = {s.value.encode(): s for s in JobState}
"""Stored state names to states, without the cost of an Enum call."""


def _state(raw: bytes | None) -> JobState:
    try:
        return _STATES[raw]  # type: ignore[index]
    except KeyError:
        raise ValueError(f"unknown state {raw!r}") from None


_POLICIES: dict[bytes | None, DependencyPolicy] = {
    None: DependencyPolicy.FAIL,
    **{p.value.encode(): p for p in DependencyPolicy},
}
"""Stored dependency policies (absent: the default) to policies, without an Enum call."""


def _policy(raw: bytes | None) -> DependencyPolicy:
    try:
        return _POLICIES[raw]
    except KeyError:
        raise ValueError(f"unknown dependency policy {raw!r}") from None


_ON_FAILURE: dict[bytes | None, SequenceFailure] = {
    None: SequenceFailure.HOLD,
    **{f.value.encode(): f for f in SequenceFailure},
}
"""Stored ``seq_failure`` values (absent: the default) to ``SequenceFailure``."""


def _on_failure(raw: bytes | None) -> SequenceFailure:
    try:
        return _ON_FAILURE[raw]
    except KeyError:
        raise ValueError(f"unknown sequence_on_failure {raw!r}") from None


def parse_job(queue: str, job_id: str, values: Sequence[bytes | None]) -> Job:
    """The ``Job`` for a job hash's values in ``JOB_FIELDS`` order (None where absent).

    Raises ``CorruptRecordError`` when the record cannot be read back.
    """
    try:
        (
            task,
            payload,
            state,
            priority,
            seq,
            created_at,
            run_at,
            ttl,
            max_attempts,
            timeout,
            attempts,
            token,
            claimed_at,
            heartbeat_at,
            worker_id,
            stalls,
            cancel_requested,
            progress,
            result,
            error,
            finished_at,
            traceparent,
            depends_on,
            dep_policy,
            limit_key,
            attempt_history,
            sequence,
            seq_failure,
        ) = values
        if task is None or payload is None:
            raise ValueError(f"job record has no {'task' if task is None else 'payload'!r} field")
        return Job(
            queue=queue,
            id=job_id,
            task=task.decode(),
            payload=payload,
            state=_state(state),
            priority=int(priority or b""),
            seq=int(seq or b""),
            created_at=float(created_at or b""),
            run_at=_float(run_at),
            ttl=_float(ttl),
            max_attempts=int(max_attempts or b"1"),
            timeout=_float(timeout),
            attempts=int(attempts or b"0"),
            token=int(token or b"0"),
            claimed_at=_float(claimed_at),
            heartbeat_at=_float(heartbeat_at),
            worker_id=_str(worker_id) if state == b"active" else None,
            stalls=int(stalls or b"0"),
            cancel_requested=cancel_requested == b"1",
            progress=progress,
            result=result,
            error=_str(error),
            finished_at=_float(finished_at),
            traceparent=_str(traceparent),
            depends_on=_deps(depends_on),
            on_dependency_failure=_policy(dep_policy),
            limit_key=_str(limit_key),
            sequence=_str(sequence),
            sequence_on_failure=_on_failure(seq_failure),
            attempt_history=attempts_from(attempt_history),
        )
    except (ValueError, TypeError, UnicodeDecodeError) as e:
        raise unreadable(queue, job_id, e) from e


CLAIMED_ORDER = (
    "queue id task payload state priority seq created_at run_at ttl max_attempts timeout "
    "attempts token claimed_at heartbeat_at worker_id stalls cancel_requested progress result "
    "error finished_at extra traceparent depends_on on_dependency_failure limit_key "
    "sequence sequence_on_failure attempt_history"
).split()
"""The order of ``Job``'s fields that ``parse_claimed`` passes positionally (a test checks it):
keyword arguments cost a worker a microsecond and a half per job."""


def parse_claimed(
    queue: str, job_id: str, pairs: list[bytes], token: int, now: float, worker_id: str
) -> Job:
    """The ``Job`` that ``claim.lua`` made out of the record it read (HGETALL ``pairs``, taken
    before the claim): the claim's changes are applied here, as the script applied them.

    Raises ``CorruptRecordError`` when the record cannot be read back.
    """
    try:
        d = dict(zip(pairs[::2], pairs[1::2], strict=True))
        g = d.get
        run_at, ttl, timeout, error = g(b"run_at"), g(b"ttl"), g(b"timeout"), g(b"error")
        finished_at, stalls = g(b"finished_at"), g(b"stalls")
        return Job(
            queue,
            job_id,
            d[b"task"].decode(),
            d[b"payload"],
            JobState.ACTIVE,
            int(d[b"priority"]),
            int(d[b"seq"]),
            float(d[b"created_at"]),
            None if run_at is None else float(run_at),
            None if ttl is None else float(ttl),
            int(g(b"max_attempts", b"1")),
            None if timeout is None else float(timeout),
            int(g(b"attempts", b"0")) + 1,
            token,
            now,
            now,
            worker_id,
            0 if stalls is None else int(stalls),
            g(b"cancel_requested") == b"1",
            g(b"progress"),
            g(b"result"),
            None if error is None else error.decode(),
            None if finished_at is None else float(finished_at),
            {},
            None if (tp := g(b"traceparent")) is None else tp.decode(),
            () if (deps := g(b"depends_on")) is None else _deps(deps),
            _policy(g(b"dep_policy")),
            None if (lk := g(b"limit_key")) is None else lk.decode(),
            None if (sq := g(b"sequence")) is None else sq.decode(),
            _on_failure(g(b"seq_failure")),
            () if (h := g(b"attempt_history")) is None else attempts_from(h),
        )
    except (KeyError, ValueError, TypeError, UnicodeDecodeError) as e:
        raise unreadable(queue, job_id, e) from e


def unreadable(queue: str, job_id: str, e: Exception) -> CorruptRecordError:
    """The error for a job record that cannot be read, saying what is wrong in words."""
    if isinstance(e, KeyError):  # a field the record must have
        name = e.args[0].decode() if isinstance(e.args[0], bytes) else e.args[0]
        reason = f"job record has no {name!r} field"
    elif isinstance(e, UnicodeDecodeError):
        reason = f"a text field is not UTF-8 ({e.reason} at byte {e.start})"
    else:
        reason = str(e) or type(e).__name__
    return CorruptRecordError(f"job {job_id!r} of queue {queue!r} is unreadable: {reason}")


def claimed_jobs(
    queues: Sequence[str], reply: list[Any], worker_id: str
) -> tuple[list[Job], list[Unreadable]]:
    """The jobs of a ``claim.lua`` reply (``queues``: the visit order the script was given)."""
    now = float(reply[0])
    jobs: list[Job] = []
    unreadable: list[Unreadable] = []
    for at in range(2, len(reply), 4):
        queue, job_id, token = queues[reply[at] - 1], reply[at + 1].decode(), reply[at + 2]
        try:
            jobs.append(parse_claimed(queue, job_id, reply[at + 3], token, now, worker_id))
        except CorruptRecordError as e:
            unreadable.append((Claim(queue, job_id, token, now), str(e)))
    return jobs, unreadable


def held_back(queues: Sequence[str], limited: list[Any]) -> dict[str, float | None]:
    """The queues a claim script found held back by their limits (``{k, retry, ...}``: the
    index of the queue in ``queues``, and the seconds until its rate window ends or ``''``)."""
    return {
        queues[int(limited[at]) - 1]: float(limited[at + 1]) if limited[at + 1] else None
        for at in range(0, len(limited), 2)
    }


def delivered_jobs(queue: str, claimed: list[Any]) -> tuple[list[Job], list[Unreadable]]:
    """The jobs of a ``claim_delivered.lua`` reply (records in ``JOB_FIELDS`` order)."""
    jobs: list[Job] = []
    unreadable: list[Unreadable] = []
    for at in range(0, len(claimed), 2):
        job_id, values = claimed[at].decode(), claimed[at + 1]
        try:
            jobs.append(parse_job(queue, job_id, values))
        except CorruptRecordError as e:
            unreadable.append((Claim(queue, job_id, int(values[11]), 0.0), str(e)))
    return jobs, unreadable


def promoted_jobs(queue: str, reply: list[Any]) -> list[Job]:
    """The jobs of a ``promote_due.lua`` reply."""
    return [parse_job(queue, reply[at].decode(), reply[at + 1]) for at in range(0, len(reply), 2)]


def deps_arg(j: NewJob) -> str:
    """A job's dependencies as ``enqueue.lua`` reads them ('' for none)."""
    if not j.depends_on:
        return ""
    return f"{j.on_dependency_failure.value} {orjson.dumps(list(j.depends_on)).decode()}"


def sequence_arg(j: NewJob) -> str:
    """A job's sequence as ``enqueue.lua`` reads it ('' for none)."""
    if j.sequence is None:
        return ""
    return f"{j.sequence_on_failure.value} {j.sequence}"


def rule_arg(j: NewJob) -> str:
    """A job's key rule as ``enqueue.lua`` reads it ('' for none)."""
    if j.rule is None:
        return ""
    return f"{j.rule.mode.value} {float(j.rule.window)!r} {j.rule.key}"


def enqueue_head(j: NewJob) -> str:
    """The options part of a job's head argument to ``enqueue.lua`` (the id follows), checked."""
    if not -PRIORITY_LIMIT < j.priority < PRIORITY_LIMIT:
        raise ConfigError(
            f"priority {j.priority} of job {j.id!r} is outside "
            f"({-PRIORITY_LIMIT}, {PRIORITY_LIMIT}) on the Redis backend"
        )
    ttl = "-" if j.ttl is None else repr(float(j.ttl))
    timeout = "-" if j.timeout is None else repr(float(j.timeout))
    traceparent = "-" if j.traceparent is None else j.traceparent
    if traceparent == "" or traceparent.split() != [traceparent]:
        raise ConfigError(f"traceparent {j.traceparent!r} of job {j.id!r} is not one word")
    limit_key = "-" if j.limit_key is None else "=" + j.limit_key
    return (
        f"{j.priority} {float(j.delay)!r} {ttl} {j.max_attempts} {timeout} {traceparent} "
        f"{limit_key} "
    )


def meta_record(key: str, value: bytes, version: bytes, expires: bytes) -> MetaRecord:
    """A meta record from a meta script's reply (``expires`` empty: never)."""
    return MetaRecord(key, bytes(value), int(version), float(expires) if expires else None)
