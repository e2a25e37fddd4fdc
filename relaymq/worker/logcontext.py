"""The job a log line is about: every record made while a handler runs carries its fields.

The worker sets ``CURRENT`` around each attempt (in the job's own asyncio task; a plain
function's thread runs in a copy of that context), and ``install`` puts a log record factory
in place that copies the job's fields onto every record made meanwhile: the worker's own and
those of the handler's code through any logger. ``relaymq.cli.logs`` prints them as fields.

Inside a job these four names are taken, as ``message`` and ``asctime`` always are: a call
that passes one of them in ``extra=`` gets logging's own ``KeyError``.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from typing import Any

from relaymq.job import Job

JOB_FIELDS = ("queue", "job_id", "task", "attempt")
"""The record attributes a job's log lines carry."""

CURRENT: contextvars.ContextVar[Job | None] = contextvars.ContextVar("relaymq_job", default=None)
"""The job whose attempt runs in this context; None outside of one."""

_lock = threading.Lock()


def fields(job: Job) -> dict[str, Any]:
    """The log fields of ``job`` (what ``extra=`` gives outside of its context)."""
    return {"queue": job.queue, "job_id": job.id, "task": job.task, "attempt": job.attempts}


class _JobRecords:
    """A record factory: the previous one's record, with the current job's fields added."""

    def __init__(self, previous: Any) -> None:
        self.previous = previous

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record: logging.LogRecord = self.previous(*args, **kwargs)
        job = CURRENT.get()
        if job is not None:
            d = record.__dict__
            d["queue"], d["job_id"] = job.queue, job.id
            d["task"], d["attempt"] = job.task, job.attempts
        return record


def install() -> None:
    """Make every log record created in a job's context carry its fields (once per process;
    a factory installed earlier is kept and called first)."""
    with _lock:
        current = logging.getLogRecordFactory()
        if not isinstance(current, _JobRecords):
            logging.setLogRecordFactory(_JobRecords(current))
