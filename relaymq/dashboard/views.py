"""How the dashboard shows a job: its arguments, result and progress decoded, its times, and the
actions its state allows."""

from __future__ import annotations

from typing import Any

from relaymq.cli.output import decoded, when
from relaymq.job import DLQ_STATES, TERMINAL, Job, JobState, error_line

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
        "actions": actions_for(job.state),
        "error_line": error_line(job.error),
        "times": [(label, when(at)) for label, at in times if at],
    }


def pretty(value: Any) -> str:
    import orjson

    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2, default=str).decode()
    except TypeError:
        return repr(value)
