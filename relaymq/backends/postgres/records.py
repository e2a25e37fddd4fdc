"""Rows of the jobs table <-> ``Job`` records."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from relaymq.errors import CorruptRecordError
from relaymq.job import DependencyPolicy, Job, JobState


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def to_job(r: asyncpg.Record) -> Job:
    """The job of a row of ``<job>`` columns; ``CorruptRecordError`` for an unreadable one."""
    try:
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
            traceparent=r.get("traceparent"),
            depends_on=tuple(r.get("depends_on") or ()),
            on_dependency_failure=DependencyPolicy(r.get("dep_policy") or "fail"),
            limit_key=r.get("limit_key"),
        )
    except (KeyError, ValueError, TypeError, AttributeError) as e:
        raise CorruptRecordError(f"unreadable job row {dict(r)!r}: {e}") from e
