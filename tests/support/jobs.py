"""Small builders shared by the contract and worker tests."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from relaymq.backends.base import Backend
from relaymq.backends.memory import InMemoryBackend
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


class OneJobCalls:
    """A backend with the one-job ``cancel`` and ``retry_job`` that the first machine of
    tests/contract/test_stateful.py calls, which the backends answer with their batch forms
    now. The machine's source stays as it was, and
    with it the sequences its derandomized examples run (hypothesis seeds them from the
    source). Other sequences reach a known difference on RabbitMQ: a job a settle or a replay
    puts back in line goes behind what the broker already holds at its priority level
    (docs/guarantees.md, Ordering), where the model hands it out first."""

    def __init__(self, inner: Backend) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def cancel(self, queue: str, job_id: str) -> CancelResult:
        return await cancel(self._inner, queue, job_id)

    async def retry_job(self, queue: str, job_id: str) -> bool:
        return await retry_job(self._inner, queue, job_id)


class ModelWithOneJobCalls(InMemoryBackend):
    """The reference backend with the same one-job calls as ``OneJobCalls``."""

    async def cancel(self, queue: str, job_id: str) -> CancelResult:
        return await cancel(self, queue, job_id)

    async def retry_job(self, queue: str, job_id: str) -> bool:
        return await retry_job(self, queue, job_id)
