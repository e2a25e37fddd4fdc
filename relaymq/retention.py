"""Retention: how long finished jobs are kept, one policy per queue, applied by the elected
maintenance on every backend.

A queue's policy (``relaymq.records.retention.Retention``) is a record of the meta store
(``retention:<queue>``), so every worker of every process applies the same one. A queue that
stores none has the backend's default: ``Retention()`` (completed and cancelled jobs one day,
dead-lettered jobs seven days), or, on a backend given a retention of its own (PostgreSQL's
``?retention=SECONDS``), that many seconds for every finished state.

The elected maintenance of each queue (``relaymq.recovery``) calls ``enforce`` every
``Settings.retention_interval``: ``clean`` deletes, per state, the jobs that finished longer
ago than the window, each backend in bounded batches (a script call, statement or
transaction deletes at most a few thousand jobs, so claims never wait long behind a purge),
with every trace of them (record, indexes, keys, flow edges). Only finished jobs are ever
deleted. A job's id is free for a new job once its job is deleted.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

from relaymq.errors import ConfigError
from relaymq.instrumented import Instrumented
from relaymq.job import TERMINAL, JobState
from relaymq.records.retention import Retention

__all__ = [
    "PREFIX",
    "Retention",
    "describe",
    "enforce",
    "format_duration",
    "make_retention",
    "policy",
]

PREFIX = "retention:"
"""Where the meta store keeps each queue's policy: ``retention:<queue>``, JSON."""
UNITS = {"w": 7 * 86400.0, "d": 86400.0, "h": 3600.0, "m": 60.0}
"""The units ``format_duration`` writes, largest first (those the CLI's durations read)."""

Seconds = float | int | dt.timedelta


def format_duration(seconds: float) -> str:
    """``86400`` -> ``"1d"``, ``90`` -> ``"90s"``, ``0`` -> ``"forever"``: the largest whole
    unit."""
    if seconds == 0:
        return "forever"
    for unit, size in UNITS.items():
        if seconds % size == 0:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:g}s"


def describe(retention: Retention) -> str:
    """One line: ``completed 1d, cancelled 1d, failed 7d`` (and ``, at most N per state``)."""
    text = ", ".join(
        f"{name} {format_duration(getattr(retention, name))}"
        for name in ("completed", "cancelled", "failed")
    )
    if retention.max_finished is not None:
        text += f", at most {retention.max_finished} per state"
    return text


def _seconds(name: str, value: Seconds) -> float | int:
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"retention: {name} must be seconds or a timedelta, not {value!r}")
    return value


def make_retention(
    completed: Seconds | None = None,
    cancelled: Seconds | None = None,
    failed: Seconds | None = None,
    max_finished: int | None = None,
    *,
    base: Retention | None = None,
) -> Retention:
    """``base`` (default: ``Retention()``) with the windows given replaced; seconds or
    ``timedelta``, 0 keeps forever. Raises ``ConfigError`` on a negative or non-number."""
    base = base or Retention()
    return Retention(
        completed=base.completed if completed is None else _seconds("completed", completed),
        cancelled=base.cancelled if cancelled is None else _seconds("cancelled", cancelled),
        failed=base.failed if failed is None else _seconds("failed", failed),
        max_finished=max_finished,
    )


def encode(retention: Retention) -> bytes:
    return json.dumps(to_dict(retention), sort_keys=True).encode()


def decode(raw: bytes) -> Retention:
    """A stored policy; an unreadable one is a ``ConfigError`` naming what is wrong."""
    try:
        data: Any = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        return Retention(
            completed=data["completed"],
            cancelled=data["cancelled"],
            failed=data["failed"],
            max_finished=data.get("max_finished"),
        )
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"stored retention is unreadable: {e}") from None


def to_dict(retention: Retention) -> dict[str, Any]:
    """The policy as JSON-ready values (seconds), as ``queue info --json`` shows it."""
    return {
        "completed": retention.completed,
        "cancelled": retention.cancelled,
        "failed": retention.failed,
        "max_finished": retention.max_finished,
    }


def default(ops: Instrumented) -> Retention:
    """The policy of a queue that stores none: the backend's own retention when it was given
    one (PostgreSQL's ``?retention=``), else ``Retention()``."""
    seconds = ops.backend.retention
    if seconds is None:
        return Retention()
    return Retention(completed=seconds, cancelled=seconds, failed=seconds)


async def stored(ops: Instrumented, queue: str) -> Retention | None:
    """The policy ``queue`` stores, or None."""
    record = await ops.meta_get(PREFIX + queue)
    return None if record is None else decode(record.value)


async def policy(ops: Instrumented, queue: str) -> Retention:
    """The policy that applies to ``queue``: its own, or the default."""
    return await stored(ops, queue) or default(ops)


async def store(ops: Instrumented, queue: str, retention: Retention | None) -> None:
    """Store ``queue``'s policy for every worker; None goes back to the default."""
    if retention is None:
        await ops.meta_delete(PREFIX + queue)
    else:
        await ops.meta_put(PREFIX + queue, encode(retention))


async def enforce(ops: Instrumented, queue: str, retention: Retention) -> dict[JobState, int]:
    """Delete the finished jobs of ``queue`` that ``retention`` no longer keeps; how many, by
    state. Waiting, delayed, active and blocked jobs are never touched: ``clean`` deletes
    only jobs in the finished state it is given, in its own bounded batches."""
    removed: dict[JobState, int] = {}
    for state in sorted(TERMINAL):
        window = retention.window(state)
        n = await ops.clean(queue, state, window) if window > 0 else 0
        if retention.max_finished is not None:
            n += await _keep_newest(ops, queue, state, retention.max_finished)
        if n:
            removed[state] = n
    return removed


async def _keep_newest(ops: Instrumented, queue: str, state: JobState, keep: int) -> int:
    """Delete the oldest jobs of ``state`` beyond ``keep``: through ``clean`` with the age of
    the newest job to delete, so a job retried meanwhile is never deleted. The age is taken
    on this process's clock, so the count kept is exact up to the skew between it and the
    backend's (jobs that finished within the skew of that one may go too, or stay)."""
    extra = (await ops.counts(queue))[state] - keep
    if extra <= 0:
        return 0
    page = await ops.list_jobs(queue, state, offset=extra - 1, limit=1)
    finished = page[0].finished_at if page else None
    if finished is None:
        return 0
    # clean deletes what finished before now - older_than: a millisecond takes ``last`` too
    return await ops.clean(queue, state, max(0.0, time.time() - finished - 0.001))
