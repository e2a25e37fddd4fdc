"""How the dashboard shows a job: its arguments, result and progress decoded, its times, and the
actions its state allows."""

from __future__ import annotations

import math
from typing import Any, TypeGuard

import orjson

from relaymq.job import DLQ_STATES, TERMINAL, Job, JobState, Outcome, error_line
from relaymq.overview import decoded, when
from relaymq.records.store import OUTCOME_WORDS

RETRYABLE = frozenset(DLQ_STATES | {JobState.CANCELLED})
"""The states whose jobs an operator's retry runs again."""
CANCELLABLE = frozenset(set(JobState) - TERMINAL)
"""The states whose jobs a cancel ends."""


def actions_for(state: JobState) -> list[str]:
    """The actions that apply to jobs in ``state``, in the order the buttons show."""
    return [
        a
        for a, ok in (
            ("retry", state in RETRYABLE),
            ("cancel", state in CANCELLABLE),
            ("remove", True),
        )
        if ok
    ]


def job_view(job: Job) -> dict[str, Any]:
    """What the job page shows, decoded for reading."""
    payload = decoded(job.payload)
    args = (
        payload
        if not isinstance(payload, dict)
        else {"args": payload.get("args", []), "kwargs": payload.get("kwargs", {})}
    )
    times = [
        ("created", job.created_at),
        ("run at", job.run_at),
        ("claimed", job.claimed_at),
        ("last heartbeat", job.heartbeat_at),
        ("finished", job.finished_at),
    ]
    return {
        "arguments": args,
        "result": decoded(job.result),
        "progress": decoded(job.progress),
        "bar": progress_bar(decoded(job.progress)),
        "attempts": [
            {
                "attempt": a.attempt,
                "outcome": OUTCOME_WORDS[a.outcome],
                "failed": a.outcome in FAILED_OUTCOMES,
                "worker": a.worker or "",
                "started": when(a.started_at),
                "ended": when(a.ended_at),
                "ran_for": "" if a.ran_for is None else seconds(a.ran_for),
                "error_line": error_line(a.error),
                "error": a.error or "",
            }
            for a in reversed(job.attempt_history)
        ],
        "actions": actions_for(job.state),
        "error_line": error_line(job.error),
        "times": [(label, when(at)) for label, at in times if at],
    }


FAILED_OUTCOMES = frozenset({Outcome.RETRY, Outcome.FAIL, Outcome.EXPIRE})
"""Outcomes of attempts that failed (shown in red)."""


def seconds(value: float) -> str:
    """A duration for people: ``0.4 ms``, ``850 ms``, ``3.2 s``, ``4 min 10 s``, ``2 h 5 min``."""
    if value < 0.01:
        return f"{value * 1000:.1f} ms"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    if value < 3600:
        return f"{value // 60:.0f} min {value % 60:.0f} s"
    return f"{value // 3600:.0f} h {value % 3600 // 60:.0f} min"


def progress_bar(value: Any) -> dict[str, Any] | None:
    """A progress value that reads as a fraction, as a bar: ``{"percent": 40}`` (0-100), or
    ``{"current": 4, "total": 10}``; its ``message`` (or ``step``) is shown beside it. None for
    anything else, shown as JSON."""
    if not isinstance(value, dict):
        return None
    percent = value.get("percent")
    current, total = value.get("current"), value.get("total")
    if _number(percent):
        fraction = float(percent) / 100
        label = f"{float(percent):.0f}%"
    elif _number(current) and _number(total) and total > 0:
        fraction = float(current) / float(total)
        label = f"{current} of {total}"
    else:
        return None
    note = value.get("message", value.get("step"))
    return {
        "percent": round(max(0.0, min(1.0, fraction)) * 100, 1),
        "label": label,
        "note": "" if note is None else str(note),
    }


def progress_of(job: Job) -> dict[str, Any]:
    """A listed job's progress: its bar, or its JSON text (cut at 60 characters)."""
    value = decoded(job.progress)
    text = orjson.dumps(value, default=str).decode()
    return {"bar": progress_bar(value), "text": text if len(text) <= 60 else text[:59] + "…"}


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def pretty(value: Any) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2, default=str).decode()
    except TypeError:
        return repr(value)
