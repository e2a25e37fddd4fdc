"""Small builders shared by the contract and worker tests."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from relaymq.backends.base import Backend
from relaymq.instrumented import Instrumented
from relaymq.job import Job, NewJob
from relaymq.records.store import CancelResult

_ids = itertools.count(1)


def new_job(queue: str, job_id: str | None = None, **options: Any) -> NewJob:
    job_id = job_id or f"j{next(_ids)}-{uuid.uuid4().hex[:6]}"
    options.setdefault("task", "tests.tasks:noop")
    options.setdefault("payload", b'{"args":[],"kwargs":{}}')
    return NewJob(queue=queue, id=job_id, **options)


def queue_name(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# The one-job reads and actions the backends no longer have: the batch forms with one id, and
# the facade's cancel (which tells NOT_FOUND from ALREADY_TERMINAL), as users get them.


async def get_job(backend: Backend, queue: str, job_id: str) -> Job | None:
    [job] = await backend.get_jobs(queue, [job_id])
    return job


async def cancel(backend: Backend, queue: str, job_id: str) -> CancelResult:
    return await Instrumented(backend).cancel(queue, job_id)


async def retry_job(backend: Backend, queue: str, job_id: str) -> bool:
    [done] = await backend.retry_jobs(queue, [job_id])
    return done


async def remove_job(backend: Backend, queue: str, job_id: str) -> bool:
    [done] = await backend.remove_jobs(queue, [job_id])
    return done
