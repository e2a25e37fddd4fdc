"""The outbox's envelope: the jobs of one transactional enqueue, stored as ONE job of the queue
``relaymq.outbox`` in the outbox backend (a SQL backend in the application's own database),
written in the caller's transaction. The relay (``relaymq.outbox``) moves each envelope's jobs
to the app's backend, with their own ids (so a move made twice stores them once), then deletes
the envelope. Plain values: this module imports nothing of relaymq but other records.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any

from relaymq.errors import CorruptRecordError
from relaymq.job import DependencyPolicy, KeyMode, KeyRule, NewJob, SequenceFailure

QUEUE = "relaymq.outbox"
"""The outbox backend's queue of envelopes."""
TASK = "relaymq:outbox"
"""The task name envelopes carry (no worker runs it: the relay takes them)."""


def envelope(jobs: Sequence[NewJob], at: float) -> NewJob:
    """One envelope for ``jobs``, enqueued at ``at`` (seconds since the epoch)."""
    body = {"at": at, "jobs": [_fields(j) for j in jobs]}
    return NewJob(QUEUE, os.urandom(16).hex(), TASK, json.dumps(body).encode())


def opened(payload: bytes, now: float) -> list[NewJob]:
    """The jobs of an envelope, each delay shortened by the time since the enqueue (a delayed
    job runs when it would have, had it been stored at once). ``CorruptRecordError`` when the
    payload is not an envelope."""
    try:
        body = json.loads(payload)
        at = float(body["at"])
        jobs = [_job(fields) for fields in body["jobs"]]
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptRecordError(f"not an outbox envelope: {e!r}") from e
    late = max(0.0, now - at)
    return [dataclasses.replace(j, delay=max(0.0, j.delay - late)) if j.delay else j for j in jobs]


def _fields(job: NewJob) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(job):
        value = getattr(job, f.name)
        if isinstance(value, bytes):
            value = base64.b64encode(value).decode("ascii")
        elif isinstance(value, KeyRule):
            value = [value.key, value.mode.value, value.window]
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


def _job(fields: dict[str, Any]) -> NewJob:
    given = dict(fields)
    given["payload"] = base64.b64decode(given["payload"])
    rule = given.get("rule")
    if rule is not None:
        key, mode, window = rule
        given["rule"] = KeyRule(key, KeyMode(mode), float(window))
    given["depends_on"] = tuple(given.get("depends_on") or ())
    given["on_dependency_failure"] = DependencyPolicy(
        given.get("on_dependency_failure", DependencyPolicy.FAIL.value)
    )
    given["sequence_on_failure"] = SequenceFailure(
        given.get("sequence_on_failure", SequenceFailure.HOLD.value)
    )
    return NewJob(**given)
