"""Small builders shared by the contract and worker tests."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from relaymq.job import NewJob

_ids = itertools.count(1)


def new_job(queue: str, job_id: str | None = None, **options: Any) -> NewJob:
    job_id = job_id or f"j{next(_ids)}-{uuid.uuid4().hex[:6]}"
    options.setdefault("task", "tests.tasks:noop")
    options.setdefault("payload", b'{"args":[],"kwargs":{}}')
    return NewJob(queue=queue, id=job_id, **options)


def queue_name(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"
