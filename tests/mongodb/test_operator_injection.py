"""The MongoDB backend never puts a caller's value where a query operator is allowed: an id,
queue or schedule id that is not a str is refused before any query is sent (issue 28, item 4),
even when a caller goes past ``Queue`` straight to the backend."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from relaymq.errors import ConfigError
from relaymq.job import JobState
from relaymq.records.store import CancelResult
from relaymq.schedules import store
from tests.conftest import require
from tests.support import case_mongodb
from tests.support.jobs import cancel, get_job, new_job, remove_job, retry_job

INJECTED: list[Any] = [{"$ne": None}, {"$regex": "^victim1$"}, {"$gt": ""}, ["victim1"], 7]


async def test_operator_documents_never_reach_a_query(tmp_path: Path) -> None:
    require(case_mongodb.CASE)
    b = await case_mongodb.CASE.make(None, tmp_path)
    try:
        q = "victims"
        await b.enqueue([new_job(q, "victim1"), new_job(q, "victim2")])
        actions: list[tuple[str, Callable[[Any], Awaitable[Any]]]] = [
            ("job_id", lambda bad: get_job(b, q, bad)),
            ("job_id", lambda bad: cancel(b, q, bad)),
            ("job_id", lambda bad: retry_job(b, q, bad)),
            ("job_id", lambda bad: remove_job(b, q, bad)),
            ("job_id", lambda bad: b.get_jobs(q, [bad])),
            ("job_id", lambda bad: b.cancel_jobs(q, ["victim2", bad])),
            ("job_id", lambda bad: b.retry_jobs(q, [bad])),
            ("job_id", lambda bad: b.remove_jobs(q, ["victim2", bad])),
            ("queue", lambda bad: get_job(b, bad, "victim1")),
            ("queue", lambda bad: b.counts(bad)),
            ("queue", lambda bad: b.drain(bad)),
            ("queue", lambda bad: b.obliterate(bad)),
            ("queue", lambda bad: b.pause(bad)),
            ("queue", lambda bad: b.is_paused(bad)),
            ("queue", lambda bad: b.list_jobs(bad, JobState.WAITING)),
            ("queue", lambda bad: b.claim([bad], "w", 5)),
            ("schedule id", lambda bad: store.remove(b, bad)),
            ("schedule id", lambda bad: store.pause(b, bad, True)),
            ("schedule id", lambda bad: store.advance(b, bad, 0, 1)),
            ("job_id", lambda bad: b.enqueue([new_job(q, bad)])),
            ("task", lambda bad: b.enqueue([new_job(q, "x", task=bad)])),
        ]
        for bad in INJECTED:
            for what, action in actions:
                with pytest.raises(ConfigError, match=what):
                    await action(bad)
        states = [(j.id, j.state) for j in await b.list_jobs(q, JobState.WAITING)]
        assert states == [("victim1", JobState.WAITING), ("victim2", JobState.WAITING)]
        assert await cancel(b, q, "victim1") is CancelResult.CANCELLED  # plain ids still work
    finally:
        await b.close()
