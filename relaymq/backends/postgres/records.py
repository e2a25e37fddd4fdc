"""Rows of the jobs table <-> ``Job`` records.

Columns are typed, so little can be damaged: a state nobody knows (past a dropped CHECK
constraint) or a dependency policy nobody knows. ``problems`` names it; ``to_job`` refuses
such a row with ``CorruptRecordError``; ``to_job_lenient`` (listings for operators) lists it
with neutral values and the damage in ``extra`` (``relaymq.backends.corrupt``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from relaymq.backends.corrupt import CORRUPT, reason, state_problem
from relaymq.errors import CorruptRecordError
from relaymq.job import DependencyPolicy, Job, JobState, SequenceFailure, attempts_from

_POLICIES = {p.value: p for p in DependencyPolicy}
_SEQ_FAILURES = {p.value: p for p in SequenceFailure}


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def problems(r: asyncpg.Record) -> list[str]:
    """What is wrong with a row, one phrase per bad column; empty for a sound row."""
    found: list[str] = []
    if (wrong := state_problem(r["state"])) is not None:
        found.append(wrong)
    policy = r.get("dep_policy")
    if policy is not None and policy not in _POLICIES:
        found.append(f"dep_policy is {policy!r}, not a dependency policy")
    seq_failure = r.get("seq_failure")
    if seq_failure is not None and seq_failure not in _SEQ_FAILURES:
        found.append(f"seq_failure is {seq_failure!r}, not 'hold' or 'continue'")
    return found


def describe(r: asyncpg.Record, bad: list[str]) -> str:
    """The reason raised for, and stored with, an unreadable job."""
    return reason(r["queue"], r["id"], bad)


def to_job(r: asyncpg.Record) -> Job:
    """The job of a row of ``<job>`` columns; ``CorruptRecordError`` for an unreadable one."""
    bad = problems(r)
    if bad:
        raise CorruptRecordError(describe(r, bad))
    try:
        return _build(r, {})
    except (KeyError, ValueError, TypeError, AttributeError) as e:
        raise CorruptRecordError(describe(r, [str(e)])) from e


def to_job_lenient(r: asyncpg.Record, state: JobState) -> Job:
    """Like ``to_job``, but a bad column gets a neutral value and the damage is told in
    ``extra``. Only for listings shown to operators (the row was selected by ``state``)."""
    bad = problems(r)
    if not bad:
        return to_job(r)
    fixed = {**dict(r), "state": state.value}
    if fixed.get("dep_policy") not in _POLICIES:
        fixed["dep_policy"] = None
    if fixed.get("seq_failure") not in _SEQ_FAILURES:
        fixed["seq_failure"] = None
    return _build(fixed, {CORRUPT: "; ".join(bad)})


def _build(r: Any, extra: dict[str, str]) -> Job:
    return Job(
        queue=r["queue"],
        id=r["id"],
        task=r["task"],
        payload=r["payload"],
        state=JobState(r["state"]),
        priority=r["priority"],
        seq=r["seq"],
        created_at=r["created_at"].timestamp(),
        run_at=_ts(r["run_at"]),
        ttl=r["ttl"],
        max_attempts=r["max_attempts"],
        timeout=r["timeout"],
        attempts=r["attempts"],
        token=r["token"],
        claimed_at=_ts(r["claimed_at"]),
        heartbeat_at=_ts(r["heartbeat_at"]),
        worker_id=r["worker_id"],
        stalls=r["stalls"],
        cancel_requested=r["cancel_requested"],
        progress=r["progress"],
        result=r["result"],
        error=r["error"],
        finished_at=_ts(r["finished_at"]),
        extra=extra,
        traceparent=r.get("traceparent"),
        depends_on=tuple(r.get("depends_on") or ()),
        on_dependency_failure=DependencyPolicy(r.get("dep_policy") or "fail"),
        limit_key=r.get("limit_key"),
        sequence=r.get("sequence"),
        sequence_on_failure=_SEQ_FAILURES[r.get("seq_failure") or "hold"],
        attempt_history=attempts_from(r.get("attempt_history")),
    )
